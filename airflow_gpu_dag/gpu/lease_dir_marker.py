"""One lease directory per host: a worker warns when another worker of its host uses another one.

Leases only keep tasks apart when every worker of a host shares one lease directory (``[gpu_dag]
lease_dir``). Two workers configured with different ones (a typo, another ``TMPDIR`` under the
default) each see only their own leases and hand out the same GPUs twice, silently.

So each worker announces the directory it uses in a well-known place of the host,
:func:`default_marker_dir` (``/dev/shm/airflow-gpu-dag-lease-dirs``, or the temporary directory where
there is no ``/dev/shm``): one small file per lease directory, named after it, saying which directory
and which process, refreshed when a lease is taken and at each heartbeat. A worker that takes a lease
and finds a fresh marker of another directory (refreshed within twice that worker's ``lease_ttl``, by
another process) logs a warning naming both directories and the fix.

What it cannot see: workers that do not share the marker place (containers with their own
``/dev/shm`` and ``/tmp``, other users when the place is not writable by all), and a worker that was
idle for longer than that window. The check never blocks a lease. A marker not refreshed for a day is
removed by the next worker that looks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["LeaseDirMarkers", "default_marker_dir"]

log = logging.getLogger(__name__)

#: Seconds after which a marker nobody refreshed is removed (the place holds only recent ones).
_FORGOTTEN_S = 86400.0

#: The other lease directories already warned about by this process (one warning each).
_warned: set[str] = set()


def default_marker_dir() -> Path:
    """Where the workers of this host announce their lease directories: under ``/dev/shm`` (shared by
    every process of the host, whatever its ``TMPDIR``, and empty after a reboot), else the
    temporary directory."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else Path(tempfile.gettempdir())
    return base / "airflow-gpu-dag-lease-dirs"


class LeaseDirMarkers:
    """The markers of the lease directories in use on this host, seen from a worker using ``lease_dir``."""

    def __init__(self, marker_dir: Path, lease_dir: Path, ttl_s: float) -> None:
        self.marker_dir = Path(marker_dir)
        self.lease_dir = Path(os.path.abspath(lease_dir))
        self.ttl_s = ttl_s
        digest = hashlib.sha256(os.fsencode(self.lease_dir)).hexdigest()[:16]  # any name the OS takes
        self.path = self.marker_dir / f"{digest}.json"

    def touch(self) -> None:
        """Announce (or re-announce) this worker's lease directory; problems are logged, not raised."""
        try:
            if not self.marker_dir.is_dir():
                self.marker_dir.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):  # every user's workers may announce (sticky)
                    os.chmod(self.marker_dir, 0o1777)
            body = {
                "lease_dir": str(self.lease_dir),
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "ttl_s": self.ttl_s,
            }
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(body), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.utime(self.path)  # another user's marker of the same directory: keep it fresh
            log.debug("GPU lease directory marker %s not written: %s", self.path, err)

    @staticmethod
    def _ours(body: dict[str, Any]) -> bool:
        """A marker this process wrote: its pid, on this host (containers that share ``/dev/shm`` have
        pid namespaces, and host names, of their own; a marker naming no host is this host's)."""
        return body.get("pid") == os.getpid() and body.get("host") in (None, socket.gethostname())

    def others(self, now: float | None = None) -> list[dict[str, Any]]:
        """Fresh markers of other lease directories, written by other processes."""
        now = time.time() if now is None else now
        found = []
        try:
            entries = list(self.marker_dir.glob("*.json"))
        except OSError:
            return []
        for entry in entries:
            if entry == self.path:
                continue
            try:
                age = now - entry.stat().st_mtime
                if age > _FORGOTTEN_S:  # a lease directory nobody has used for a day
                    entry.unlink()
                    continue
                body = json.loads(entry.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(body, dict) or not isinstance(body.get("lease_dir"), str):
                continue
            if body["lease_dir"] == str(self.lease_dir) or self._ours(body):
                continue  # the same directory, or this process itself (it uses one at a time)
            ttl = body.get("ttl_s")
            theirs = float(ttl) if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) else 0.0
            window = 2 * max(self.ttl_s, theirs if math.isfinite(theirs) else 0.0)
            if age <= window:
                found.append({**body, "age_s": max(0.0, age)})
        return found

    def announce(self) -> list[dict[str, Any]]:
        """:meth:`touch`, then warn (once per other directory and process) about :meth:`others`;
        returns them."""
        self.touch()
        others = self.others()
        for other in others:
            if other["lease_dir"] in _warned:
                continue
            _warned.add(other["lease_dir"])
            log.warning(
                "GPU leases: this worker uses lease directory %s, but another worker of this host (pid %s, "
                "%.0fs ago) uses %s. Workers with different lease directories do not see each other's "
                "leases and hand out the same GPUs twice. Fix: set [gpu_dag] lease_dir to one directory "
                "for every worker of this host (a local path; the same TMPDIR where the default is used). "
                "(Markers: %s)",
                self.lease_dir,
                other.get("pid"),
                other["age_s"],
                other["lease_dir"],
                self.marker_dir,
            )
        return others
