"""Critical-path page app: its plan endpoint (the plan CLI's JSON, the rule each prediction assumes)
and what a user may read (no anonymous requests; only the pools and DAGs the user may read)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from airflow_gpu_dag.airflow.history import LearnedGraph
from airflow_gpu_dag.core.planning.plan import build_plan
from tests.unit.plugins.critical_path_page.conftest import (
    app_endpoint,
    gpu_pools,
    learned_marker_graph,
    pipe_graph,
    serve_learned,
)


def test_the_plan_endpoint_says_which_rule_each_prediction_assumes(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = pipe_graph()
    serve_learned(monkeypatch, LearnedGraph(graph, graph, {}))
    data = app_endpoint("/api/plan/{dag_id}")("pipe", session=None, user=None)
    results = data["predicted"]["results"]
    assert {label: (r["policy"], r["priority_rule"]) for label, r in results.items()} == {
        "stock": ("stock", "downstream"),
        "reservation": ("reservation", "packing"),
    }
    train = next(t for t in results["stock"]["schedule"] if t["task_id"] == "train")
    assert train["pool"] == "gpu_default" and "priority" in train


def test_the_plan_endpoint_returns_the_json_of_plan_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/ui.md and docs/cli.md: the data endpoint returns the same object as `plan -o json`; it
    # lacked the per-task duration_source, declared_duration, map_of and map_index.
    from airflow_gpu_dag.cli.plan import _json as plan_cli_json

    learned = learned_marker_graph()
    serve_learned(monkeypatch, learned)
    data = app_endpoint("/api/plan/{dag_id}")("pipe", session=None, user=None)
    cli = plan_cli_json(build_plan(learned.graph), learned.graph, learned.estimates, "")
    assert data["tasks"] == cli["tasks"]
    tasks = {t["task_id"]: t for t in data["tasks"]}
    assert tasks["train"]["duration_source"] == "learned" and tasks["train"]["declared_duration"] == 3600
    assert tasks["done"]["duration_source"] == "declared"
    assert (tasks["fit[1]"]["map_of"], tasks["fit[1]"]["map_index"]) == ("fit", 1)


def test_anonymous_requests_are_refused() -> None:
    from fastapi.testclient import TestClient

    from airflow_gpu_dag.plugins.critical_path_page.app import create_app

    client = TestClient(create_app())
    for path in ("/critical-path/page", "/api/plan/page", "/api/pools"):
        resp = client.get(path)
        assert resp.status_code == 401, (path, resp.text)
        assert resp.json() == {"detail": "Not authenticated"}
    assert client.get("/static/page.js").status_code == 200


def test_the_pool_table_shows_only_the_pools_the_user_may_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # With [core] multi_team, Airflow's pools API shows a team its own pools; the page showed every
    # pool, and another team's DAG and task ids in its description.
    from types import SimpleNamespace

    from airflow.models.pool import Pool

    from airflow_gpu_dag.plugins.critical_path_page import app

    stats = {
        name: {"total": slots, "running": 0, "queued": 0, "open": slots}
        for name, slots in (("default_pool", 128), ("gpu_team_a", 4), ("gpu_team_b", 8))
    }
    descriptions = [
        ("default_pool", "Default pool"),
        ("gpu_team_a", "gpu-dag watermark: pool 4 of capacity 4"),
        (
            "gpu_team_b",
            "gpu-dag watermark: pool 8 of capacity 8 | reserving 8 slots for secret/r/task/-1: 0 of 8 free",
        ),
    ]
    monkeypatch.setattr(Pool, "slots_stats", staticmethod(lambda session: stats))
    asked: list[Any] = []

    class AuthManager:
        def get_authorized_pools(self, *, user: Any, method: str, session: Any) -> set[str]:
            asked.append((user, method))
            return {"default_pool", "gpu_team_a"}

    monkeypatch.setattr("airflow.api_fastapi.app.get_auth_manager", lambda: AuthManager())
    session = SimpleNamespace(execute=lambda query: SimpleNamespace(all=lambda: descriptions))
    views = app._pools(session, {"gpu_team_a"}, user="viewer_a")
    assert [v.name for v in views] == ["gpu_team_a", "default_pool"]
    assert asked == [("viewer_a", "GET")]


def test_the_page_reads_the_weight_rules_of_the_dags_its_user_may_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from airflow.models.serialized_dag import SerializedDagModel

    from airflow_gpu_dag.plugins.critical_path_page import app

    keyed = {
        "dag": {
            "tasks": [
                {
                    "__var": {
                        "task_id": "t",
                        "pool": "gpu_default",
                        "weight_rule": "x.CriticalPathPriorityStrategy",
                    }
                }
            ]
        }
    }
    stock = {"dag": {"tasks": [{"__var": {"task_id": "e", "pool": "gpu_default"}}]}}
    rows = {"keyed": keyed, "stock": stock, "secret": stock}
    asked: list[list[str]] = []

    def latest(*, dag_ids: list[str], session: Any) -> list[Any]:
        asked.append(dag_ids)
        return [SimpleNamespace(dag_id=d, data=rows[d]) for d in dag_ids]

    manager = SimpleNamespace(get_authorized_dag_ids=lambda **kwargs: {"stock"})
    monkeypatch.setattr(app.airflow_app, "get_auth_manager", lambda: manager)
    monkeypatch.setattr(SerializedDagModel, "get_latest_serialized_dags", latest)
    (note,) = app._weight_rule_notes("keyed", session=None, user=None)
    assert asked == [["keyed", "stock"]]  # 'secret', which the user may not read, is not read nor named
    assert note.startswith("DAG 'stock' uses weight rule 'downstream' in GPU pool(s) gpu_default")


# -- the app's helpers and routes, with the metadata database faked ---------------------------------------
class _Boom:
    """An auth manager whose every check fails (a broken auth backend)."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{name} is down")

        return fail


def test_an_unknown_dag_is_404_naming_it_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.models.serialized_dag import SerializedDagModel
    from fastapi import HTTPException

    from airflow_gpu_dag.plugins.critical_path_page import app

    monkeypatch.setattr(SerializedDagModel, "get_dag", staticmethod(lambda dag_id, session: None))
    with pytest.raises(HTTPException) as err:
        app._load("nightly_déjà", session=None)
    assert err.value.status_code == 404
    assert err.value.detail == "DAG 'nightly_déjà' not found (not parsed yet, or removed)."


def test_a_dag_with_a_dependency_cycle_is_422_naming_the_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.models.serialized_dag import SerializedDagModel
    from fastapi import HTTPException

    from airflow_gpu_dag.core.model.graph import TaskGraph
    from airflow_gpu_dag.plugins.critical_path_page import app

    graph = TaskGraph("loop")
    for task_id in ("a", "b"):
        graph.add(task_id, 60)
    graph.add_edge("a", "b")
    graph.add_edge("b", "a")
    monkeypatch.setattr(SerializedDagModel, "get_dag", staticmethod(lambda dag_id, session: object()))
    monkeypatch.setattr(app, "learned_task_graph", lambda dag, session: LearnedGraph(graph, graph, {}))
    with pytest.raises(HTTPException) as err:
        app._load("loop", session=None)
    assert err.value.status_code == 422
    assert re.fullmatch(r"DAG 'loop' has a dependency cycle: (a -> b -> a|b -> a -> b)", err.value.detail)


def test_load_plans_the_learned_graph_and_says_which_policy_it_assumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.models.serialized_dag import SerializedDagModel

    from airflow_gpu_dag.plugins.critical_path_page import app

    graph = pipe_graph()
    learned = LearnedGraph(graph, graph, {}, note="no past runs")
    seen: list[Any] = []
    serialized = object()
    monkeypatch.setattr(SerializedDagModel, "get_dag", staticmethod(lambda dag_id, session: serialized))
    monkeypatch.setattr(app, "learned_task_graph", lambda dag, session: seen.append(dag) or learned)
    got_graph, plan, got_learned = app._load("pipe", session=None)
    assert seen == [serialized] and got_graph is graph and got_learned is learned
    assert plan.critical_path == ["load", "train"] and plan.makespan == 4200
    assert "stock weight rule" in plan.policy


def test_a_failing_pool_authorization_check_hides_the_pools_not_the_page(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_gpu_dag.plugins.critical_path_page import app

    monkeypatch.setattr(app.airflow_app, "get_auth_manager", lambda: _Boom())
    assert app._may_read_pools(user="viewer") is False
    assert "pool authorization check failed" in caplog.text


@pytest.mark.parametrize(("answer", "may"), [(True, True), (False, False), (None, False), (1, True)])
def test_may_read_pools_is_what_the_auth_manager_says(
    monkeypatch: pytest.MonkeyPatch, answer: Any, may: bool
) -> None:
    from types import SimpleNamespace

    from airflow_gpu_dag.plugins.critical_path_page import app

    asked: list[dict[str, Any]] = []
    manager = SimpleNamespace(is_authorized_pool=lambda **kwargs: asked.append(kwargs) or answer)
    monkeypatch.setattr(app.airflow_app, "get_auth_manager", lambda: manager)
    assert app._may_read_pools(user="viewer") is may
    assert asked == [{"method": "GET", "user": "viewer"}]


def test_weight_rules_that_cannot_be_read_give_no_note_not_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_gpu_dag.plugins.critical_path_page import app

    monkeypatch.setattr(app.airflow_app, "get_auth_manager", lambda: _Boom())
    assert app._weight_rule_notes("pipe", session=None, user=None) == []
    assert "cannot read the weight rules" in caplog.text and "'pipe'" in caplog.text


def test_the_duration_sources_are_those_the_learned_graph_records() -> None:
    from airflow_gpu_dag.plugins.critical_path_page import app

    assert app._sources(learned_marker_graph().graph) == {"train": "learned", "done": "declared"}
    assert app._sources(pipe_graph()) == {}  # a graph not planned with learned durations says nothing


def test_without_access_to_pools_there_is_no_simulation_and_the_data_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_gpu_dag.plugins.critical_path_page import app

    graph = pipe_graph()
    serve_learned(monkeypatch, LearnedGraph(graph, graph, {}))
    monkeypatch.setattr(app, "_may_read_pools", lambda user: False)
    monkeypatch.setattr(app, "_pools", lambda *args: pytest.fail("pools read without access"))
    monkeypatch.setattr(app, "_weight_rule_notes", lambda dag_id, session, user: [])
    data = app_endpoint("/api/plan/{dag_id}")("pipe", session=None, user=None)
    assert data["predicted"] == {
        "capacity": {},
        "note": "No access to pools, so no simulation on them.",
        "unfit_rungs": [],
        "results": {},
    }


def test_the_plan_data_flags_estimates_off_by_more_than_the_flag_factor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_gpu_dag.plugins.critical_path_page import app

    learned = learned_marker_graph()
    serve_learned(monkeypatch, learned)
    monkeypatch.setattr(app, "_weight_rule_notes", lambda dag_id, session, user: ["note"])
    data = app_endpoint("/api/plan/{dag_id}")("pipe", session=None, user=None)
    assert data["estimates"]["train"]["flagged"] is True  # declared 1h, learned 2h: off by 2 > 1.5
    assert data["estimates"]["train"]["learned"] == 7200.0
    assert data["incomparable_weight_rules"] == ["note"]
    assert set(data) >= {"dag_id", "tasks", "critical_path", "history_note", "map_counts", "predicted"}


def test_the_page_links_the_pools_data_of_the_dags_pools_url_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_gpu_dag.core.model.graph import TaskGraph
    from airflow_gpu_dag.plugins.critical_path_page import app

    graph = TaskGraph("odd_pools")
    graph.add("a", 60, gpus=1, pool="gpu a&b")
    graph.add("b", 60, gpus=1, pool="gpu_z")
    serve_learned(monkeypatch, LearnedGraph(graph, graph, {}))
    monkeypatch.setattr(app, "_weight_rule_notes", lambda dag_id, session, user: [])
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(app, "render_page", lambda *args, **kwargs: calls.append(args) or "<p>page</p>")
    response = app_endpoint("/critical-path/{dag_id}")("odd_pools", session=None, user=None)
    assert response.body == b"<p>page</p>"
    ((_plan, _schedules, _pools, static_url, pools_url),) = calls
    assert static_url == "../static"
    assert pools_url == "../api/pools?pool=gpu+a%26b&pool=gpu_z"


@pytest.mark.parametrize(
    ("query", "asked"), [(None, set()), (["gpu_a", "gpu_a", "gpu_b"], {"gpu_a", "gpu_b"})]
)
def test_the_pools_data_passes_the_asked_pools_and_returns_their_views(
    monkeypatch: pytest.MonkeyPatch, query: Any, asked: set
) -> None:
    from airflow_gpu_dag.plugins.critical_path_page import app

    seen: list[set[str]] = []
    monkeypatch.setattr(app, "_pools", lambda session, dag_pools, user: seen.append(dag_pools) or gpu_pools())
    data = app_endpoint("/api/pools")(session=None, user="viewer", pool=query)
    assert seen == [asked]
    assert data == {"pools": [p.to_dict() for p in gpu_pools()]}


def test_the_app_publishes_no_api_docs_and_serves_no_file_outside_static() -> None:
    from fastapi.testclient import TestClient

    from airflow_gpu_dag.plugins.critical_path_page.app import create_app

    client = TestClient(create_app())
    for path in ("/docs", "/redoc", "/openapi.json", "/static/../app.py", "/static/%2e%2e/app.py"):
        assert client.get(path).status_code == 404, path
    assert client.get("/static/page.css").status_code == 200
