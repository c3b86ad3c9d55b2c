"""Every REST call ends by its deadline, however slowly the server answers; an answer that is not the
JSON expected is a ``RestError`` that names the URL and shows what came back.

:class:`TrickleServer` is a real HTTP server on 127.0.0.1 that answers one byte at a time, faster than
any per-read timeout fires: before, a call on it ran for as long as the server kept sending."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.hooks import deadline as deadline_module
from airflow_gpu_dag.hooks.deadline import AnswerTooLarge, deadline, deadline_client, fetch, time_left
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, RestError, excerpt

#: The client's limit in these tests, and what a call may take beyond it on a loaded machine.
TIMEOUT = 1.0
MARGIN = 3.0


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


@pytest.fixture
def trickle() -> Iterator[TrickleServer]:
    with TrickleServer() as server:
        yield server


def _timed(call: Callable[[], Any]) -> tuple[BaseException | None, float]:
    started = time.monotonic()
    try:
        call()
    except BaseException as err:  # what the call raised, for the test to look at
        return err, time.monotonic() - started
    return None, time.monotonic() - started


CALLS: dict[str, Callable[[AirflowRestClient], Any]] = {
    "get_pool": lambda c: c.get_pool("gpu"),
    "set_pool": lambda c: c.set_pool("gpu", 2, "x"),
    "task_instances": lambda c: c.task_instances(["gpu"], ["scheduled"]),
    "run_task_instances": lambda c: c.run_task_instances("d", "r"),
    "upstream_task_ids": lambda c: c.upstream_task_ids("d"),
    "task_history": lambda c: c.task_history("d", "t"),
    "set_task_instance_state": lambda c: c.set_task_instance_state("d", "r", "t", -1, "failed"),
    "get_variable": lambda c: c.get_variable("lease"),
    "create_variable": lambda c: c.create_variable("lease", "{}"),
    "put_variable": lambda c: c.put_variable("lease", "{}"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_trickling_answer_ends_every_call_in_a_rest_error_by_the_deadline(
    trickle: TrickleServer, call: str
) -> None:
    client = AirflowRestClient(trickle.url, token="t", timeout=TIMEOUT)
    try:
        err, took = _timed(lambda: CALLS[call](client))
    finally:
        client.close()
    assert isinstance(err, RestError), err
    assert "ReadTimeout" in str(err) and "deadline" in str(err)
    assert took < TIMEOUT + MARGIN, f"{call} took {took:.1f}s with timeout={TIMEOUT}"
    assert trickle.wait_closed(), "the connection of a call that gave up was left open"


@pytest.mark.parametrize("mode", ["body", "headers"])
def test_the_login_and_the_call_share_one_deadline(mode: str) -> None:
    with TrickleServer(mode=mode) as server:
        client = AirflowRestClient(server.url, "admin", "secret", timeout=TIMEOUT)
        err, took = _timed(lambda: client.get_pool("gpu"))
        client.close()
        assert isinstance(err, RestError) and "/auth/token" in str(err)
        assert took < TIMEOUT + MARGIN
        assert [r.split()[:2] for r in server.requests] == [[b"POST", b"/auth/token"]]
        err, took = _timed(lambda: AirflowRestClient(server.url, "admin", "pw", timeout=TIMEOUT).token())
        assert isinstance(err, RestError) and took < TIMEOUT + MARGIN


def test_headers_that_never_end_are_cut_off_too() -> None:
    with TrickleServer(mode="headers") as server:
        client = AirflowRestClient(server.url, token="t", timeout=TIMEOUT)
        err, took = _timed(lambda: client.get_pool("gpu"))
        client.close()
        assert isinstance(err, RestError) and took < TIMEOUT + MARGIN
        assert server.wait_closed()


def test_a_calls_own_timeout_wins_and_each_retry_is_bounded(trickle: TrickleServer) -> None:
    client = AirflowRestClient(trickle.url, token="t", timeout=30.0, get_retries=1, retry_wait=0.1)
    err, took = _timed(lambda: client.send("GET", "/api/v2/pools", timeout=TIMEOUT))
    client.close()
    # two tries of TIMEOUT each, 0.1 s apart: (1 + get_retries) * timeout + get_retries * retry_wait
    assert isinstance(err, RestError) and 2 * TIMEOUT <= took < 2 * TIMEOUT + 0.1 + MARGIN
    assert len(trickle.requests) == 2


def test_each_thread_keeps_its_own_deadline(trickle: TrickleServer) -> None:
    client = AirflowRestClient(trickle.url, token="t", timeout=10.0)
    took: dict[float, float] = {}

    def call(seconds: float) -> None:
        err, took[seconds] = _timed(lambda: client.send("GET", "/api/v2/pools", timeout=seconds))
        assert isinstance(err, RestError)

    threads = [threading.Thread(target=call, args=(s,)) for s in (TIMEOUT, 3 * TIMEOUT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    client.close()
    assert took[TIMEOUT] < TIMEOUT + MARGIN
    assert 3 * TIMEOUT <= took[3 * TIMEOUT] < 3 * TIMEOUT + MARGIN


def test_a_hung_name_lookup_ends_by_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    real = socket.getaddrinfo

    def hung(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "api.slow-dns.test":
            release.wait(30)
            raise socket.gaierror("gave up")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", hung)
    client = AirflowRestClient("http://api.slow-dns.test:8080", token="t", timeout=TIMEOUT)
    try:
        err, took = _timed(lambda: client.get_pool("gpu"))
    finally:
        release.set()  # the lookup's thread ends with it
        client.close()
    assert isinstance(err, RestError) and "ConnectTimeout" in str(err)
    assert took < TIMEOUT + MARGIN


def test_a_name_lookup_that_fails_is_a_connect_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(host: Any, *args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror("Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", failing)
    client = AirflowRestClient("http://api.nowhere.test:8080", token="t", timeout=TIMEOUT)
    with pytest.raises(RestError, match="GET /api/v2/pools/gpu: ConnectError"):
        client.get_pool("gpu")


@pytest.mark.parametrize("timeout", [0, -1.0, float("inf"), float("nan"), "10"])
def test_a_client_without_a_finite_timeout_is_refused(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        AirflowRestClient("http://api", token="t", timeout=timeout)


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
        err, took = _timed(lambda: fetch(client, "GET", "http://x/", seconds=0.5))
    assert isinstance(err, httpx.ReadTimeout) and took < 0.5 + MARGIN


def test_fetch_refuses_an_answer_too_large() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 5000))
    with deadline_client(transport=transport) as client:
        with pytest.raises(AnswerTooLarge):
            fetch(client, "GET", "http://x/", seconds=5, max_bytes=4096)
        assert fetch(client, "GET", "http://x/", seconds=5, max_bytes=5000).content == b"x" * 5000


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


# -- answers that are not the JSON expected ---------------------------------------------------------------
LOGIN_PAGE = (
    b"<html><head><title>Sign in</title></head><body><form>"
    b'<input name="password" value="pw-SECRET"> token=other-SECRET</form></body></html>'
)


def _answering(body: bytes, content_type: str = "text/html", status: int = 200) -> AirflowRestClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/auth/token"):
            return httpx.Response(201, json={"access_token": "tok-SECRET"})
        return httpx.Response(status, content=body, headers={"content-type": content_type})

    return AirflowRestClient(
        "http://gw.example.com/airflow", "admin", "pw-SECRET", transport=httpx.MockTransport(handler)
    )


@pytest.mark.parametrize("call", sorted(set(CALLS) - {"create_variable"}))
def test_an_html_page_is_a_rest_error_naming_the_url(call: str) -> None:
    with pytest.raises(RestError) as err:
        CALLS[call](_answering(LOGIN_PAGE))
    message = str(err.value)
    assert "http://gw.example.com/airflow/api/v2/" in message, message
    assert "not JSON" in message and "text/html" in message and "<title>Sign in</title>" in message
    assert "SECRET" not in message


def test_a_login_answered_with_a_page_names_the_token_url() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=LOGIN_PAGE, headers={"content-type": "text/html"})

    client = AirflowRestClient("http://api:8080", "admin", "pw", transport=httpx.MockTransport(handler))
    with pytest.raises(
        RestError, match=r"POST http://api:8080/auth/token: expected a JSON object, got not JSON"
    ):
        client.get_pool("gpu")


@pytest.mark.parametrize(
    ("call", "body", "expected"),
    [
        ("get_pool", b"[]", "expected a JSON object, got a JSON list"),
        ("get_pool", b'"gpu"', "expected a JSON object, got a JSON str"),
        ("get_pool", b"", "got not JSON (HTTP 200, application/json): (empty)"),
        ("set_pool", b"[1, 2]", "expected a JSON object, got a JSON list"),
        ("get_variable", b"[]", "expected a JSON object, got a JSON list"),
        ("task_instances", b'[{"task_id": "t"}]', "expected a JSON object, got a JSON list"),
        ("task_instances", b'{"task_instances": {"a": 1}}', "the answer has no list 'task_instances'"),
        ("upstream_task_ids", b'{"tasks": [1, 2]}', "expected a list of objects under 'tasks'"),
        ("upstream_task_ids", b'{"tasks": [{"downstream_task_ids": []}]}', "a task without a task_id"),
        ("upstream_task_ids", b'{"tasks": [{"task_id": "a", "downstream_task_ids": 3}]}', "is not a list"),
        ("task_history", b'{"task_instances": "none"}', "expected a list of objects under 'task_instances'"),
        ("set_task_instance_state", b'{"task_instances": [null]}', "expected a list of objects"),
    ],
)
def test_json_of_the_wrong_shape_is_a_rest_error(call: str, body: bytes, expected: str) -> None:
    with pytest.raises(RestError, match=r"http://gw\.example\.com/airflow/api/v2/") as err:
        CALLS[call](_answering(body, "application/json"))
    assert expected in str(err.value)


def test_map_counts_skip_task_instances_they_cannot_read() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/dagRuns"):
            return httpx.Response(200, json={"dag_runs": [{"dag_run_id": "r1"}]})
        tis = [
            1,
            {"map_index": "x"},
            {"map_index": 0},
            {"map_index": 1, "state": "removed"},
            {"map_index": 2},
        ]
        return httpx.Response(200, json={"task_instances": tis, "total_entries": 5})

    client = AirflowRestClient("http://api", token="t", transport=httpx.MockTransport(handler))
    assert client.map_counts("d", "t") == [2]


def test_an_excerpt_is_one_short_line_with_credentials_masked() -> None:
    text = 'Error\n\x00 {"access_token": "eyJ.abc", "password": "p"} Authorization: Bearer xyz ' + "z" * 500
    shown = excerpt(text, ["p-known"], limit=120)
    assert len(shown) <= 120 and "\n" not in shown and "\x00" not in shown
    assert "eyJ" not in shown and '"p"' not in shown and "xyz" not in shown
    assert excerpt("the key is p-known here", ["p-known"]) == "the key is *** here"
