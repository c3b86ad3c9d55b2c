"""Tests of ``airflow_gpu_dag.hooks.deadline``."""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import httpcore
import httpx
import pytest

from airflow_gpu_dag.hooks import deadline as deadline_module
from airflow_gpu_dag.hooks.deadline import AnswerTooLarge, deadline, deadline_client, fetch, time_left
from tests.unit.hooks.conftest import MARGIN, TrickleServer, timed


# -- deadline, fetch ------------------------------------------------------------------------------------
def test_deadlines_nest_and_the_sooner_one_wins() -> None:
    assert time_left() is None
    with deadline(10.0):
        with deadline(100.0):
            left = time_left()
            assert left is not None and 9.0 < left <= 10.0
        with deadline(0.5):
            left = time_left()
            assert left is not None and left <= 0.5
        left = time_left()
        assert left is not None and left > 9.0
    assert time_left() is None
    with pytest.raises(ValueError), deadline(float("inf")):
        pass


def test_fetch_checks_the_deadline_between_chunks_of_a_transport_of_ones_own() -> None:
    class Slow(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            for _ in range(100):
                time.sleep(0.1)
                yield b" "

    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=Slow()))
    with deadline_client(transport=transport) as client:
        err, took = timed(lambda: fetch(client, "GET", "http://x/", seconds=0.5))
    assert isinstance(err, httpx.ReadTimeout) and took < 0.5 + MARGIN


def test_fetch_refuses_an_answer_too_large() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 5000))
    with deadline_client(transport=transport) as client:
        with pytest.raises(AnswerTooLarge):
            fetch(client, "GET", "http://x/", seconds=5, max_bytes=4096)
        assert fetch(client, "GET", "http://x/", seconds=5, max_bytes=5000).content == b"x" * 5000


def test_fetch_errors_carry_the_request_as_httpx_errors_do() -> None:
    """A caller reading ``err.request`` (to name the URL) must not get httpx's RuntimeError."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 5000))
    with deadline_client(transport=transport) as client:
        with pytest.raises(AnswerTooLarge) as too_large:
            fetch(client, "GET", "http://x/big", seconds=5, max_bytes=4096)
        assert too_large.value.request.url.path == "/big"
        with deadline(1e-9), pytest.raises(httpx.ConnectTimeout) as late:
            time.sleep(0.001)
            fetch(client, "GET", "http://x/late")
        assert late.value.request.url.path == "/late"


def test_a_shorter_timeout_the_caller_gives_is_kept_under_a_deadline() -> None:
    seen: list[dict[str, float | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200)

    with deadline_client(transport=httpx.MockTransport(answer)) as client:
        fetch(client, "GET", "http://x/", seconds=60, timeout=2.5)
        fetch(client, "GET", "http://x/", seconds=5, timeout=30)
    assert seen[0]["read"] == 2.5 and seen[0]["connect"] == 2.5
    assert seen[1]["read"] is not None and 4.0 < seen[1]["read"] <= 5.0


def test_fetch_returns_the_decoded_answer() -> None:
    import gzip

    body = gzip.compress(b'{"slots": 4}')
    headers = {"content-encoding": "gzip", "content-type": "application/json"}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body, headers=headers))
    with deadline_client(transport=transport) as client:
        response = fetch(client, "GET", "http://x/pools", seconds=5)
    assert response.json() == {"slots": 4} and response.request.url.path == "/pools"


def test_every_transport_of_a_client_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # proxies from the environment get transports of their own: they are bounded as well
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    with deadline_client() as client:
        transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
        assert len(transports) >= 2
        assert all(
            isinstance(t._pool._network_backend, deadline_module._Backend)  # type: ignore[attr-defined]
            for t in transports
        )


# -- deadline, time_left ----------------------------------------------------------------------------------
@pytest.mark.parametrize("seconds", [0, -1, -0.5, math.nan, -math.inf, "5", None, [1]])
def test_a_deadline_needs_a_finite_number_of_seconds_above_zero(seconds: object) -> None:
    with pytest.raises(ValueError, match=r"a deadline needs seconds > 0, not"), deadline(seconds):  # type: ignore[arg-type]
        pass
    assert time_left() is None


def test_a_deadline_too_large_for_a_float_is_refused_as_a_value_error() -> None:
    with pytest.raises(ValueError, match="seconds > 0"), deadline(10**400):
        pass
    with pytest.raises(ValueError, match="seconds > 0"), deadline(True):
        pass


def test_a_huge_but_finite_deadline_is_no_deadline_in_practice() -> None:
    with deadline(1e300):
        left = time_left()
        assert left is not None and left > 1e299


def test_the_outer_deadline_comes_back_after_an_error_in_the_inner_block() -> None:
    with deadline(30.0):
        with pytest.raises(RuntimeError), deadline(1.0):
            raise RuntimeError("boom")
        left = time_left()
        assert left is not None and left > 20.0
    assert time_left() is None


def test_each_thread_has_its_own_deadline() -> None:
    seen: dict[str, float | None] = {}
    ready, done = threading.Event(), threading.Event()

    def other() -> None:
        seen["before"] = time_left()
        with deadline(50.0):
            ready.set()
            done.wait(5)
            seen["inside"] = time_left()

    thread = threading.Thread(target=other)
    with deadline(2.0):
        thread.start()
        assert ready.wait(5)
        left = time_left()
        assert left is not None and left <= 2.0  # the other thread's 50 s did not reach this one
        done.set()
        thread.join(5)
    assert seen["before"] is None
    inside = seen["inside"]
    assert inside is not None and inside > 40.0


def test_time_left_turns_negative_once_the_deadline_has_passed() -> None:
    with deadline(0.01):
        time.sleep(0.05)
        left = time_left()
        assert left is not None and left <= 0


# -- fetch ------------------------------------------------------------------------------------------------
def test_a_call_whose_deadline_passed_is_not_sent() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    with deadline_client(transport=httpx.MockTransport(handler)) as client, deadline(0.01):
        time.sleep(0.05)
        with pytest.raises(httpx.ConnectTimeout, match="deadline has passed"):
            fetch(client, "GET", "http://x/")
    assert sent == []


def test_fetch_without_any_deadline_reads_the_whole_answer() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"ok"))
    with deadline_client(transport=transport) as client:
        assert time_left() is None
        assert fetch(client, "GET", "http://x/").content == b"ok"


def test_fetch_forwards_auth_redirects_params_json_and_headers() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/old":
            return httpx.Response(307, headers={"location": "/new"})
        return httpx.Response(201, json={"path": request.url.path})

    with deadline_client(transport=httpx.MockTransport(handler)) as client:
        response = fetch(
            client,
            "POST",
            "http://x/old",
            seconds=5,
            params={"q": "é"},
            json={"slots": 4},
            headers={"X-Trace": "1"},
            auth=("u", "p"),
            follow_redirects=True,
        )
    assert response.status_code == 201 and response.json() == {"path": "/new"}
    first = seen[0]
    assert first.url.params["q"] == "é" and json.loads(first.content) == {"slots": 4}
    assert first.headers["x-trace"] == "1" and first.headers["authorization"].startswith("Basic ")
    assert response.request.url.path == "/new"


def test_the_answer_returned_is_read_closed_and_keeps_its_status_and_headers() -> None:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(404, content=b"missing", headers={"x-reason": "gone"})
    )
    with deadline_client(transport=transport) as client:
        response = fetch(client, "GET", "http://x/pools/nope", seconds=5)
    assert response.is_closed and response.text == "missing" and response.headers["x-reason"] == "gone"
    with pytest.raises(httpx.HTTPStatusError, match="404"):
        response.raise_for_status()


def test_an_endless_answer_is_refused_without_reading_it_all() -> None:
    read = {"chunks": 0}

    class Endless(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            while True:
                read["chunks"] += 1
                yield b"x" * 1024

    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=Endless()))
    with deadline_client(transport=transport) as client, pytest.raises(AnswerTooLarge, match="10,240 bytes"):
        fetch(client, "GET", "http://x/", seconds=30, max_bytes=10 * 1024)
    assert read["chunks"] == 11


def test_an_empty_answer_fits_a_max_of_zero_bytes() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(204))
    with deadline_client(transport=transport) as client:
        assert fetch(client, "DELETE", "http://x/", seconds=5, max_bytes=0).content == b""


def test_headers_that_never_end_fail_the_call_by_its_deadline() -> None:
    """A real socket: a server that sends a header byte now and then is cut off by the call's deadline."""
    with TrickleServer(mode="headers", every=0.1) as server, deadline_client() as client:
        err, took = timed(lambda: fetch(client, "GET", f"{server.url}/slow", seconds=0.5))
        assert isinstance(err, httpx.TimeoutException), err
        assert took < 0.5 + MARGIN
        assert server.wait_closed()


# -- name resolution, sockets -----------------------------------------------------------------------------
def test_an_address_literal_is_never_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_lookup(*args: object, **kwargs: object) -> list[Any]:
        raise AssertionError("looked up")

    monkeypatch.setattr(socket, "getaddrinfo", no_lookup)
    with deadline(5):
        assert deadline_module._resolve("127.0.0.1", 80) == ["127.0.0.1"]
        assert deadline_module._resolve("::1", 80) == ["::1"]
    assert deadline_module._resolve("api.internal", 80) == ["api.internal"]  # no deadline: the transport's


def test_a_name_resolves_to_its_distinct_addresses_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    infos = [(0, 0, 0, "", (address, 80)) for address in ("10.0.0.2", "10.0.0.1", "10.0.0.2")]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: infos)
    with deadline(5):
        assert deadline_module._resolve("api.internal", 80) == ["10.0.0.2", "10.0.0.1"]


def test_a_name_that_does_not_resolve_fails_as_a_connect_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unknown(*args: object, **kwargs: object) -> list[Any]:
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    with deadline(5), pytest.raises(httpcore.ConnectError, match=r"cannot resolve api\.internal"):
        deadline_module._resolve("api.internal", 80)


def test_a_hung_resolver_fails_the_call_by_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def hung(*args: object, **kwargs: object) -> list[Any]:
        release.wait(10)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hung)
    try:
        with deadline(0.2), pytest.raises(httpcore.ConnectTimeout, match=r"resolving api\.internal"):
            deadline_module._resolve("api.internal", 80)
    finally:
        release.set()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_host_name_that_cannot_be_encoded_fails_as_a_connect_error_naming_it() -> None:
    host = "a" * 64 + ".example"
    with deadline_client() as client, pytest.raises(httpx.ConnectError, match=host):
        fetch(client, "GET", f"http://{host}/api/v2/pools", seconds=5)


class _Inner(httpcore.NetworkBackend):
    """A backend that records the timeouts it is given; ``refuse`` addresses fail to connect."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.refuse = refuse
        self.calls: list[tuple[str, float | None]] = []
        self.stream = mock.Mock(spec=httpcore.NetworkStream)

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # type: ignore[no-untyped-def]
        self.calls.append((host, timeout))
        if host in self.refuse:
            raise httpcore.ConnectError(f"{host} refused")
        return self.stream


def test_the_next_address_is_tried_when_one_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    inner = _Inner(refuse=("10.0.0.1",))
    infos = [(0, 0, 0, "", (address, 80)) for address in ("10.0.0.1", "10.0.0.2")]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: infos)
    with deadline(5):
        stream = deadline_module._Backend(inner).connect_tcp("api.internal", 80, timeout=60)
    assert [host for host, _ in inner.calls] == ["10.0.0.1", "10.0.0.2"]
    assert all(limit is not None and limit <= 5 for _, limit in inner.calls)  # capped at the time left
    assert isinstance(stream, deadline_module._Stream)
    inner_all = _Inner(refuse=("10.0.0.1", "10.0.0.2"))
    with deadline(5), pytest.raises(httpcore.ConnectError, match=r"10\.0\.0\.2 refused"):
        deadline_module._Backend(inner_all).connect_tcp("api.internal", 80)


def test_a_socket_operation_waits_at_most_the_time_left_and_none_once_it_is_spent() -> None:
    inner = mock.Mock(spec=httpcore.NetworkStream)
    stream = deadline_module._Stream(inner)
    stream.read(10, timeout=None)  # no deadline: the transport's own timeout
    assert inner.read.call_args.args == (10, None)
    with deadline(2):
        stream.read(10, timeout=60)
        assert 0 < inner.read.call_args.args[1] <= 2
        stream.read(10, timeout=0.5)
        assert inner.read.call_args.args[1] == 0.5  # a sooner own timeout stays
    with deadline(0.01):
        time.sleep(0.05)
        inner.reset_mock()
        with pytest.raises(httpcore.ReadTimeout):
            stream.read(10, timeout=60)
        with pytest.raises(httpcore.WriteTimeout):
            stream.write(b"x", timeout=60)
        with pytest.raises(httpcore.ConnectTimeout):
            stream.start_tls(None, "api.internal", timeout=60)
    inner.read.assert_not_called()
    inner.write.assert_not_called()


def test_a_large_write_is_split_so_a_slow_reader_cannot_stretch_one_write() -> None:
    inner = mock.Mock(spec=httpcore.NetworkStream)
    payload = bytes(range(256)) * 200  # 51,200 bytes
    with deadline(5):
        deadline_module._Stream(inner).write(payload, timeout=60)
    parts = [c.args[0] for c in inner.write.call_args_list]
    assert [len(p) for p in parts] == [16384, 16384, 16384, 2048] and b"".join(parts) == payload
    assert all(0 < c.args[1] <= 5 for c in inner.write.call_args_list)


# -- deadline_client --------------------------------------------------------------------------------------
def test_a_transport_of_ones_own_is_used_as_it_is_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200))
    with (
        caplog.at_level(logging.WARNING, logger=deadline_module.__name__),
        deadline_client(transport=transport) as client,
    ):
        assert client._transport is transport
    assert not caplog.records


def test_a_client_whose_sockets_cannot_be_capped_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(deadline_module, "_bound", lambda transport: False)
    with caplog.at_level(logging.WARNING, logger=deadline_module.__name__):
        deadline_client().close()
    assert "cannot cap each socket operation" in caplog.text


def test_binding_a_transport_twice_does_not_wrap_its_backend_twice() -> None:
    with deadline_client() as client:
        backend = client._transport._pool._network_backend  # type: ignore[attr-defined]
        assert deadline_module._bound(client._transport) is True
        assert client._transport._pool._network_backend is backend  # type: ignore[attr-defined]
    assert deadline_module._bound(httpx.MockTransport(lambda request: httpx.Response(200))) is False
