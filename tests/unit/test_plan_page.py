"""The critical-path page's pieces without a server: layout, SVG, pools, HTML, and the auth gate."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.plan import build_plan
from airflow_gpu_dag.plugins.critical_path_page.data import (
    ScheduleView,
    parse_pool_description,
    pool_views,
    predicted_schedules,
)
from airflow_gpu_dag.plugins.critical_path_page.layout import NODE_HEIGHT, graph_svg, layout
from airflow_gpu_dag.plugins.critical_path_page.page_html import render_page


def _graph() -> TaskGraph:
    graph = TaskGraph("page")
    graph.add("load", 600)
    graph.add("train", 7200, gpus=4, pool="gpu_default", pool_slots=4)
    graph.add("stats", 1200)
    graph.add("eval", 1800, gpus=1, pool="gpu_default")
    for up, down in (("load", "train"), ("load", "stats"), ("train", "eval"), ("stats", "eval")):
        graph.add_edge(up, down)
    return graph


def _wide(n: int = 1000) -> TaskGraph:
    """``n`` tasks: a chain spine with fan-out/fan-in branches (layers of 10)."""
    graph = TaskGraph("wide")
    for i in range(n):
        graph.add(f"t{i}", 60 + (i % 7) * 30, gpus=1 + i % 2, pool="gpu_default")
    for i in range(10, n):
        graph.add_edge(f"t{i - 10}", f"t{i}")
        if i % 10 == 0:
            graph.add_edge(f"t{i - 9}", f"t{i}")
    return graph


def test_layout_puts_layers_in_columns_and_critical_first() -> None:
    boxes = layout(build_plan(_graph()))
    assert boxes["load"].column == 0
    assert boxes["train"].column == boxes["stats"].column == 1
    assert boxes["eval"].column == 2
    assert boxes["train"].row == 0 and boxes["stats"].row == 1  # critical on top
    assert boxes["stats"].y > boxes["train"].y + NODE_HEIGHT - 1


def test_graph_svg_marks_critical_nodes_edges_and_slack() -> None:
    svg = graph_svg(build_plan(_graph()))
    critical = set(re.findall(r'class="node critical" id="node-([^"]+)"', svg))
    assert critical == {"load", "train", "eval"}
    assert 'data-task-id="stats" data-slack="6000" data-critical="false"' in svg
    assert "slack 1h40m" in svg and "slack 0s" in svg
    edges = set(re.findall(r'class="edge critical" data-from="([^"]+)" data-to="([^"]+)"', svg))
    assert edges == {("load", "train"), ("train", "eval")}
    assert svg.count('class="edge') == 4


def test_graph_svg_escapes_ids() -> None:
    graph = TaskGraph("esc")
    graph.add("a<b>&c", 60)
    svg = graph_svg(build_plan(graph))
    assert "a&lt;b&gt;&amp;c" in svg and "a<b>" not in svg


def test_thousand_task_dag_renders() -> None:
    plan = build_plan(_wide())
    svg = graph_svg(plan)
    assert svg.count('class="node') == 1000
    boxes = layout(plan)
    assert len({(b.x, b.y) for b in boxes.values()}) == 1000  # no two nodes on top of each other


def test_parse_pool_description_from_the_watermark_controller() -> None:
    text = (
        "gpu-dag watermark: pool 4 of capacity 8 | source ok: static 8 GPUs | reserving 4 slots for "
        "dag/train: 2 of 8 free, slots expected free at +600s; backfill 0 slot(s) for work that cannot "
        'delay it [gpu-dag-state {"last_good":8,"failures":0}]'
    )
    assert parse_pool_description(text) == (8, 4, "dag/train")
    assert parse_pool_description("gpu-dag watermark: pool 8 of capacity 8 | no task waiting") == (8, 0, None)
    assert parse_pool_description("Default pool") == (None, 0, None)


def test_parse_the_description_the_controller_really_writes() -> None:
    from airflow_gpu_dag.core.policy.admission import ReadyTask, RunningTask
    from airflow_gpu_dag.core.policy.reservation import decide_pools
    from airflow_gpu_dag.watermark.controller import describe
    from airflow_gpu_dag.watermark.sources import PoolCapacity

    key = "gpu_pipeline/manual__2026-11-30T01:00:00+00:00/train/-1"
    decision = decide_pools(
        0.0,
        {"gpu_default": 8},
        [RunningTask("d/r/small/-1", "gpu_default", 6, 600.0)],
        [ReadyTask(key, "gpu_default", 4, 9000, 7200.0)],
    )["gpu_default"]
    assert decision.reserved_slots == 4
    text = describe(PoolCapacity(8, "ok", "static 8 GPUs", 0, 8), decision, decision.pool_size)
    assert parse_pool_description(text) == (8, 4, key)
    assert parse_pool_description("Default pool") == (None, 0, None)
    assert parse_pool_description(None) == (None, 0, None)


def test_pool_views_put_the_dags_pools_first() -> None:
    stats = {
        "default_pool": {"total": 128, "running": 1, "queued": 0, "open": 127},
        "gpu_default": {"total": 4, "running": 2, "queued": 1, "open": 1},
        "unlimited": {"total": float("inf"), "running": 0, "queued": 0, "open": float("inf")},
    }
    descriptions = {
        "gpu_default": "gpu-dag watermark: pool 4 of capacity 6 | reserving 2 slots for d/t: 0 of 6 free, ..."
    }
    views = pool_views(stats, descriptions, {"gpu_default"})
    assert [v.name for v in views] == ["gpu_default", "default_pool", "unlimited"]
    gpu = views[0]
    assert (gpu.slots, gpu.used, gpu.open, gpu.capacity, gpu.reserved, gpu.reserved_for) == (
        4,
        3,
        1,
        6,
        2,
        "d/t",
    )
    assert views[2].slots == -1 and views[2].open == -1


def test_predicted_schedules_use_measured_capacity() -> None:
    graph = _graph()
    views = pool_views(
        {"gpu_default": {"total": 2, "running": 0, "queued": 0, "open": 2}},
        {"gpu_default": "gpu-dag watermark: pool 2 of capacity 4 | reserving 2 slots for page/train: x"},
        {"gpu_default"},
    )
    schedules = predicted_schedules(graph, views)
    assert schedules.capacity == {"gpu_default": 4}
    assert set(schedules.results) == {"stock", "reservation"}
    too_small = pool_views({"gpu_default": {"total": 2, "running": 0, "queued": 0, "open": 2}}, {}, ())
    schedules = predicted_schedules(graph, too_small)
    assert schedules.results == {} and "train" in schedules.note


def test_render_page_has_every_section() -> None:
    graph = _graph()
    plan = build_plan(graph)
    views = pool_views(
        {"gpu_default": {"total": 4, "running": 0, "queued": 0, "open": 4}}, {}, {"gpu_default"}
    )
    page = render_page(plan, predicted_schedules(graph, views), views, "../static", "../api/pools")
    assert page.startswith("<!DOCTYPE html>")
    assert 'href="../static/page.css"' in page and 'data-pools-url="../api/pools"' in page
    assert page.count('class="node critical"') == 3
    assert page.count('class="gantt-bar') == 8  # 4 tasks x (stock, reservation)
    assert '<tr data-pool="gpu_default">' in page
    assert "load → train → eval" in page
    assert '<p id="policy">' not in page  # no policy line unless the caller says which one
    with_policy = render_page(
        replace(plan, policy="Priority: critical path, objective balanced"),
        predicted_schedules(graph, views),
        views,
        "s",
        "p",
    )
    assert '<p id="policy">Priority: critical path, objective balanced</p>' in with_policy
    no_pools = render_page(plan, ScheduleView(note="No access to pools."), None, "s", "p")
    assert "You may not read pools." in no_pools
    assert "unlimited GPUs (earliest starts)" in no_pools


def test_anonymous_requests_are_refused() -> None:
    from fastapi.testclient import TestClient

    from airflow_gpu_dag.plugins.critical_path_page.app import create_app

    client = TestClient(create_app())
    for path in ("/critical-path/page", "/api/plan/page", "/api/pools"):
        resp = client.get(path)
        assert resp.status_code == 401, (path, resp.text)
        assert resp.json() == {"detail": "Not authenticated"}
    assert client.get("/static/page.js").status_code == 200


@pytest.mark.parametrize("key", ["fastapi_apps", "external_views"])
def test_plugin_registers_the_page(key: str) -> None:
    from airflow_gpu_dag.plugins.plugin import GpuDagPlugin

    entries = getattr(GpuDagPlugin, key)
    assert len(entries) == 1
    if key == "fastapi_apps":
        assert entries[0]["url_prefix"] == "/gpu-dag"
    else:
        assert entries[0]["destination"] == "dag"
        assert entries[0]["href"] == "/gpu-dag/critical-path/{DAG_ID}"


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


def test_a_persons_description_is_not_read_as_the_controllers() -> None:
    # "4 of capacity 16" in a hand-written description made the page simulate on 16 GPUs.
    text = "A100 node pool (4 of capacity 16 lent to us by team ML) - jobs too large: ask infra"
    assert parse_pool_description(text) == (None, 0, None)
    views = pool_views(
        {"gpu_default": {"total": 4, "running": 0, "queued": 0, "open": 4}}, {"gpu_default": text}
    )
    assert views[0].capacity is None and views[0].too_large is None
    assert predicted_schedules(_graph(), views).capacity == {"gpu_default": 4}


def test_no_makespan_is_predicted_for_gpu_tasks_in_a_pool_that_does_not_exist() -> None:
    # Airflow never runs them; before, the missing pool counted as unlimited and a makespan was shown.
    views = pool_views({"default_pool": {"total": 128, "running": 0, "queued": 0, "open": 128}}, {})
    schedules = predicted_schedules(_graph(), views)
    assert schedules.results == {} and "pool(s) gpu_default do not exist" in schedules.note
