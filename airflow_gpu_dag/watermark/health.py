"""Liveness of the watermark controller: a heartbeat file and an HTTP ``/health`` endpoint.

A controller is *healthy* when its last **completed** tick (active or standby) is younger than
``3 x interval``. A frozen loop, a hung tick or a dead process stops the heartbeat; a tick whose REST
calls failed still completes (it logs and counts the failure in metrics), so a liveness probe does not
restart a controller for an api-server outage it cannot fix.

- ``--heartbeat-file PATH``: ``{"last_tick": epoch, "interval": s, "pid": n, "active": bool}``,
  rewritten atomically (temporary file + rename) after every tick; checked by
  ``airflow gpu-dag watermark-health --heartbeat-file PATH [--max-age S]`` (exit 0 fresh, 1 not),
  for exec probes and the compose healthcheck.
- ``--health-port PORT [--health-host HOST]``: ``GET /health`` answers 200 with a small JSON body
  when healthy, 503 otherwise (also before the first tick completed); default host 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from airflow_gpu_dag.core.model.resources import real_number
from airflow_gpu_dag.watermark.config import MAX_INTERVAL

log = logging.getLogger(__name__)

__all__ = [
    "STALE_AFTER_INTERVALS",
    "HealthServer",
    "Heartbeat",
    "check_heartbeat_file",
    "heartbeat_status",
    "read_heartbeat_file",
    "write_heartbeat_file",
]

#: Healthy while the last completed tick is younger than this many intervals.
STALE_AFTER_INTERVALS = 3.0


def write_heartbeat_file(path: str | Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically: a reader sees the old or the new file, whole."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_heartbeat_file(path: str | Path) -> dict[str, Any]:
    """The heartbeat written by a controller.

    :raises ValueError: missing, unreadable, or not a heartbeat (the message says which).
    """
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"no heartbeat file {path}: the controller has not completed a tick") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"heartbeat file {path} is unreadable ({err})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"heartbeat file {path} does not hold a JSON object")
    for key in ("last_tick", "interval"):
        value = raw.get(key)
        if not math.isfinite(real_number(value)):  # also a bool, a string, 10**400
            raise ValueError(f"heartbeat file {path}: {key!r} is missing or not a number ({value!r})")
    if not 0 < real_number(raw["interval"]) <= MAX_INTERVAL:  # a limit <= 0 or infinite (1e308 x 3)
        raise ValueError(
            f"heartbeat file {path}: 'interval' {raw['interval']!r} is not a tick interval of a controller "
            f"(> 0 and at most {MAX_INTERVAL:.0f} s)"
        )
    return raw


def check_heartbeat_file(
    path: str | Path, max_age: float | None = None, now: float | None = None
) -> tuple[bool, str]:
    """``(fresh, message)``: fresh when the last tick is younger than ``max_age`` seconds (default
    ``3 x`` the controller's interval, from the file) and not as far in the future (clock skew)."""
    status = heartbeat_status(path, max_age, now)
    return status["fresh"], status["message"]


def heartbeat_status(
    path: str | Path, max_age: float | None = None, now: float | None = None
) -> dict[str, Any]:
    """What ``airflow gpu-dag watermark-health`` reports (``-o json``): ``fresh``, ``status`` (``ok``,
    ``stale``, ``clock_skew``, ``unreadable``), ``message`` (the line it prints), ``heartbeat_file``,
    ``age_s``, ``limit_s``, ``active`` and ``pid`` (None when the file cannot be read)."""
    status: dict[str, Any] = {
        "fresh": False,
        "status": "unreadable",
        "message": "",
        "heartbeat_file": str(path),
        "age_s": None,
        "limit_s": None,
        "active": None,
        "pid": None,
    }
    try:
        beat = read_heartbeat_file(path)
    except ValueError as err:
        return {**status, "message": str(err)}
    now = time.time() if now is None else now
    limit = float(max_age) if max_age is not None else STALE_AFTER_INTERVALS * float(beat["interval"])
    age = now - float(beat["last_tick"])
    role = "active" if beat.get("active") else "standby"
    status.update(age_s=round(age, 3), limit_s=limit, active=bool(beat.get("active")), pid=beat.get("pid"))
    if age <= -limit:
        # A tick "in the future": this check's clock is behind the controller's. Trusting it would
        # read a controller that died as alive until the clocks meet.
        return {
            **status,
            "status": "clock_skew",
            "message": f"clock skew: last tick {-age:.1f}s in the future (limit {limit:g}s; {role}, pid "
            f"{beat.get('pid')}): this host's clock and the controller's disagree; sync them (NTP)",
        }
    if age < limit:
        message = f"ok: last tick {age:.1f}s ago (limit {limit:g}s), {role}, pid {beat.get('pid')}"
        return {**status, "fresh": True, "status": "ok", "message": message}
    return {
        **status,
        "status": "stale",
        "message": f"stale: last tick {age:.1f}s ago, limit {limit:g}s ({role}, pid {beat.get('pid')}): "
        "the watermark controller is not ticking",
    }


class Heartbeat:
    """The controller's heartbeat: call :meth:`beat` after each completed tick."""

    def __init__(
        self, interval: float, path: str | Path | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.interval = float(interval)
        self.path = Path(path) if path else None
        self.last_tick: float | None = None
        self.active = False
        self._clock = clock
        self._lock = threading.Lock()

    def beat(self, active: bool) -> None:
        """A tick completed (``active``: this controller holds the lease)."""
        with self._lock:
            self.last_tick = self._clock()
            self.active = bool(active)
        if self.path is not None:
            try:
                write_heartbeat_file(self.path, self.snapshot())
            except OSError as err:
                log.error("cannot write the heartbeat file %s (%s)", self.path, err)

    def snapshot(self) -> dict[str, Any]:
        """What the file holds (``last_tick`` None before the first tick)."""
        with self._lock:
            return {
                "last_tick": self.last_tick,
                "interval": self.interval,
                "pid": os.getpid(),
                "active": self.active,
            }

    def status(self, now: float | None = None) -> tuple[bool, dict[str, Any]]:
        """``(healthy, body)`` for ``GET /health``."""
        now = self._clock() if now is None else now
        body = self.snapshot()
        limit = STALE_AFTER_INTERVALS * self.interval
        if body["last_tick"] is None:
            return False, {**body, "status": "starting", "age": None, "max_age": limit}
        age = now - body["last_tick"]
        # as far in the future as the limit: the clock stepped back, and a loop that stopped ticking
        # would look fresh for as long (the file check says the same)
        healthy = -limit < age < limit
        return healthy, {
            **body,
            "status": "ok" if healthy else ("stale" if age > 0 else "clock skew"),
            "age": round(age, 3),
            "max_age": limit,
        }

    def serve(self, port: int, host: str = "127.0.0.1") -> HealthServer:
        """Start ``GET /health`` on ``host:port`` in a daemon thread (port 0: any free port)."""
        server = HealthServer(self, host, port)
        server.start()
        return server


class HealthServer:
    """A tiny HTTP server answering ``GET /health`` from a :class:`Heartbeat`."""

    def __init__(self, heartbeat: Heartbeat, host: str, port: int) -> None:
        beat = heartbeat

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/health":
                    self._send(404, {"error": "not found; GET /health"})
                    return
                healthy, body = beat.status()
                self._send(200 if healthy else 503, body)

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("health: " + format, *args)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="gpu-dag-health", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` actually bound."""
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
