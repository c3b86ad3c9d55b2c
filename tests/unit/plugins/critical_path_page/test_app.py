"""Critical-path page app: its plan endpoint (the plan CLI's JSON, the rule each prediction assumes)
and what a user may read (no anonymous requests; only the pools and DAGs the user may read)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_gpu_dag.airflow.history import LearnedGraph
from airflow_gpu_dag.core.planning.plan import build_plan
from tests.unit.plugins.critical_path_page.conftest import (
    app_endpoint,
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
