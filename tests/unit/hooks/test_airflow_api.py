"""The ``gpu_dag_api`` connection type: registration with Airflow's ProvidersManager, the connection
form the UI gets, URIs old and new, and ``test_connection`` against a fake api-server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.get_provider_info import get_provider_info
from airflow_gpu_dag.hooks import airflow_api
from airflow_gpu_dag.hooks.airflow_api import CONN_TYPE, AirflowApiHook, base_url_of
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient

PASSWORD = "pa55-w0rd-SECRET"


TOKEN = "tok-eyJhbGciOi-SECRET"


HEALTHY = {
    "metadatabase": {"status": "healthy"},
    "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": "2026-01-01T00:00:00Z"},
    "triggerer": {"status": None, "latest_triggerer_heartbeat": None},
}


class FakeApiServer:
    """Answers the health endpoint, /auth/token and GET /api/v2/pools; records what it was asked."""

    def __init__(self) -> None:
        self.health: Any = HEALTHY
        self.health_status = 200
        self.pools_status = 200
        self.unreachable = False
        #: The path a reverse proxy serves the api-server under (``/airflow``); "" for none.
        self.prefix = ""
        self.seen: list[tuple[str, str, str | None]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("Authorization")
        self.seen.append((request.method, str(request.url), auth))
        if self.unreachable:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if self.prefix:
            if not path.startswith(self.prefix + "/"):
                return httpx.Response(404, json={"detail": "Not Found"})
            path = path[len(self.prefix) :]
        if path == airflow_api.HEALTH_PATH:
            if isinstance(self.health, str):
                return httpx.Response(self.health_status, text=self.health)
            return httpx.Response(self.health_status, json=self.health)
        if path == "/auth/token":
            if json.loads(request.content)["password"] != PASSWORD:
                return httpx.Response(401, json={"detail": "Invalid credentials"})
            return httpx.Response(201, json={"access_token": TOKEN})
        if path == "/api/v2/pools" and request.method == "GET":
            if auth != f"Bearer {TOKEN}":
                return httpx.Response(401, json={"detail": "Not authenticated"})
            if self.pools_status != 200:
                return httpx.Response(self.pools_status, json={"detail": "Forbidden"})
            return httpx.Response(200, json={"pools": [{"name": "default_pool", "slots": 128}]})
        return httpx.Response(404)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    server = FakeApiServer()

    def client(*args: Any, **kwargs: Any) -> AirflowRestClient:
        return AirflowRestClient(*args, transport=httpx.MockTransport(server.handler), **kwargs)

    monkeypatch.setattr(airflow_api, "AirflowRestClient", client)
    yield server


def _set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, value: str | dict[str, Any]) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", text)


def _entry() -> dict[str, Any]:
    (entry,) = get_provider_info()["connection-types"]
    return dict(entry)


def _typed(monkeypatch: pytest.MonkeyPatch, password: str = PASSWORD, **fields: Any) -> AirflowApiHook:
    conn = {"conn_type": CONN_TYPE, "host": "http://api:8080", "login": "admin", "password": password}
    _set_conn(monkeypatch, "probe", {**conn, **fields})
    return AirflowApiHook("probe")


def test_provider_info_names_the_hook_and_its_type() -> None:
    entry = _entry()
    assert entry["connection-type"] == CONN_TYPE == AirflowApiHook.conn_type
    assert entry["hook-name"] == AirflowApiHook.hook_name
    module, _, name = entry["hook-class-name"].rpartition(".")
    assert (module, name) == (AirflowApiHook.__module__, AirflowApiHook.__name__)
    hooks = get_provider_info()["hooks"][0]["python-modules"]
    assert module in hooks


def test_providers_manager_registers_a_testable_connection_type() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    info = ProvidersManagerTaskRuntime().hooks[CONN_TYPE]
    assert info is not None, "ProvidersManager could not import the hook; see its log"
    assert info.hook_class_name == "airflow_gpu_dag.hooks.airflow_api.AirflowApiHook"
    assert info.package_name == "airflow-gpu-dag"
    assert info.connection_id_attribute_name == "conn_id"
    assert info.connection_testable


def test_the_ui_gets_the_form_from_provider_info() -> None:
    """What ``GET /ui/connections/hook_meta`` serves the connection form (without a browser)."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    (meta,) = [m for m in HookMetaService.hook_meta_data() if m.connection_type == CONN_TYPE]
    assert meta.hook_name == "Airflow REST API (gpu-dag)"
    standard = meta.standard_fields
    assert standard is not None
    assert standard.url_schema is not None and standard.url_schema.hidden
    assert standard.host is not None and standard.host.title == "API server URL"
    assert standard.host.placeholder == "http://airflow-api-server:8080"
    assert standard.login is not None and standard.login.title == "Username"
    extra = meta.extra_fields or {}
    assert set(extra) == {"token", "timeout"}
    assert extra["token"]["schema"]["format"] == "password"  # masked in the form
    assert extra["token"]["schema"]["title"] == "Bearer token"
    assert "number" in extra["timeout"]["schema"]["type"]


def test_hook_field_behaviour_is_the_provider_info_one_and_valid() -> None:
    import jsonschema
    from airflow.providers_manager import ProvidersManager

    behaviour = AirflowApiHook.get_ui_field_behaviour()
    declared = _entry()["ui-field-behaviour"]
    assert behaviour == {
        "hidden_fields": declared["hidden-fields"],
        "relabeling": declared["relabeling"],
        "placeholders": declared["placeholders"],
    }
    jsonschema.validate(behaviour, ProvidersManager()._customized_form_fields_schema_validator.schema)


@pytest.mark.parametrize(
    ("uri", "url"),
    [
        # the typed scheme (hyphens: a URI scheme may not hold '_')
        (f"gpu-dag-api://admin:{PASSWORD}@localhost:8080", "http://localhost:8080"),
        (
            f"gpu-dag-api://https://admin:{PASSWORD}@airflow.example.com:8443",
            "https://airflow.example.com:8443",
        ),
        (f"gpu-dag-api://http://admin:{PASSWORD}@airflow-api-server:8080", "http://airflow-api-server:8080"),
        # the generic http URIs of 0.1.0 keep working
        (f"http://admin:{PASSWORD}@localhost:8080", "http://localhost:8080"),
        (f"https://admin:{PASSWORD}@airflow.example.com", "https://airflow.example.com"),
    ],
)
def test_uris_old_and_new(monkeypatch: pytest.MonkeyPatch, uri: str, url: str) -> None:
    _set_conn(monkeypatch, "gpu_dag_api", uri)
    rest = AirflowApiHook().get_client()
    assert rest.base_url == url
    assert PASSWORD not in repr(rest)


def test_a_typed_connection_round_trips_through_its_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    """The api-server's test endpoint hands the connection to the hook as ``get_uri()``."""
    from airflow.models.connection import Connection

    conn = Connection(
        conn_id="x",
        conn_type=CONN_TYPE,
        host="https://airflow.example.com",
        port=8443,
        login="admin",
        password=PASSWORD,
        extra=json.dumps({"timeout": 3}),
    )
    _set_conn(monkeypatch, "roundtrip", conn.get_uri())
    hook = AirflowApiHook("roundtrip")
    again = hook.get_connection("roundtrip")
    assert (again.conn_type, again.login, again.password) == (CONN_TYPE, "admin", PASSWORD)
    assert hook.get_client().base_url == "https://airflow.example.com:8443"


@pytest.mark.parametrize(
    "conn",
    [
        {"conn_type": CONN_TYPE, "host": "https://gw.example.com/airflow", "port": 8443},
        {"conn_type": CONN_TYPE, "host": "https://gw.example.com/airflow/api/v2/", "port": 8443},
        {"conn_type": CONN_TYPE, "host": "https://gw.example.com:8443/airflow"},
        "gpu-dag-api://https://admin:{pw}@gw.example.com%2Fairflow:8443",
        # the prefix as the URI's path (Airflow's "schema"); before, it was dropped
        "gpu-dag-api://https://admin:{pw}@gw.example.com:8443/airflow",
        "gpu-dag-api://https://admin:{pw}@gw.example.com:8443/airflow/api/v2",
    ],
)
def test_an_api_server_behind_a_path_prefix(
    monkeypatch: pytest.MonkeyPatch, api: FakeApiServer, conn: str | dict[str, Any]
) -> None:
    # The port goes after the host, not after its path ("https://gw.example.com/airflow:8443" cannot be
    # reached), and a host ending in /api/v2 must not get every path twice (/api/v2/api/v2/...).
    api.prefix = "/airflow"
    if isinstance(conn, dict):
        conn = {**conn, "login": "admin", "password": PASSWORD}
    else:
        conn = conn.format(pw=PASSWORD)
    _set_conn(monkeypatch, "proxied", conn)
    hook = AirflowApiHook("proxied")
    assert hook.get_client().base_url == "https://gw.example.com:8443/airflow"
    ok, message = hook.test_connection()
    assert ok, message
    assert [httpx.URL(u).path for _, u, _ in api.seen] == [
        "/airflow/api/v2/monitor/health",
        "/airflow/auth/token",
        "/airflow/api/v2/pools",
    ]


def test_a_prefixed_connection_round_trips_through_its_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.models.connection import Connection

    conn = Connection(
        conn_id="x", conn_type=CONN_TYPE, host="https://gw.example.com/airflow", port=8443, login="admin"
    )
    _set_conn(monkeypatch, "roundtrip", conn.get_uri())
    assert AirflowApiHook("roundtrip").get_client().base_url == "https://gw.example.com:8443/airflow"


def test_token_and_timeout_from_extra(monkeypatch: pytest.MonkeyPatch, api: FakeApiServer) -> None:
    for key in ("token", f"extra__{CONN_TYPE}__token"):
        _set_conn(
            monkeypatch,
            "tok",
            {"conn_type": CONN_TYPE, "host": "http://api:8080", "extra": {key: TOKEN, "timeout": 2.5}},
        )
        rest = AirflowApiHook("tok").get_client()
        assert rest.token() == TOKEN and TOKEN not in repr(rest)
        assert rest._http.timeout.read == 2.5
    assert AirflowApiHook("tok", timeout=7).get_client()._http.timeout.read == 7
    assert not [s for s in api.seen if "/auth/token" in s[1]]  # a token needs no login


@pytest.mark.parametrize("bad", [0, -1, "soon"])
def test_bad_timeout_is_named(monkeypatch: pytest.MonkeyPatch, bad: object) -> None:
    _set_conn(monkeypatch, "slow", {"conn_type": CONN_TYPE, "host": "http://api", "extra": {"timeout": bad}})
    with pytest.raises(ValueError, match=r"connection 'slow': timeout must be a number of seconds > 0"):
        AirflowApiHook("slow").get_client()


def test_connection_ok_calls_health_then_reads_pools(
    monkeypatch: pytest.MonkeyPatch, api: FakeApiServer
) -> None:
    ok, message = _typed(monkeypatch).test_connection()
    assert ok, message
    assert message.startswith("http://api:8080: api-server healthy")
    assert "metadatabase healthy" in message and "scheduler healthy" in message
    assert "credentials can read pools" in message
    calls = [(m, httpx.URL(u).path) for m, u, _ in api.seen]
    assert calls == [("GET", airflow_api.HEALTH_PATH), ("POST", "/auth/token"), ("GET", "/api/v2/pools")]
    assert api.seen[0][2] is None  # the health call sends no credentials
    assert PASSWORD not in message and TOKEN not in message


def test_connection_wrong_password(monkeypatch: pytest.MonkeyPatch, api: FakeApiServer) -> None:
    ok, message = _typed(monkeypatch, password="wrong-SECRET").test_connection()
    assert not ok
    assert "login as 'admin' refused" in message and "HTTP 401" in message
    assert "check login and password" in message
    assert "wrong-SECRET" not in message


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda a: setattr(a, "unreachable", True), "GET /api/v2/monitor/health: ConnectError"),
        (lambda a: setattr(a, "health_status", 404), "HTTP 404; is the host the api-server URL"),
        (
            lambda a: setattr(a, "health", {"metadatabase": {"status": "unhealthy"}}),
            "metadata database is unhealthy",
        ),
        (lambda a: setattr(a, "health", {"status": "ok"}), "not an Airflow 3 health answer"),
        (
            lambda a: setattr(a, "health", "<html>proxy</html>"),
            "GET http://api:8080/api/v2/monitor/health: expected a JSON object, got not JSON",
        ),
        (
            lambda a: setattr(a, "health", [{"status": "healthy"}]),
            "GET http://api:8080/api/v2/monitor/health: expected a JSON object, got a JSON list",
        ),
        (lambda a: setattr(a, "pools_status", 403), "HTTP 403: user 'admin' may not read pools"),
        (lambda a: setattr(a, "pools_status", 500), "GET http://api:8080/api/v2/pools: HTTP 500"),
    ],
)
def test_connection_failures_say_what_failed(
    monkeypatch: pytest.MonkeyPatch, api: FakeApiServer, setup: Any, expected: str
) -> None:
    setup(api)
    ok, message = _typed(monkeypatch).test_connection()
    assert not ok
    assert expected in message, message
    assert message.startswith("http://api:8080") or message.startswith("GET http://api:8080")
    assert PASSWORD not in message


def test_connection_without_host_or_connection(monkeypatch: pytest.MonkeyPatch, api: FakeApiServer) -> None:
    ok, message = _typed(monkeypatch, host="").test_connection()
    assert (ok, message.split(":")[0]) == (False, "connection 'probe'")
    assert "has no host" in message
    ok, message = AirflowApiHook("no_such_connection").test_connection()
    assert not ok and "no_such_connection" in message
    assert api.seen == []


def test_the_api_servers_test_path(monkeypatch: pytest.MonkeyPatch, api: FakeApiServer) -> None:
    """``Connection.test_connection`` as ``POST /api/v2/connections/test`` runs it: the connection
    exported as ``AIRFLOW_CONN_<ID>`` from ``get_uri()``, the hook found by connection type."""
    from airflow.models.connection import Connection

    conn = Connection(
        conn_id="transient_abc", conn_type=CONN_TYPE, host="http://api:8080", login="admin", password=PASSWORD
    )
    _set_conn(monkeypatch, "transient_abc", conn.get_uri())
    assert conn.test_connection() == (
        True,
        "http://api:8080: api-server healthy (metadatabase healthy, scheduler healthy); "
        "credentials can read pools",
    )


def test_connection_to_a_trickling_server_fails_by_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # the UI's Test button waited for as long as the server kept sending a byte now and then
    import time

    from tests.unit.hooks.conftest import TrickleServer

    with TrickleServer() as server:
        _set_conn(
            monkeypatch, "slow_api", {"conn_type": CONN_TYPE, "host": server.url, "extra": {"timeout": 1}}
        )
        started = time.monotonic()
        ok, message = AirflowApiHook("slow_api").test_connection()
        took = time.monotonic() - started
    assert not ok and "GET /api/v2/monitor/health: ReadTimeout" in message
    assert took < 1 + 3.0


@pytest.mark.parametrize("failure", ["refused", "dns", "timeout"])
def test_a_network_failure_says_what_failed(monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    """docs/connections.md promises "the connection was refused": the Test button said only
    ``ConnectError``. Now it names the host and port and the cause, each with its fix: nothing listens
    on the port, the host name does not resolve, or no answer in time (real sockets, no fake)."""
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free_port = closed.getsockname()[1]  # closed at once: nothing listens there
    with socket.socket() as silent:  # accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        hosts = {
            "refused": (f"http://127.0.0.1:{free_port}", f"127.0.0.1:{free_port} refused the connection"),
            "dns": ("http://no-such-host.invalid:8080", "'no-such-host.invalid' cannot be resolved (DNS)"),
            "timeout": (
                f"http://127.0.0.1:{silent.getsockname()[1]}",
                f"no complete answer from 127.0.0.1:{silent.getsockname()[1]} within the call's deadline",
            ),
        }
        host, expected = hosts[failure]
        conn = {"conn_type": CONN_TYPE, "host": host, "login": "admin", "password": PASSWORD}
        _set_conn(monkeypatch, "probe", {**conn, "extra": {"timeout": 1}})
        ok, message = AirflowApiHook("probe").test_connection()
    assert not ok
    assert expected in message, message
    assert PASSWORD not in message


PASSWORD_PERCENT_ENCODED = "s3cr3t-p%40ss"


# -- IPv6 hosts ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("uri", "url"),
    [
        (f"gpu-dag-api://admin:{PASSWORD_PERCENT_ENCODED}@[::1]:8080", "http://[::1]:8080"),
        (f"gpu-dag-api://admin:{PASSWORD_PERCENT_ENCODED}@[fd00::2a]", "http://[fd00::2a]"),
        (
            f"gpu-dag-api://https://admin:{PASSWORD_PERCENT_ENCODED}@[2001:db8::1]:8443/airflow",
            "https://[2001:db8::1]:8443/airflow",
        ),
    ],
)
def test_an_ipv6_host_in_a_connection_uri(monkeypatch: pytest.MonkeyPatch, uri: str, url: str) -> None:
    """Airflow reads ``[::1]`` of a URI as the host ``::1`` (no brackets): its colons are no port."""
    monkeypatch.setenv("AIRFLOW_CONN_GPU_DAG_API", uri)
    client = AirflowApiHook().get_client()
    try:
        assert client.base_url == url
    finally:
        client.close()


def test_base_url_of_bare_and_bracketed_ipv6() -> None:
    assert base_url_of("::1", 8080) == "http://[::1]:8080"
    assert base_url_of("https://fe80::1", None) == "https://[fe80::1]"
    assert base_url_of("http://[::1]:9000/x", 8080) == "http://[::1]:9000/x"
    assert base_url_of("localhost", 8080) == "http://localhost:8080"
    with pytest.raises(ValueError, match="not a number"):
        base_url_of("http://host:port", None)


# -- timeout -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["inf", 1e400, "nan"])
def test_an_infinite_timeout_is_named_at_once(monkeypatch: pytest.MonkeyPatch, bad: object) -> None:
    """``{"timeout": "inf"}`` (meant as "no limit") made every REST call fail in httpx with
    ``OverflowError: timestamp out of range``, tick after tick, naming neither connection nor field."""
    conn = {"conn_type": "gpu_dag_api", "host": "http://api:8080", "extra": {"timeout": bad}}
    monkeypatch.setenv("AIRFLOW_CONN_SLOW_INF", json.dumps(conn))
    with pytest.raises(ValueError, match=r"connection 'slow_inf': timeout must be a number of seconds > 0"):
        AirflowApiHook("slow_inf").get_client()
