"""Tests of ``airflow_gpu_dag.testing.rest``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.testing import ClusterError
from airflow_gpu_dag.testing import rest as rest_module
from airflow_gpu_dag.testing.rest import ClusterRest, _first_line, _is_database_error, rest_client

DB_ERROR = {"detail": {"reason": "Database error", "statement": "UPDATE ...", "message": "locked"}}
TAILS = "----- scheduler tail -----"

Answer = httpx.Response | Callable[[httpx.Request], httpx.Response]


class FakeApi:
    """An api-server behind an ``httpx.MockTransport``: per ``(method, path)`` a list of answers, the
    last one repeated; every request is recorded."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], list[Answer]] = {}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, *answers: Answer) -> None:
        self.answers[(method, path)] = list(answers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        queue = self.answers.get((request.method, request.url.path))
        if not queue:
            return httpx.Response(404, json={"detail": f"no route {request.url.path}"})
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        return answer(request) if callable(answer) else answer

    def calls(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if (r.method, r.url.path) == (method, path)]


class FakeClock:
    """``time.monotonic`` and ``time.sleep`` of the module: sleeping moves the clock, at once."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Cluster(ClusterRest):
    """The REST side of a cluster whose api-server is a :class:`FakeApi`."""

    dags_folder = Path("/opt/dags")
    boot_timeout = 30.0

    def __init__(self, api: FakeApi, **client: Any) -> None:
        self.client = AirflowRestClient(
            "http://api:8080", transport=httpx.MockTransport(api), **({"token": "tok-12345"} | client)
        )

    def _rest(self) -> AirflowRestClient:
        return self.client

    def log_tails(self, lines: int = 40) -> str:
        return TAILS


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(rest_module, "time", SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    return fake


def _json(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, json=body)


# -- small helpers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "content", "expected"),
    [
        (500, json.dumps(DB_ERROR), True),
        (503, json.dumps(DB_ERROR), True),
        (409, json.dumps({"detail": {"reason": "Database error"}}), False),  # a client error is the answer
        (500, json.dumps({"detail": {"reason": "Unique constraint violation"}}), False),
        (500, json.dumps({"detail": "Database error"}), False),
        (500, json.dumps(["Database error"]), False),
        (500, "null", False),
        (500, "<html>Internal Server Error</html>", False),
        (500, "", False),
        (500, b"\xff\xfe not utf-8", False),
    ],
)
def test_only_a_5xx_whose_detail_says_database_error_is_one(
    status: int, content: str | bytes, expected: bool
) -> None:
    assert _is_database_error(httpx.Response(status, content=content)) is expected


def test_the_first_line_of_an_error_or_its_class_name_when_it_says_nothing() -> None:
    assert _first_line(ClusterError("GET /x: 503\nlong log tail")) == "GET /x: 503"
    assert _first_line(TimeoutError()) == "TimeoutError"


def test_the_clusters_client_waits_for_a_booting_api_server_and_follows_redirects() -> None:
    """``rest_client`` against a real HTTP server: it logs in, follows the redirect of a trailing slash
    and retries GETs (the numbers are those the harness documents)."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length))
            hits.append(f"POST {self.path} {body['username']}")
            self._send(201, {"access_token": "jwt-from-login"})

        def do_GET(self) -> None:
            hits.append(f"GET {self.path} {self.headers.get('Authorization')}")
            if self.path == "/api/v2/pools/":
                self._send(307, {}, {"Location": "/api/v2/pools"})
            else:
                self._send(200, {"pools": [], "total_entries": 0})

    with _serving(Handler) as url:
        client = rest_client(url, "admin", "s3cret-pw")
        try:
            assert client.timeout == 60.0 and client._get_retries == rest_module.GET_RETRIES == 2
            assert client.send("GET", "/api/v2/pools/").json() == {"pools": [], "total_entries": 0}
        finally:
            client.close()
    assert hits == [
        "POST /auth/token admin",
        "GET /api/v2/pools/ Bearer jwt-from-login",
        "GET /api/v2/pools Bearer jwt-from-login",
    ]


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- calls -----------------------------------------------------------------------------------------------
def test_a_refused_call_names_method_path_status_and_body_without_log_tails(api: FakeApi) -> None:
    api.on("GET", "/api/v2/pools/nope", _json(404, {"detail": "Pool with name: `nope` was not found"}))
    with pytest.raises(ClusterError) as err:
        Cluster(api).api("GET", "/pools/nope")
    assert str(err.value) == (
        'GET /api/v2/pools/nope -> 404: {"detail":"Pool with name: `nope` was not found"}'
    )  # a client error is the test's: the components' logs would only bury it


def test_a_server_error_comes_with_the_components_log_tails(api: FakeApi) -> None:
    api.on("DELETE", "/api/v2/pools/gpu", _json(502, {"detail": "bad gateway"}))
    with pytest.raises(ClusterError) as err:
        Cluster(api).api("DELETE", "/pools/gpu")
    assert "DELETE /api/v2/pools/gpu -> 502" in str(err.value) and TAILS in str(err.value)


def test_a_huge_error_body_is_cut_in_the_message(api: FakeApi) -> None:
    api.on("GET", "/api/v2/dags/d", httpx.Response(400, text="x" * 100_000))
    with pytest.raises(ClusterError) as err:
        Cluster(api).api("GET", "/dags/d")
    assert len(str(err.value)) < 2100


def test_an_unchecked_call_returns_the_error_answer(api: FakeApi) -> None:
    api.on("GET", "/api/v2/dags/d", _json(404, {"detail": "not found"}))
    assert Cluster(api).api("GET", "/dags/d", check=False).status_code == 404


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("/pools", "/api/v2/pools"),
        ("pools", "/api/v2/pools"),
        ("/api/v2/pools", "/api/v2/pools"),
        ("api/v1/pools", "/api/v1/pools"),
        ("/apis/pools", "/api/v2/apis/pools"),  # only the /api/ prefix counts
    ],
)
def test_api_paths_are_relative_to_api_v2_unless_they_name_an_api(api: FakeApi, path: str, sent: str) -> None:
    api.on("GET", sent, _json(200, {}))
    Cluster(api).api("GET", path)
    assert [r.url.path for r in api.requests] == [sent]


def test_a_get_answered_with_a_database_error_is_retried_until_it_succeeds(
    api: FakeApi, clock: FakeClock
) -> None:
    api.on("GET", "/api/v2/pools/gpu", _json(500, DB_ERROR), _json(500, DB_ERROR), _json(200, {"slots": 2}))
    assert Cluster(api).api("GET", "/pools/gpu").json() == {"slots": 2}
    assert len(api.requests) == 3 and clock.slept == [rest_module.RETRY_WAIT] * 2


def test_a_persistent_database_error_fails_after_the_retries_with_the_log_tails(
    api: FakeApi, clock: FakeClock
) -> None:
    api.on("GET", "/api/v2/pools/gpu", _json(500, DB_ERROR))
    with pytest.raises(ClusterError, match=r"GET /api/v2/pools/gpu -> 500: .*Database error") as err:
        Cluster(api).api("GET", "/pools/gpu")
    assert TAILS in str(err.value) and len(api.requests) == 1 + rest_module.DB_ERROR_RETRIES


def test_an_expired_token_is_renewed_once_by_logging_in_again(api: FakeApi) -> None:
    api.on("POST", "/auth/token", _json(201, {"access_token": "second-jwt"}))
    api.on(
        "GET",
        "/api/v2/pools",
        lambda r: (
            _json(401, {"detail": "expired"})
            if r.headers["authorization"] == "Bearer first-jwt"
            else _json(200, {"pools": []})
        ),
    )
    cluster = Cluster(api, token="first-jwt", username="admin", password="admin-pw")
    assert cluster.api("GET", "/pools").json() == {"pools": []}
    assert cluster.token() == "second-jwt"


def test_a_login_that_fails_is_a_cluster_error(api: FakeApi) -> None:
    api.on("POST", "/auth/token", _json(403, {"detail": "Invalid credentials"}))
    cluster = Cluster(api, token=None, username="admin", password="wrong-pw")
    with pytest.raises(ClusterError, match=r"POST /auth/token: HTTP 403"):
        cluster.token()
    with pytest.raises(ClusterError, match=r"POST /auth/token: HTTP 403"):
        cluster.api("GET", "/pools")


def test_health_is_asked_without_a_token(api: FakeApi) -> None:
    api.on("GET", "/api/v2/monitor/health", _json(200, {"scheduler": {"status": "healthy"}}))
    assert Cluster(api).health() == {"scheduler": {"status": "healthy"}}
    (request,) = api.requests
    assert "authorization" not in request.headers


def test_an_unhealthy_answer_is_a_cluster_error(api: FakeApi) -> None:
    api.on("GET", "/api/v2/monitor/health", _json(503, {"metadatabase": {"status": "unhealthy"}}))
    with pytest.raises(ClusterError, match="503"):
        Cluster(api).health()


def test_the_execution_api_warm_up_names_what_did_not_answer() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    cluster = Cluster(FakeApi())
    cluster.client = AirflowRestClient(
        "http://api:8080", token="tok-12345", transport=httpx.MockTransport(refuse)
    )
    with pytest.raises(
        ClusterError, match=r"Execution API did not answer: .*api:8080 refused the connection"
    ):
        cluster._warm_up_execution_api()


# -- DAGs and runs ---------------------------------------------------------------------------------------
def test_a_paused_dag_is_unpaused_and_returned_once_its_details_are_served(
    api: FakeApi, clock: FakeClock
) -> None:
    paused = {"value": True}

    def patch(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content) == {"is_paused": False}
        paused["value"] = False
        return _json(200, {"dag_id": "d", "is_paused": False})

    api.on("GET", "/api/v2/dags/d", lambda r: _json(200, {"dag_id": "d", "is_paused": paused["value"]}))
    api.on("PATCH", "/api/v2/dags/d", patch)
    api.on("GET", "/api/v2/dags/d/details", _json(404, {}), _json(200, {"dag_id": "d"}))
    assert Cluster(api).wait_for_dag("d") == {"dag_id": "d", "is_paused": False}
    assert len(api.calls("PATCH", "/api/v2/dags/d")) == 1
    assert clock.slept == [0.1, 1.0]  # read again soon after the PATCH, then as any wait


def test_a_dag_never_parsed_is_reported_with_its_import_errors(api: FakeApi, clock: FakeClock) -> None:
    api.on(
        "GET",
        "/api/v2/importErrors",
        _json(
            200,
            {
                "import_errors": [
                    {"filename": "/opt/dags/d.py", "stack_trace": "x" * 5000 + "SyntaxError: boom"}
                ],
                "total_entries": 1,
            },
        ),
    )
    with pytest.raises(ClusterError) as err:
        Cluster(api).wait_for_dag("d", timeout=5)
    message = str(err.value)
    assert message.startswith("DAG 'd' was not parsed within 5s from /opt/dags. Import errors:\n")
    assert "/opt/dags/d.py: " in message and message.count("x") <= 1500 and "SyntaxError: boom" in message
    assert TAILS in message and sum(clock.slept) >= 5


def test_a_dag_never_parsed_without_import_errors_says_none(api: FakeApi, clock: FakeClock) -> None:
    api.on("GET", "/api/v2/importErrors", _json(200, {"import_errors": [], "total_entries": 0}))
    with pytest.raises(ClusterError, match=r"Import errors:\n  \(none\)"):
        Cluster(api).wait_for_dag("d", timeout=0)


def test_a_dag_that_stays_paused_ends_the_wait_at_its_timeout(api: FakeApi, clock: FakeClock) -> None:
    """The PATCH is answered 200 but the DAG is paused again (or still): each round looks at the clock
    (a loop straight back to GET and PATCH would not; the fake gives in after 50 rounds so it ends)."""
    gets = {"n": 0}

    def get(request: httpx.Request) -> httpx.Response:
        gets["n"] += 1
        return _json(200, {"dag_id": "d", "is_paused": gets["n"] < 50})

    api.on("GET", "/api/v2/dags/d", get)
    api.on("PATCH", "/api/v2/dags/d", _json(200, {"dag_id": "d", "is_paused": False}))
    api.on("GET", "/api/v2/dags/d/details", _json(200, {"dag_id": "d"}))
    api.on("GET", "/api/v2/importErrors", _json(200, {"import_errors": [], "total_entries": 0}))
    with pytest.raises(ClusterError, match="was not parsed within 3s"):
        Cluster(api).wait_for_dag("d", timeout=3)
    assert gets["n"] <= 40


def test_waiting_for_several_dags_shares_one_deadline(api: FakeApi, clock: FakeClock) -> None:
    ready_at = clock.now + 8
    api.on(
        "GET",
        "/api/v2/dags/a",
        lambda r: _json(200 if clock.now >= ready_at else 404, {"dag_id": "a", "is_paused": False}),
    )
    api.on("GET", "/api/v2/dags/a/details", _json(200, {}))
    api.on("GET", "/api/v2/importErrors", _json(200, {"import_errors": [], "total_entries": 0}))
    with pytest.raises(ClusterError, match=r"DAG 'b' was not parsed within 2s"):
        Cluster(api).wait_for_dags(["a", "b"], timeout=10)
    Cluster(api).wait_for_dags([], timeout=0)  # nothing to wait for


def test_wait_for_run_polls_until_the_run_is_over(api: FakeApi, clock: FakeClock) -> None:
    api.on(
        "GET",
        "/api/v2/dags/d/dagRuns/r1",
        _json(200, {"state": "queued"}),
        _json(200, {"state": "running"}),
        _json(200, {"state": "failed"}),
    )
    assert Cluster(api).wait_for_run("d", "r1", poll=0.5) == "failed"
    assert clock.slept == [0.5, 0.5]


def test_a_run_still_going_at_the_timeout_is_reported_with_its_tasks_and_health(
    api: FakeApi, clock: FakeClock
) -> None:
    api.on("GET", "/api/v2/dags/d/dagRuns/r1", _json(200, {"state": "running"}))
    tis = [
        {"task_id": "train", "map_index": -1, "state": "running"},
        {"task_id": "fit", "map_index": 3, "state": "queued"},
        {"task_id": "old"},
    ]
    api.on(
        "GET",
        "/api/v2/dags/d/dagRuns/r1/taskInstances",
        _json(200, {"task_instances": tis, "total_entries": 3}),
    )
    api.on("GET", "/api/v2/monitor/health", _json(200, {"scheduler": {"status": "unhealthy"}}))
    with pytest.raises(ClusterError) as err:
        Cluster(api).wait_for_run("d", "r1", timeout=3)
    message = str(err.value)
    assert message.startswith("DAG run d/r1 is still 'running' after 3s.\nTask instances:\n")
    assert "  train[-1]: running\n  fit[3]: queued\n  old[-1]: None\n" in message
    assert "Health: {'scheduler': {'status': 'unhealthy'}}" in message and TAILS in message


def test_a_run_id_chosen_by_the_harness_is_unique_and_timestamped(api: FakeApi) -> None:
    api.on(
        "POST",
        "/api/v2/dags/d/dagRuns",
        lambda r: _json(200, {"dag_run_id": json.loads(r.content)["dag_run_id"]}),
    )
    cluster = Cluster(api)
    first, second = (
        cluster.trigger("d"),
        cluster.trigger("d", {"k": [1]}, logical_date="2026-01-01T00:00:00Z"),
    )
    assert first.startswith("manual__20") and first != second
    assert json.loads(api.requests[1].content) == {
        "dag_run_id": second,
        "logical_date": "2026-01-01T00:00:00Z",
        "conf": {"k": [1]},
    }


# -- task instances, logs and pools ----------------------------------------------------------------------
def test_task_instances_are_read_page_by_page(api: FakeApi) -> None:
    tis = [{"task_id": f"t{i}", "map_index": -1, "state": "success"} for i in range(150)]

    def page(request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        return _json(200, {"task_instances": tis[offset : offset + limit], "total_entries": len(tis)})

    api.on("GET", "/api/v2/dags/d/dagRuns/r1/taskInstances", page)
    assert [t["task_id"] for t in Cluster(api).task_instances("d", "r1")] == [f"t{i}" for i in range(150)]


def test_a_task_log_of_json_events_is_one_line_per_event(api: FakeApi) -> None:
    content = [
        {"timestamp": "2026-01-01T00:00:00Z", "level": "info", "event": "starting", "logger": "task"},
        {"timestamp": "2026-01-01T00:00:01Z", "level": "error", "event": "OOM", "gpu": 0},
        "a plain line",
        {"event": "ünïcode ✓"},
    ]
    api.on("GET", "/api/v2/dags/d/dagRuns/r1/taskInstances/t/logs/2", _json(200, {"content": content}))
    log = Cluster(api).task_log("d", "r1", "t", try_number=2, map_index=4)
    assert log.splitlines() == [
        "2026-01-01T00:00:00Z info starting",
        "2026-01-01T00:00:01Z error OOM {'gpu': 0}",
        "a plain line",
        "  ünïcode ✓",
    ]
    (request,) = api.requests
    assert request.url.params["map_index"] == "4" and request.url.params["full_content"] == "true"
    assert request.headers["accept"] == "application/json"


def test_a_task_log_as_text_or_missing(api: FakeApi) -> None:
    path = "/api/v2/dags/d/dagRuns/r1/taskInstances/t/logs/1"
    api.on("GET", path, _json(200, {"content": "line 1\nline 2"}))
    assert Cluster(api).task_log("d", "r1", "t") == "line 1\nline 2"
    api.on("GET", path, _json(200, {"content": None}))
    assert Cluster(api).task_log("d", "r1", "t") == ""
    api.on("GET", path, _json(404, {"detail": "no such try"}))
    assert Cluster(api).task_log("d", "r1", "t") == ""


def test_set_pool_creates_a_missing_pool_with_a_description_naming_the_harness(api: FakeApi) -> None:
    api.on("PATCH", "/api/v2/pools/gpu%20a", _json(404, {}))
    api.on("POST", "/api/v2/pools", lambda r: _json(201, json.loads(r.content)))
    pool = Cluster(api).set_pool("gpu a", 4)
    assert pool == {
        "name": "gpu a",
        "slots": 4,
        "description": "created by AirflowCluster (gpu a)",
        "include_deferred": False,
    }


def test_a_pool_that_cannot_be_set_is_a_cluster_error_naming_it(api: FakeApi) -> None:
    api.on("PATCH", "/api/v2/pools/gpu", _json(403, {"detail": "Forbidden"}))
    with pytest.raises(ClusterError, match=r"set_pool\('gpu', 4\): PATCH /api/v2/pools/gpu: HTTP 403"):
        Cluster(api).set_pool("gpu", 4, description="mine")


def test_get_pool_returns_the_rest_object_and_a_missing_pool_is_an_error(api: FakeApi) -> None:
    api.on("GET", "/api/v2/pools/gpu", _json(200, {"name": "gpu", "slots": 2, "open_slots": 1}))
    assert Cluster(api).get_pool("gpu")["open_slots"] == 1
    with pytest.raises(ClusterError, match="GET /api/v2/pools/other -> 404"):
        Cluster(api).get_pool("other")
