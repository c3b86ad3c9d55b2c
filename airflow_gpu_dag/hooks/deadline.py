"""One deadline for a whole HTTP call: connect, TLS, sending and every read of the answer.

httpx (through httpcore) applies a ``timeout`` to each socket operation, not to the call: a server,
or a proxy in front of one, that sends a byte a little faster than the read timeout keeps a call
going for as long as it likes. This module bounds the call instead:

- :func:`deadline` sets a monotonic deadline for the calling thread (a sooner outer one stays);
- :func:`deadline_client` builds an ``httpx.Client`` whose sockets cap every connect, TLS handshake,
  write and read at the time left, and fail with a timeout once none is left; a host name is resolved
  in a daemon thread joined with the time left (a hung resolver fails the call in time, and its thread
  ends when the resolver gives up by its own timeouts);
- :func:`fetch` sends one request and reads its whole answer by the deadline, checking it between
  chunks too (which also bounds a transport of one's own, e.g. ``httpx.MockTransport``), and refuses
  an answer over ``max_bytes``.

Deadlines are per thread: one client may serve several threads, each with its own deadline.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

log = logging.getLogger(__name__)

__all__ = ["MAX_ANSWER_BYTES", "AnswerTooLarge", "deadline", "deadline_client", "fetch", "time_left"]

#: Largest answer :func:`fetch` reads (an api-server page or a Prometheus query is far smaller).
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: Bytes written per socket call, so that a peer that reads slowly cannot stretch one write.
_WRITE_CHUNK = 16 * 1024

_local = threading.local()


class AnswerTooLarge(httpx.HTTPError):
    """The answer is larger than :func:`fetch` reads."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """HTTP calls made by this thread inside the block end within ``seconds`` (an enclosing deadline
    that comes sooner stays); yields the deadline on the :func:`time.monotonic` clock.

    :raises ValueError: ``seconds`` is not a finite number > 0.
    """
    if not (isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 < seconds < math.inf):
        raise ValueError(f"a deadline needs seconds > 0, not {seconds!r}")
    try:
        span = float(seconds)
    except OverflowError:  # an int beyond any float: no finite number of seconds
        raise ValueError(f"a deadline needs a finite number of seconds > 0, not {seconds!r}") from None
    previous: float | None = getattr(_local, "at", None)
    at = time.monotonic() + span
    if previous is not None:
        at = min(at, previous)
    _local.at = at
    try:
        yield at
    finally:
        _local.at = previous


def time_left() -> float | None:
    """Seconds left before this thread's deadline (<= 0 once passed); None without a deadline."""
    at: float | None = getattr(_local, "at", None)
    return None if at is None else at - time.monotonic()


def _cap(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` for one socket operation, capped at the time left; ``error`` once none is left."""
    left = time_left()
    if left is None:
        return timeout
    if left <= 0:
        raise error("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    """A connection whose every operation is capped at the calling thread's time left."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _cap(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), _WRITE_CHUNK):
            self._inner.write(buffer[start : start + _WRITE_CHUNK], _cap(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        limit = _cap(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, limit))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def _resolve(host: str, port: int) -> list[str]:
    """The addresses to try for ``host``: itself when it is an address literal or no deadline is
    set, else its addresses resolved within the time left."""
    try:
        ipaddress.ip_address(host)
        return [host]
    except ValueError:
        pass
    left = time_left()
    if left is None:
        return [host]
    found: dict[str, Any] = {}

    def lookup() -> None:
        try:
            found["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as err:  # UnicodeError: a name the IDNA codec refuses
            found["error"] = err

    thread = threading.Thread(target=lookup, name=f"resolve-{host}"[:60], daemon=True)
    thread.start()
    thread.join(max(0.0, left))
    if thread.is_alive():
        raise httpcore.ConnectTimeout(f"resolving {host} took longer than the call's deadline")
    if "infos" not in found:  # the lookup failed (or its thread died of something unforeseen)
        raise httpcore.ConnectError(f"cannot resolve {host}: {found.get('error', 'the lookup failed')}")
    addresses = [str(info[4][0]) for info in found["infos"]]
    return list(dict.fromkeys(addresses)) or [host]


class _Backend(httpcore.NetworkBackend):
    """Opens :class:`_Stream` connections: name resolution, connect and TLS within the time left."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        options = list(socket_options or ())
        failed: Exception | None = None
        for address in _resolve(host, port):
            limit = _cap(timeout, httpcore.ConnectTimeout)
            try:
                return _Stream(self._inner.connect_tcp(address, port, limit, local_address, options))
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as err:
                failed = err  # the next address, while time is left
        raise failed or httpcore.ConnectError(f"no address for {host}")

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        limit = _cap(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, limit, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _bound(transport: object) -> bool:
    """Give ``transport``'s connection pool the deadline-capped backend; False when it has none
    (a transport of one's own, or an httpx whose internals differ)."""
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(backend, httpcore.NetworkBackend):
        return False
    if not isinstance(backend, _Backend):
        pool._network_backend = _Backend(backend)  # type: ignore[union-attr]
    return True


def deadline_client(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` (same arguments) whose connections honour the calling thread's
    :func:`deadline`, through its proxies too. A ``transport=`` given is used as it is."""
    client = httpx.Client(**kwargs)
    if kwargs.get("transport") is None:
        transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
        if not all(_bound(t) for t in transports if isinstance(t, httpx.HTTPTransport)):
            log.warning(
                "httpx %s: cannot cap each socket operation at the call's deadline; only the reads of "
                "an answer's body are bounded",
                httpx.__version__,
            )
    return client


def fetch(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    seconds: float | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
    **kwargs: Any,
) -> httpx.Response:
    """Send one request on ``client`` and read its whole answer, all within ``seconds`` (None: within
    this thread's :func:`deadline`, or the client's own timeouts without one).

    Keyword arguments go to ``httpx`` (``json=``, ``params=``, ``headers=``, ``auth=``,
    ``follow_redirects=``). The response returned is read and closed.

    :raises httpx.TimeoutException: no complete answer by the deadline.
    :raises AnswerTooLarge: an answer over ``max_bytes``.
    :raises httpx.HTTPError: any other transport error.
    """
    with deadline(seconds) if seconds is not None else contextlib.nullcontext():
        at = getattr(_local, "at", None)
        send_options = {key: kwargs.pop(key) for key in ("auth", "follow_redirects") if key in kwargs}
        left = None if at is None else at - time.monotonic()
        if left is not None:
            # connect, pool wait, write, read: at most the rest, and at most a shorter timeout given
            given = kwargs.get("timeout")
            limit = max(0.0, left)
            if isinstance(given, int | float) and not isinstance(given, bool) and 0 < given < left:
                limit = float(given)
            kwargs["timeout"] = httpx.Timeout(limit)
        request = client.build_request(method, url, **kwargs)
        if left is not None and left <= 0:
            raise httpx.ConnectTimeout("the call's deadline has passed before it was sent", request=request)
        response = client.send(request, stream=True, **send_options)
        try:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    too_large = AnswerTooLarge(f"answer over {max_bytes:,} bytes")
                    too_large.request = request  # as httpx's own errors carry it
                    raise too_large
                chunks.append(chunk)
                if at is not None and time.monotonic() > at:
                    raise httpx.ReadTimeout("no complete answer by the call's deadline", request=request)
        finally:
            response.close()
    # the body is decoded already: drop what said how it travelled
    skip = {"content-encoding", "content-length", "transfer-encoding"}
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in skip]
    return httpx.Response(
        response.status_code, headers=headers, content=b"".join(chunks), request=response.request
    )
