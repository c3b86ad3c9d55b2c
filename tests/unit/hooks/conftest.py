"""Shared fakes and helpers of the tests under ``tests/unit/hooks/``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

#: What a call may take beyond its limit on a loaded machine.
MARGIN = 3.0


def timed(call: Callable[[], Any]) -> tuple[BaseException | None, float]:
    """Run ``call``: what it raised (None if nothing) and how long it took."""
    started = time.monotonic()
    try:
        call()
    except BaseException as err:  # what the call raised, for the test to look at
        return err, time.monotonic() - started
    return None, time.monotonic() - started


class TrickleServer:
    """An HTTP server on 127.0.0.1 that answers every request slowly, one byte every ``every`` seconds:
    after the status line and headers (``mode="body"``), or inside the headers, which never end
    (``mode="headers"``). Each answer stops after ``limit`` seconds, the server ``lifetime`` seconds
    after it started; leaving the ``with`` block stops both at once."""

    def __init__(
        self, mode: str = "body", every: float = 0.2, limit: float = 20.0, lifetime: float = 120.0
    ) -> None:
        self.mode, self.every, self.limit, self.lifetime = mode, every, limit, lifetime
        self.requests: list[bytes] = []
        self.open = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> TrickleServer:
        accept = threading.Thread(target=self._accept, name="trickle-accept", daemon=True)
        self._threads.append(accept)
        accept.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        end = time.monotonic() + self.lifetime
        while not self._stop.is_set() and time.monotonic() < end:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # the 0.1-s poll, or the listener closed
                continue
            thread = threading.Thread(target=self._answer, args=(conn,), name="trickle-answer", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        with self._lock:
            self.open += 1
        try:
            conn.settimeout(2.0)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            with self._lock:
                self.requests.append(head.split(b"\r\n", 1)[0])
            if self.mode == "headers":
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            else:
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
                )
            end = time.monotonic() + self.limit
            while time.monotonic() < end and not self._stop.wait(self.every):
                conn.sendall(b"a" if self.mode == "headers" else b" ")
        except OSError:  # the client closed the connection: what a call that gives up does
            pass
        finally:
            conn.close()
            with self._lock:
                self.open -= 1

    def wait_closed(self, seconds: float = 10.0) -> bool:
        """Whether every connection was closed (by the client) within ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with self._lock:
                if self.open == 0:
                    return True
            time.sleep(0.05)
        return False
