"""REST client (auth, pools, pagination), the connection hook, and that secrets never reach logs."""

from __future__ import annotations

import errno
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook, base_url_of
from airflow_gpu_dag.hooks.rest_client import (
    AirflowRestClient,
    RestError,
    decode_json,
    excerpt,
    parse_time,
    shown_url,
    transport_failure,
)
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from airflow_gpu_dag.watermark.sources import CapacityReading, SourceError
from tests.unit.hooks.conftest import MARGIN, TrickleServer, timed

PASSWORD = "pa55-w0rd-SECRET"


TOKEN = "tok-eyJhbGciOi-SECRET"


class FakeApi:
    """An api-server answering /auth/token, pools and task instances."""

    def __init__(self) -> None:
        self.pools: dict[str, dict[str, Any]] = {}
        self.tis: list[dict[str, Any]] = []
        self.logins = 0
        self.expire_next = False
        self.requests: list[httpx.Request] = []
        self.fail_pools = False
        #: ``[api] maximum_page_limit``: the server answers at most this many items per page.
        self.max_limit: int | None = None
        self.send_total = True

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path == "/auth/token":
            body = json.loads(request.content)
            if body["password"] != PASSWORD:
                return httpx.Response(401, json={"detail": "Invalid credentials"})
            self.logins += 1
            return httpx.Response(201, json={"access_token": TOKEN})
        if request.headers.get("Authorization") != f"Bearer {TOKEN}" or self.expire_next:
            self.expire_next = False
            return httpx.Response(401, json={"detail": "Not authenticated"})
        if path.startswith("/api/v2/pools"):
            if self.fail_pools:
                return httpx.Response(500, text="boom")
            name = path.rsplit("/", 1)[-1]
            if request.method == "GET":
                return (
                    httpx.Response(200, json=self.pools[name]) if name in self.pools else httpx.Response(404)
                )
            body = json.loads(request.content)
            if request.method == "PATCH":
                if name not in self.pools:
                    return httpx.Response(404, json={"detail": "not found"})
                if set(body) != {"name", "slots", "description", "include_deferred"}:
                    return httpx.Response(422)
            self.pools[body["name"]] = body
            return httpx.Response(201 if request.method == "POST" else 200, json=body)
        if path == "/api/v2/dags/~/dagRuns/~/taskInstances":
            offset = int(request.url.params["offset"])
            limit = int(request.url.params["limit"])
            if self.max_limit is not None:
                limit = min(limit, self.max_limit)  # Airflow's LimitFilter caps the limit asked for
            answer: dict[str, Any] = {"task_instances": self.tis[offset : offset + limit]}
            if self.send_total:
                answer["total_entries"] = len(self.tis)
            return httpx.Response(200, json=answer)
        return httpx.Response(404)


def client(api: FakeApi, password: str = PASSWORD) -> AirflowRestClient:
    return AirflowRestClient(
        "http://api:8080/", "admin", password, transport=httpx.MockTransport(api.handler)
    )


class _RestartingApi:
    """An api-server that restarts with a new JWT secret: tokens signed before are refused with
    ``403 Invalid JWT token`` (Airflow answers 401 only for an expired or missing token)."""

    def __init__(self) -> None:
        self.secret = "s1"
        self.logins = 0
        self.forbidden = False  # the user may not read pools: 403 whatever the token

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            self.logins += 1
            return httpx.Response(201, json={"access_token": f"tok-{self.secret}-{self.logins}"})
        auth = request.headers.get("Authorization", "")
        if not auth:
            return httpx.Response(401, json={"detail": "Not authenticated"})
        if f"tok-{self.secret}-" not in auth:
            return httpx.Response(403, json={"detail": "Invalid JWT token"})
        if self.forbidden:
            return httpx.Response(403, json={"detail": "Forbidden"})
        return httpx.Response(200, json={"name": "gpu", "slots": 4})


class _Failing:
    kind = "fake"

    def read(self) -> CapacityReading:
        raise SourceError("exporter down")


def test_login_create_patch_and_relogin_on_expiry() -> None:
    api = FakeApi()
    rest = client(api)
    assert rest.get_pool("gpu") is None
    rest.set_pool("gpu", 4, "first")  # PATCH 404 -> POST
    rest.set_pool("gpu", 2, "second")  # full-body PATCH
    assert api.pools["gpu"] == {"name": "gpu", "slots": 2, "description": "second", "include_deferred": False}
    api.expire_next = True
    assert rest.get_pool("gpu")["slots"] == 2  # type: ignore[index]
    assert api.logins == 2
    methods = [(r.method, r.url.path) for r in api.requests[:4]]
    assert methods == [
        ("POST", "/auth/token"),
        ("GET", "/api/v2/pools/gpu"),
        ("PATCH", "/api/v2/pools/gpu"),
        ("POST", "/api/v2/pools"),
    ]


def test_task_instances_are_paginated() -> None:
    api = FakeApi()
    api.tis = [{"task_id": f"t{i}"} for i in range(230)]
    rest = client(api)
    found = rest.task_instances(["gpu", "cpu"], ["scheduled", "running"])
    assert [t["task_id"] for t in found] == [f"t{i}" for i in range(230)]
    params = api.requests[-1].url.params
    assert params.get_list("pool") == ["gpu", "cpu"] and params.get_list("state") == ["scheduled", "running"]


def test_pagination_follows_total_entries_past_pages_the_server_capped() -> None:
    # A server with [api] maximum_page_limit=50 answers 50 of the 100 asked for; taking the short page
    # for the last one would return 50 of 230 task instances, silently.
    api = FakeApi()
    api.max_limit = 50
    api.tis = [{"task_id": f"t{i}"} for i in range(230)]
    found = client(api).task_instances(["gpu"], ["scheduled"])
    assert [t["task_id"] for t in found] == [f"t{i}" for i in range(230)]
    offsets = [int(r.url.params["offset"]) for r in api.requests if "offset" in r.url.params]
    assert offsets == [0, 50, 100, 150, 200]


def test_pagination_without_total_entries_stops_at_a_short_page() -> None:
    api = FakeApi()
    api.send_total = False
    api.tis = [{"task_id": f"t{i}"} for i in range(130)]
    found = client(api).task_instances(["gpu"], ["scheduled"])
    assert len(found) == 130
    assert [int(r.url.params["offset"]) for r in api.requests if "offset" in r.url.params] == [0, 100]
    api.tis = [{"task_id": f"t{i}"} for i in range(200)]  # a full last page: one more, empty, page
    api.requests.clear()
    assert len(client(api).task_instances(["gpu"], ["scheduled"])) == 200
    assert [int(r.url.params["offset"]) for r in api.requests if "offset" in r.url.params] == [0, 100, 200]


def test_a_token_refused_as_invalid_after_a_restart_is_renewed_once() -> None:
    # After an API server restart the old token is refused; without a renewal every call would fail
    # with HTTP 403 until the controller restarts.
    api = _RestartingApi()
    rest = AirflowRestClient("http://api:8080", "ctrl", PASSWORD, transport=httpx.MockTransport(api.handler))
    assert rest.get_pool("gpu") == {"name": "gpu", "slots": 4}
    api.secret = "s2"
    assert rest.get_pool("gpu") == {"name": "gpu", "slots": 4}
    assert rest.get_pool("gpu") == {"name": "gpu", "slots": 4}
    assert api.logins == 2
    # a 403 that a new login does not cure (no permission) is the answer: one more login, no loop
    api.forbidden = True
    with pytest.raises(RestError, match=r"GET /api/v2/pools/gpu: HTTP 403"):
        rest.get_pool("gpu")
    assert api.logins == 3


def test_a_ready_token_is_not_replaced_on_403() -> None:
    api = _RestartingApi()
    rest = AirflowRestClient("http://api:8080", token="tok-old-1", transport=httpx.MockTransport(api.handler))
    with pytest.raises(RestError, match="HTTP 403"):
        rest.get_pool("gpu")
    assert api.logins == 0


def test_bad_password_is_a_clear_error_without_the_password() -> None:
    with pytest.raises(RestError, match=r"POST /auth/token: HTTP 401") as err:
        client(FakeApi(), password="wrong-SECRET").get_pool("gpu")
    assert "SECRET" not in str(err.value)


def test_secrets_never_reach_logs_or_repr(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api = FakeApi()
    rest = client(api)
    config = parse_config(
        {
            "pools": {"gpu": {"source": 2}, "gpu2": {"source": 2}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    controller = WatermarkController(config, rest, {"gpu2": _Failing()}, default_duration=60)
    controller.tick()
    api.fail_pools = True
    failed = controller.tick()  # reported per pool, not raised: the loop goes on
    assert failed and all(o.error and "HTTP 500" in o.error and o.size is None for o in failed)
    api.fail_pools = False
    api.expire_next = True
    controller.tick()
    text = caplog.text + repr(rest) + repr(controller.__dict__)
    assert "pool gpu:" in caplog.text and "exporter down" in caplog.text  # it did log
    assert PASSWORD not in text and TOKEN not in text
    assert "SECRET" not in text


def test_hook_builds_client_from_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_GPU_DAG_API", f"http://admin:{PASSWORD}@localhost:8080")
    rest = AirflowApiHook().get_client()
    assert rest.base_url == "http://localhost:8080"
    assert PASSWORD not in repr(rest)
    monkeypatch.setenv("AIRFLOW_CONN_OTHER", json.dumps({"conn_type": "http", "host": "", "login": "x"}))
    with pytest.raises(ValueError, match="connection 'other': the connection has no host"):
        AirflowApiHook("other").get_client()


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("http://api:8080/", None, "http://api:8080"),
        ("https://api.example.com", 8443, "https://api.example.com:8443"),
        ("api", 8080, "http://api:8080"),
        ("api", None, "http://api"),
        # a reverse proxy's path prefix: the port goes into the network location, not after the path
        ("https://gw.example.com/airflow", 8443, "https://gw.example.com:8443/airflow"),
        ("https://gw.example.com:9443/airflow/", 8443, "https://gw.example.com:9443/airflow"),
        ("gw.example.com/airflow", 8080, "http://gw.example.com:8080/airflow"),
        ("http://[::1]", 8080, "http://[::1]:8080"),
        # the REST API root given as the host: the client adds /api/v2 itself
        ("http://127.0.0.1:8080/api/v2/", None, "http://127.0.0.1:8080"),
        ("https://gw.example.com/airflow/api/v2", 8443, "https://gw.example.com:8443/airflow"),
    ],
)
def test_base_url_of(host: str, port: int | None, expected: str) -> None:
    assert base_url_of(host, port) == expected


def test_base_url_of_a_host_with_a_bad_port() -> None:
    with pytest.raises(ValueError, match="has a port that is not a number"):
        base_url_of("http://api:80x", None)


def test_gets_are_retried_after_transport_errors_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry bounds of ``send``: a GET is tried ``1 + get_retries`` times after transport errors,
    ``retry_wait`` apart, and the last error is raised; an HTTP answer (even a 503) is never retried,
    nor is a POST or a call with ``retry=False``."""
    calls: list[str] = []
    slept: list[float] = []
    answers: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer)

    monkeypatch.setattr("time.sleep", slept.append)  # tenacity's sleep
    client = AirflowRestClient(
        "http://api:8080", token="t", transport=httpx.MockTransport(handler), get_retries=2, retry_wait=0.25
    )
    refused = httpx.ConnectError("connection refused")
    answers[:] = [refused, refused, 200]
    assert client.send("GET", "/api/v2/pools").status_code == 200
    assert (calls, slept) == (["GET"] * 3, [0.25, 0.25])
    calls.clear(), slept.clear()
    answers[:] = [refused, refused, httpx.ConnectError("connection refused at last")]
    with pytest.raises(RestError, match="refused the connection") as raised:
        client.send("GET", "/api/v2/pools")
    assert len(calls) == 3 and raised.value.status is None
    for method, retry, answer in (("GET", True, 503), ("POST", True, refused), ("GET", False, refused)):
        calls.clear()
        answers[:] = [answer]
        if isinstance(answer, int):
            assert client.send(method, "/api/v2/pools", retry=retry).status_code == answer
        else:
            with pytest.raises(RestError):
                client.send(method, "/api/v2/pools", retry=retry)
        assert calls == [method], (method, retry, answer)


#: The client's limit in these tests (what a call may take beyond it: MARGIN).
TIMEOUT = 1.0


@pytest.fixture
def trickle() -> Iterator[TrickleServer]:
    with TrickleServer() as server:
        yield server


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


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_trickling_answer_ends_every_call_in_a_rest_error_by_the_deadline(
    trickle: TrickleServer, call: str
) -> None:
    client = AirflowRestClient(trickle.url, token="t", timeout=TIMEOUT)
    try:
        err, took = timed(lambda: CALLS[call](client))
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
        err, took = timed(lambda: client.get_pool("gpu"))
        client.close()
        assert isinstance(err, RestError) and "/auth/token" in str(err)
        assert took < TIMEOUT + MARGIN
        assert [r.split()[:2] for r in server.requests] == [[b"POST", b"/auth/token"]]
        err, took = timed(lambda: AirflowRestClient(server.url, "admin", "pw", timeout=TIMEOUT).token())
        assert isinstance(err, RestError) and took < TIMEOUT + MARGIN


def test_headers_that_never_end_are_cut_off_too() -> None:
    with TrickleServer(mode="headers") as server:
        client = AirflowRestClient(server.url, token="t", timeout=TIMEOUT)
        err, took = timed(lambda: client.get_pool("gpu"))
        client.close()
        assert isinstance(err, RestError) and took < TIMEOUT + MARGIN
        assert server.wait_closed()


def test_a_calls_own_timeout_wins_and_each_retry_is_bounded(trickle: TrickleServer) -> None:
    client = AirflowRestClient(trickle.url, token="t", timeout=30.0, get_retries=1, retry_wait=0.1)
    err, took = timed(lambda: client.send("GET", "/api/v2/pools", timeout=TIMEOUT))
    client.close()
    # two tries of TIMEOUT each, 0.1 s apart: (1 + get_retries) * timeout + get_retries * retry_wait
    assert isinstance(err, RestError) and 2 * TIMEOUT <= took < 2 * TIMEOUT + 0.1 + MARGIN
    assert len(trickle.requests) == 2


def test_each_thread_keeps_its_own_deadline(trickle: TrickleServer) -> None:
    client = AirflowRestClient(trickle.url, token="t", timeout=10.0)
    took: dict[float, float] = {}

    def call(seconds: float) -> None:
        err, took[seconds] = timed(lambda: client.send("GET", "/api/v2/pools", timeout=seconds))
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
        err, took = timed(lambda: client.get_pool("gpu"))
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


# -- direct tests of the module's helpers and calls ------------------------------------------------------
def _recording(
    answer: Callable[[httpx.Request], httpx.Response],
) -> tuple[AirflowRestClient, list[httpx.Request]]:
    """A client with a ready token whose every request is answered by ``answer`` and recorded."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request)

    client = AirflowRestClient(
        "http://api:8080", token="t0k-ready-123", transport=httpx.MockTransport(handler)
    )
    return client, seen


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T00:00:00Z", 1767225600.0),
        ("2026-01-01T02:00:00+02:00", 1767225600.0),
        ("2026-01-01T00:00:00.250000+00:00", 1767225600.25),
        (None, None),
        ("", None),
        ("not a time", None),
        (1767225600, None),  # a number is no ISO-8601 text: None, not a crash
    ],
)
def test_parse_time_reads_iso_timestamps_and_gives_none_for_anything_else(value: Any, expected: Any) -> None:
    assert parse_time(value) == expected


def _failure(cause: BaseException | None, message: str = "boom", kind: type = httpx.ConnectError) -> Any:
    err = kind(message, request=httpx.Request("GET", "http://api:8080/api/v2/pools"))
    err.__cause__ = cause
    return err


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (_failure(ConnectionRefusedError(111, "nope")), "ConnectError: api:8080 refused the connection"),
        (_failure(socket.gaierror(-2, "Name unknown")), "the host name 'api' cannot be resolved (DNS)"),
        (_failure(None, "read", httpx.ReadTimeout), "ReadTimeout: no complete answer from api:8080"),
        (_failure(ssl.SSLError(1, "WRONG_VERSION_NUMBER")), "TLS with api:8080 failed"),
        (_failure(ConnectionResetError(104, "peer")), "api:8080 reset the connection"),
        (_failure(OSError(errno.EHOSTUNREACH, "gone")), "no route to api:8080"),
        (_failure(None, "something odd"), "ConnectError: api:8080: something odd"),
    ],
)
def test_transport_failure_says_which_cause_and_where(err: BaseException, expected: str) -> None:
    assert expected in transport_failure(err)


def test_transport_failure_of_an_error_without_its_request_names_the_base_urls_host_and_port() -> None:
    """httpx raises some errors without a request attached; the message still says where."""
    assert transport_failure(httpx.ConnectError("boom"), "https://api.example.com") == (
        "ConnectError: api.example.com:443: boom"
    )
    assert transport_failure(httpx.ConnectError(""), "") == "ConnectError: ?:?"


def test_shown_url_leaves_out_the_user_and_password() -> None:
    assert shown_url("http://admin:pw@api:8080", "/api/v2/pools") == "http://api:8080/api/v2/pools"
    assert shown_url("http://api:8080", "https://u:p@other:9/x?y=1") == "https://other:9/x?y=1"


def test_repr_of_a_client_with_credentials_in_its_base_url_hides_them() -> None:
    """The module promises the password is never part of ``repr()``; ``shown_url`` exists because a
    base URL may carry ``user:password@``, yet ``__repr__`` prints ``base_url`` as given."""
    client = AirflowRestClient("http://admin:pa55-SECRET@api:8080", token="t")
    assert "pa55-SECRET" not in repr(client)


@pytest.mark.parametrize(
    ("length", "shown"),
    [(120, "x" * 120), (121, "x" * 117 + "..."), (0, "")],
)
def test_an_excerpt_is_cut_at_its_limit_with_an_ellipsis(length: int, shown: str) -> None:
    assert excerpt("x" * length, limit=120) == shown


def test_a_quoted_credential_with_spaces_is_masked_whole() -> None:
    shown = excerpt('{"detail": "bad", "password": "correct horse battery"}')
    assert "horse" not in shown and "battery" not in shown


def test_a_credential_in_an_answer_of_the_wrong_shape_is_masked_in_the_error() -> None:
    """``_objects`` and ``pages`` show ``repr(items)``, whose quotes are single: the credential pattern
    only knows double quotes, so another account's password in the answer reaches the message."""
    client, _ = _recording(lambda request: httpx.Response(200, json={"tasks": {"password": "hunter2-XYZ"}}))
    with pytest.raises(RestError, match="expected a list of objects under 'tasks'") as err:
        client.dag_tasks("d")
    assert "hunter2-XYZ" not in str(err.value)


def test_decode_json_names_every_kind_it_accepts() -> None:
    response = httpx.Response(200, json="text", request=httpx.Request("GET", "http://api/x"))
    with pytest.raises(RestError, match=r"GET x: expected a JSON object or a JSON list, got a JSON str"):
        decode_json(response, "GET x", (dict, list))
    assert decode_json(response, "GET x", str) == "text"


def test_an_answer_that_is_not_utf8_is_not_json_not_a_unicode_error() -> None:
    client, _ = _recording(
        lambda request: httpx.Response(
            200, content=b'{"a": "\xff\xfe"}', headers={"content-type": "application/json"}
        )
    )
    with pytest.raises(RestError, match=r"got not JSON \(HTTP 200, application/json\)"):
        client.get_pool("gpu")


def test_a_deeply_nested_answer_is_a_rest_error_not_a_recursion_error() -> None:
    """A broken or hostile server (what MAX_ITEMS guards against) answering ``[[[[...]]]]``: json raises
    RecursionError, which is no ValueError, so the call fails with a bare RecursionError."""
    body = b"[" * 100_000 + b"]" * 100_000
    client, _ = _recording(lambda request: httpx.Response(200, content=body))
    with pytest.raises(RestError, match="/api/v2/pools/gpu"):
        client.get_pool("gpu")


def test_a_variable_answer_without_a_value_is_a_rest_error_not_the_text_none() -> None:
    """The lease code reads this Variable: the text ``"None"`` parses as a garbage lease, which counts as
    expired, so a proxy answering ``{}`` would let this controller take over a live lease."""
    client, _ = _recording(lambda request: httpx.Response(200, json={"key": "lease"}))
    with pytest.raises(RestError, match="/api/v2/variables/lease"):
        client.get_variable("lease")


def test_get_variable_reads_the_value_none_on_404_and_raises_on_other_statuses() -> None:
    answers = {"/api/v2/variables/a": httpx.Response(200, json={"key": "a", "value": '{"x": 1}'})}

    def answer(request: httpx.Request) -> httpx.Response:
        return answers.get(request.url.path, httpx.Response(404 if "missing" in request.url.path else 500))

    client, _ = _recording(answer)
    assert client.get_variable("a") == '{"x": 1}'
    assert client.get_variable("missing") is None
    with pytest.raises(RestError, match=r"GET /api/v2/variables/broken: HTTP 500") as err:
        client.get_variable("broken")
    assert err.value.status == 500


def test_create_variable_is_false_when_it_exists_and_an_error_on_other_statuses() -> None:
    statuses = iter([201, 409, 500])
    client, seen = _recording(lambda request: httpx.Response(next(statuses)))
    assert client.create_variable("lease", "v", "d") is True
    assert client.create_variable("lease", "v") is False
    with pytest.raises(RestError, match="POST /api/v2/variables: HTTP 500"):
        client.create_variable("lease", "v")
    assert json.loads(seen[0].content) == {"key": "lease", "value": "v", "description": "d"}


def test_a_login_answer_without_a_token_is_not_retried_like_a_transport_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``send`` promises GETs are retried after transport errors only; the RestError for a 201 without
    ``access_token`` carries no status, so the retry takes it for one and logs in ``1 + get_retries``
    times, ``retry_wait`` apart."""
    logins: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            logins.append("login")
            return httpx.Response(201, json={"detail": "ok"})
        return httpx.Response(200, json={})

    monkeypatch.setattr("time.sleep", lambda seconds: None)  # tenacity's sleep
    client = AirflowRestClient(
        "http://api", "admin", "pw", transport=httpx.MockTransport(handler), get_retries=2, retry_wait=5
    )
    with pytest.raises(RestError, match="no access_token"):
        client.get_pool("gpu")
    assert logins == ["login"]


def test_a_negative_retry_wait_is_refused_when_the_client_is_built() -> None:
    """``timeout`` is checked when the client is built; ``retry_wait=-1`` is taken and the first GET
    that fails to connect then ends in ``ValueError: sleep length must be non-negative``."""
    with pytest.raises(ValueError, match="retry_wait"):
        AirflowRestClient("http://api", token="t", get_retries=1, retry_wait=-1.0)


def test_a_login_without_a_user_or_token_says_what_to_set() -> None:
    client = AirflowRestClient("http://api", transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    with pytest.raises(RestError, match="no token and no login: set the connection's login/password"):
        client.get_pool("gpu")


def test_token_logs_in_once_and_again_only_when_asked() -> None:
    logins: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        logins.append(1)
        return httpx.Response(201, json={"access_token": f"tok-{len(logins)}"})

    client = AirflowRestClient("http://api", "admin", "pw", transport=httpx.MockTransport(handler))
    assert client.token() == "tok-1" and client.token() == "tok-1"
    assert client.token(refresh=True) == "tok-2" and len(logins) == 2


@pytest.mark.parametrize("token", [None, 7, ""])
def test_a_login_answer_whose_token_is_not_text_is_refused(token: Any) -> None:
    client = AirflowRestClient(
        "http://api",
        "admin",
        "pw",
        transport=httpx.MockTransport(lambda r: httpx.Response(201, json={"access_token": token})),
    )
    with pytest.raises(RestError, match="POST /auth/token: no access_token in the answer"):
        client.token()


def test_pages_stop_at_an_empty_page_whatever_total_entries_claims() -> None:
    """A server whose ``total_entries`` overstates what it has must not keep the caller paging."""

    def answer(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        items = [{"task_id": f"t{i}"} for i in range(offset, min(offset + 100, 150))]
        return httpx.Response(200, json={"task_instances": items, "total_entries": 10_000})

    client, seen = _recording(answer)
    assert len(client.run_task_instances("d", "r")) == 150
    assert [r.url.params["offset"] for r in seen] == ["0", "100", "150"]


def test_pages_treat_a_boolean_total_entries_as_missing() -> None:
    """``true`` is no count (bool is an int in Python): the short page ends the list."""
    client, seen = _recording(
        lambda request: httpx.Response(
            200, json={"task_instances": [{"task_id": "a"}], "total_entries": True}
        )
    )
    assert client.run_task_instances("d", "r") == [{"task_id": "a"}]
    assert len(seen) == 1


def test_ids_with_slashes_spaces_and_unicode_are_quoted_into_one_path_segment() -> None:
    client, seen = _recording(lambda request: httpx.Response(200, json={"task_instances": []}))
    client.run_task_instances("team/ü dag", "manual__2026-01-01T00:00:00+00:00")
    assert seen[0].url.raw_path.split(b"?")[0] == (
        b"/api/v2/dags/team%2F%C3%BC%20dag/dagRuns/manual__2026-01-01T00%3A00%3A00%2B00%3A00/taskInstances"
    )


@pytest.mark.parametrize(("limit", "sent"), [(1000, "100"), (0, "1"), (-5, "1"), (40, "40")])
def test_task_history_asks_for_one_page_of_at_most_100(limit: int, sent: str) -> None:
    client, seen = _recording(lambda request: httpx.Response(200, json={"task_instances": []}))
    assert client.task_history("d", "t", limit=limit, states=("success", "failed")) == []
    params = seen[0].url.params
    assert params["limit"] == sent and params["order_by"] == "-end_date"
    assert params.get_list("state") == ["success", "failed"] and params["task_id"] == "t"


def test_set_task_instance_state_cuts_the_note_and_leaves_out_map_index_minus_one() -> None:
    client, seen = _recording(lambda request: httpx.Response(200))
    note = "é" * 1500
    assert client.set_task_instance_state("d", "r", "t", -1, "failed", note) == []  # an empty answer
    assert seen[0].url.path == "/api/v2/dags/d/dagRuns/r/taskInstances/t"
    body = json.loads(seen[0].content)
    assert body == {"new_state": "failed", "note": "é" * 1000}
    client.set_task_instance_state("d", "r", "t", 3, "success")
    assert seen[1].url.path.endswith("/taskInstances/t/3") and json.loads(seen[1].content) == {
        "new_state": "success"
    }


def test_a_status_that_is_not_ok_is_an_error_with_the_start_of_the_answer_masked() -> None:
    client, _ = _recording(lambda request: httpx.Response(409, text="conflict: token=abc123-SECRET"))
    with pytest.raises(
        RestError, match=r"PATCH /api/v2/variables/lease: HTTP 409 conflict: token=\*\*\*"
    ) as err:
        client.put_variable("lease", "v")
    assert err.value.status == 409 and "SECRET" not in str(err.value)


def test_upstream_task_ids_inverts_the_downstream_lists() -> None:
    tasks = [
        {"task_id": "a", "downstream_task_ids": ["b", "c"]},
        {"task_id": "b", "downstream_task_ids": ["c"]},
        {"task_id": "c", "downstream_task_ids": None},
    ]
    client, _ = _recording(lambda request: httpx.Response(200, json={"tasks": tasks}))
    assert client.upstream_task_ids("d") == {"a": [], "b": ["a"], "c": ["a", "b"]}


def test_a_pool_write_the_server_refuses_names_the_pool_and_status() -> None:
    client, _ = _recording(lambda request: httpx.Response(403, json={"detail": "Forbidden"}))
    with pytest.raises(RestError, match="PATCH /api/v2/pools/gpu: HTTP 403") as err:
        client.set_pool("gpu", 3, "d")
    assert err.value.status == 403


def test_a_missing_pool_is_created_with_the_same_body() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH":
            return httpx.Response(404)
        return httpx.Response(201, json=json.loads(request.content))

    client, seen = _recording(answer)
    assert client.set_pool("gpu", 3, "desc", include_deferred=True)["slots"] == 3
    assert [(r.method, r.url.path) for r in seen] == [
        ("PATCH", "/api/v2/pools/gpu"),
        ("POST", "/api/v2/pools"),
    ]
    assert seen[0].content == seen[1].content


def test_one_client_serves_several_threads_at_once() -> None:
    """The controller's history reads and its tick share one client: answers never cross threads."""

    def answer(request: httpx.Request) -> httpx.Response:
        name = request.url.path.rsplit("/", 1)[-1]
        return httpx.Response(200, json={"name": name, "slots": int(name[1:])})

    client, _ = _recording(answer)
    errors: list[BaseException] = []

    def read(i: int) -> None:
        try:
            for _ in range(20):
                assert client.get_pool(f"p{i}") == {"name": f"p{i}", "slots": i}
        except BaseException as err:  # reported to the main thread
            errors.append(err)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []


def test_a_password_that_is_a_field_name_does_not_unmask_other_credentials() -> None:
    """``excerpt`` replaces the client's own secrets before it looks for credential fields: with the
    (dev-setup) password ``password``, ``password=...`` in an answer becomes ``***=...`` and the value
    behind it is shown."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": "tok-0123456789"})
        return httpx.Response(500, text="backend login failed: user=etl password=hunter2-XYZ")

    client = AirflowRestClient("http://api", "admin", "password", transport=httpx.MockTransport(handler))
    with pytest.raises(RestError, match="HTTP 500") as err:
        client.put_variable("lease", "v")
    assert "hunter2-XYZ" not in str(err.value)
