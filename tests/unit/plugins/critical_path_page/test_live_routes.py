"""Tests of ``airflow_gpu_dag.plugins.critical_path_page.live_routes``."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, HTTPException
from starlette.requests import Request

from airflow_gpu_dag.cli.explain_report import (
    EXIT_API,
    EXIT_NO_CONTROLLER,
    EXIT_NOT_FOUND,
    EXIT_NOT_PROVIDER,
    ExplainError,
)
from airflow_gpu_dag.plugins.critical_path_page import live_routes
from airflow_gpu_dag.watermark.durations import ControllerHistory


def _request(*headers: tuple[str, str]) -> Request:
    return Request({"type": "http", "headers": [(k.lower().encode(), v.encode()) for k, v in headers]})


class _Client:
    """Stands in for the REST client of the api-server: records whether it was closed."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def explain(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``own_api`` and ``build_report`` replaced: what ``build_report`` was called with, and its answer
    (a dict, or an exception to raise) under ``"answer"``."""
    seen: dict[str, Any] = {"client": _Client(), "answer": {"dag_id": "d", "run_id": "r1", "tasks": []}}

    def build_report(client: Any, dag_id: str, run_id: str | None, **kwargs: Any) -> dict[str, Any]:
        seen.update(called_with=(client, dag_id, run_id), kwargs=kwargs)
        if isinstance(seen["answer"], BaseException):
            raise seen["answer"]
        return dict(seen["answer"])

    monkeypatch.setattr(live_routes, "own_api", lambda request: seen["client"])
    monkeypatch.setattr(live_routes, "build_report", build_report)
    return seen


# -- the viewer's token ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "token"),
    [
        ((("Authorization", "Bearer abc.def"),), "abc.def"),
        ((("Authorization", "bearer   abc  "),), "abc"),
        ((("Authorization", "BEARER abc"), ("Cookie", "_token=cookie")), "abc"),  # the header wins
        ((("Authorization", "Basic dXNlcjpwdw=="), ("Cookie", "_token=cookie")), "cookie"),
        ((("Cookie", "session=x; _token=ey.J"),), "ey.J"),
        (
            (("Authorization", "Bearer"), ("Cookie", "_token=cookie")),
            "cookie",
        ),  # as the server trims "Bearer "
        ((("Cookie", "session=x"),), ""),
        ((), ""),
    ],
)
def test_the_viewers_token_comes_from_the_bearer_header_else_the_ui_cookie(
    headers: tuple[tuple[str, str], ...], token: str
) -> None:
    assert live_routes.viewer_token(_request(*headers)) == token


# -- the api-server's own REST API -----------------------------------------------------------------------
def test_the_own_api_is_the_configured_base_url_acting_as_the_viewer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/team-a/")
    client = live_routes.own_api(_request(("Authorization", "Bearer viewer-jwt")))
    try:
        assert client.base_url == "https://airflow.example.com/team-a"  # a path prefix kept, no "//"
        assert client.token() == "viewer-jwt" and client.timeout == 30.0
    finally:
        client.close()


def test_without_a_base_url_the_own_api_is_the_servers_host_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    monkeypatch.setenv("AIRFLOW__API__HOST", "10.1.2.3")
    monkeypatch.setenv("AIRFLOW__API__PORT", "9091")
    client = live_routes.own_api(_request(("Cookie", "_token=t0k3n-from-cookie")))
    try:
        assert client.base_url == "http://10.1.2.3:9091" and client.token() == "t0k3n-from-cookie"
    finally:
        client.close()


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("::", "http://[::1]:8080"),
        ("0.0.0.0", "http://127.0.0.1:8080"),
        ("fd00::5", "http://[fd00::5]:8080"),
        ("[fd00::5]", "http://[fd00::5]:8080"),
        ("10.0.0.5", "http://10.0.0.5:8080"),
        ("api.internal", "http://api.internal:8080"),
    ],
)
def test_the_api_host_becomes_a_url_this_process_can_call(
    monkeypatch: pytest.MonkeyPatch, host: str, url: str
) -> None:
    """Without a base_url, an api-server bound to every address (``::``, ``0.0.0.0``) is called on the
    loopback address, and an IPv6 address is bracketed (``http://:::8080`` was refused by httpx with
    InvalidURL, outside the 502 mapping: a bare 500)."""
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    monkeypatch.setenv("AIRFLOW__API__HOST", host)
    monkeypatch.setenv("AIRFLOW__API__PORT", "8080")
    client = live_routes.own_api(_request(("Authorization", "Bearer t0k3n-abc")))
    client.close()
    assert client.base_url == url


# -- the report and its errors ---------------------------------------------------------------------------
def test_tilde_asks_for_the_latest_run_and_other_run_ids_are_passed_as_they_are(
    explain: dict[str, Any],
) -> None:
    assert live_routes.live_report("d", "~", _request()) == explain["answer"]
    assert explain["called_with"] == (explain["client"], "d", None)
    run_id = "scheduled__2026-01-01T00:00:00+00:00"
    live_routes.live_report("d", run_id, _request())
    assert explain["called_with"][2] == run_id
    live_routes.live_report("d", "~~", _request())  # only "~" itself means the latest
    assert explain["called_with"][2] == "~~"


def test_the_report_learns_durations_through_the_viewers_client(explain: dict[str, Any]) -> None:
    live_routes.live_report("d", "r1", _request())
    kwargs = explain["kwargs"]
    assert isinstance(kwargs["history"], ControllerHistory)
    assert set(kwargs) == {"history", "gate", "epoch"}


@pytest.mark.parametrize(
    ("code", "status"),
    [(EXIT_NOT_FOUND, 404), (EXIT_NOT_PROVIDER, 422), (EXIT_API, 502), (EXIT_NO_CONTROLLER, 500), (99, 500)],
)
def test_an_explain_error_becomes_its_http_status_with_its_message(
    explain: dict[str, Any], code: int, status: int
) -> None:
    explain["answer"] = ExplainError("DAG 'd' has no run 'r9'. Its latest runs: r1, r2.", code)
    with pytest.raises(HTTPException) as err:
        live_routes.live_report("d", "r9", _request())
    assert err.value.status_code == status
    assert err.value.detail == "DAG 'd' has no run 'r9'. Its latest runs: r1, r2."
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no chained traceback shown
    assert explain["client"].closed == 1


def test_the_client_is_closed_after_a_report_and_after_an_unexpected_error(explain: dict[str, Any]) -> None:
    live_routes.live_report("d", "r1", _request())
    assert explain["client"].closed == 1
    explain["answer"] = RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        live_routes.live_report("d", "r1", _request())
    assert explain["client"].closed == 2


# -- the routes ------------------------------------------------------------------------------------------
def _routes() -> dict[str, Any]:
    app = FastAPI()
    live_routes.add_live_routes(app)
    return {route.path: route for route in app.routes if hasattr(route, "endpoint")}


def test_both_routes_are_added_and_need_read_access_to_the_dag() -> None:
    routes = _routes()
    for path in ("/critical-path/{dag_id}/runs/{run_id}", "/api/live/{dag_id}/{run_id}"):
        route = routes[path]
        assert route.methods == {"GET"}
        (dependency,) = route.dependencies
        assert dependency.dependency.__qualname__.startswith("requires_access_dag.")
        assert dependency.dependency.__closure__ is not None
        assert "GET" in [cell.cell_contents for cell in dependency.dependency.__closure__]


def test_the_page_route_renders_the_report_and_the_data_route_returns_it(
    explain: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered: list[dict[str, Any]] = []
    monkeypatch.setattr(live_routes, "render_live", lambda report: rendered.append(report) or "<p>live</p>")
    routes = _routes()
    page = routes["/critical-path/{dag_id}/runs/{run_id}"].endpoint("d", "~", _request())
    assert page.body == b"<p>live</p>" and page.media_type == "text/html"
    assert rendered == [explain["answer"]]
    data = routes["/api/live/{dag_id}/{run_id}"].endpoint("d", "r1", _request())
    assert data == explain["answer"] and explain["called_with"][1:] == ("d", "r1")


def test_an_authorized_viewer_gets_the_page_and_an_unknown_run_gets_404(
    explain: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through HTTP, with Airflow's own access check: the DAG id of the path is what is checked, and a
    run id with ``:`` and ``+`` arrives decoded and intact."""
    from airflow.api_fastapi.core_api import security
    from airflow.models.dag import DagModel
    from fastapi.testclient import TestClient

    asked: list[tuple[str, str | None]] = []

    class AuthManager:
        def is_authorized_dag(self, *, method: str, access_entity: Any, details: Any, user: Any) -> bool:
            asked.append((method, details.id))
            return details.id == "mine"

    monkeypatch.setattr(security, "get_auth_manager", lambda: AuthManager())
    monkeypatch.setattr(DagModel, "get_team_name", staticmethod(lambda dag_id: None))
    monkeypatch.setattr(live_routes, "render_live", lambda report: f"<p>{report['run_id']}</p>")
    app = FastAPI()
    live_routes.add_live_routes(app)
    app.dependency_overrides[security.get_user] = lambda: object()
    client = TestClient(app)
    run = "scheduled__2026-01-01T00%3A00%3A00%2B00%3A00"
    resp = client.get(f"/critical-path/mine/runs/{run}")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    assert explain["called_with"][1:] == ("mine", "scheduled__2026-01-01T00:00:00+00:00")
    assert client.get("/api/live/theirs/r1").status_code == 403
    assert asked == [("GET", "mine"), ("GET", "theirs")]
    explain["answer"] = ExplainError("DAG 'mine' has no run 'r9'.", EXIT_NOT_FOUND)
    resp = client.get("/api/live/mine/r9")
    assert resp.status_code == 404 and resp.json() == {"detail": "DAG 'mine' has no run 'r9'."}
