"""REST client (auth, pools, pagination), the connection hook, and that secrets never reach logs."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook, base_url_of
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, RestError
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from airflow_gpu_dag.watermark.sources import CapacityReading, SourceError

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
    # Before: a server with [api] maximum_page_limit=50 answered 50 of the 100 asked for, and the
    # client took the short page for the last one: 50 of 230 task instances, silently.
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


def test_a_token_refused_as_invalid_after_a_restart_is_renewed_once() -> None:
    # Before: every call after the restart failed with HTTP 403 until the controller restarted.
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


class _Failing:
    kind = "fake"

    def read(self) -> CapacityReading:
        raise SourceError("exporter down")


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
