"""Critical-path page: defects found by an audit of the plugin, each test failing on the old code."""

from __future__ import annotations

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.plan import build_plan
from airflow_gpu_dag.plugins.critical_path_page.data import pool_views, predicted_schedules
from airflow_gpu_dag.plugins.critical_path_page.page_html import render_page


def _pool_slots_graph() -> TaskGraph:
    """``train`` asks for no GPU but holds 4 slots of ``gpu_default`` (the plan counts 4 GPUs)."""
    graph = TaskGraph("slots")
    graph.add("load", 600)
    graph.add("train", 3600, pool="gpu_default", pool_slots=4)
    graph.add_edge("load", "train")
    return graph


def test_a_gpu_pool_task_without_a_gpu_request_in_a_missing_pool_gets_no_makespan() -> None:
    # Before: only tasks with a GPU request were checked, so a task holding slots of a GPU pool that
    # does not exist was simulated on an unlimited pool and the page showed a makespan (4200 s) for
    # a run whose GPU task Airflow never starts.
    graph = _pool_slots_graph()
    assert build_plan(graph).task("train").gpus == 4
    views = pool_views({"default_pool": {"total": 128, "running": 0, "queued": 0, "open": 128}}, {})
    schedules = predicted_schedules(graph, views)
    assert schedules.results == {}
    assert "pool(s) gpu_default do not exist" in schedules.note
    page = render_page(build_plan(graph), schedules, views, "s", "p")
    assert "pool(s) gpu_default do not exist" in page and "makespan 1h10m" not in page
    # with the pool, it is simulated on its 4 slots
    views = pool_views({"gpu_default": {"total": 4, "running": 0, "queued": 0, "open": 4}}, {})
    schedules = predicted_schedules(graph, views)
    assert schedules.note == "" and schedules.results["stock"].makespan == 4200.0
