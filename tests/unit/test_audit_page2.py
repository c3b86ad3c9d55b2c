"""Critical-path page and Gantt charts: defects found by a second audit, each test failing on the old
code."""

from __future__ import annotations

import re
from typing import Any

import pytest

from airflow_gpu_dag.airflow.history import LearnedGraph
from airflow_gpu_dag.charts.gantt import bars_from_plan
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, with_estimates
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.plan import build_plan
from airflow_gpu_dag.plugins.critical_path_page.data import pool_views, predicted_schedules
from airflow_gpu_dag.plugins.critical_path_page.layout import graph_svg
from airflow_gpu_dag.plugins.critical_path_page.page_html import render_page


def _pools(gpus: int = 4) -> Any:
    return pool_views(
        {
            "gpu_default": {"total": gpus, "running": 0, "queued": 0, "open": gpus},
            "default_pool": {"total": 128, "running": 0, "queued": 0, "open": 128},
        },
        {},
        {"gpu_default", "default_pool"},
    )


def _graph(rule: str | None = None) -> TaskGraph:
    graph = TaskGraph("pipe", priority_rule=rule)
    graph.add("load", 600)
    graph.add("train", 3600, gpus=2, pool="gpu_default")
    graph.add_edge("load", "train")
    return graph


def _endpoint(path: str) -> Any:
    from airflow_gpu_dag.plugins.critical_path_page.app import create_app

    (route,) = [r for r in create_app().routes if getattr(r, "path", None) == path]
    return route.endpoint  # type: ignore[attr-defined]


def _serve(monkeypatch: pytest.MonkeyPatch, learned: LearnedGraph) -> None:
    """The app's endpoints on ``learned`` (as read from the metadata DB) and :func:`_pools`."""
    from airflow_gpu_dag.plugins.critical_path_page import app

    plan = build_plan(learned.graph, learned.findings)
    monkeypatch.setattr(app, "_load", lambda dag_id, session: (learned.graph, plan, learned))
    monkeypatch.setattr(app, "_may_read_pools", lambda user: True)
    monkeypatch.setattr(app, "_pools", lambda session, dag_pools, user: _pools())
    monkeypatch.setattr(app, "_flag_factor", lambda: 1.5)


def test_an_over_committed_pool_has_no_open_slots_not_unlimited() -> None:
    # Airflow's slots_stats gives open = total - running - queued, negative once the watermark
    # controller shrinks a pool below the slots its running tasks hold; -1 is also the page's
    # "unlimited", so the pool table (and the JSON the table refreshes from) said "unlimited".
    views = pool_views({"gpu_default": {"total": 2, "running": 4, "queued": 1, "open": -3}}, {})
    assert views[0].open == 0 and views[0].used == 5
    page = render_page(build_plan(_graph()), predicted_schedules(_graph(), views), views, "s", "p")
    row = re.search(r'<tr data-pool="gpu_default">(.*?)</tr>', page)
    assert row is not None
    cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
    assert cells[1] == "2" and cells[6] == "0" and "unlimited" not in row.group(1)
    unlimited = pool_views(
        {"p": {"total": float("inf"), "running": 1, "queued": 0, "open": float("inf")}}, {}
    )
    assert unlimited[0].open == -1 and unlimited[0].slots == -1


def test_graph_labels_of_ids_sharing_a_long_prefix_stay_apart() -> None:
    # Labels were cut at the end: every task of a task group with a long prefix, and every instance of
    # a long mapped task, read the same ("training_group.fine_tu…").
    graph = TaskGraph("groups")
    ids = ["training_group.fine_tune_model_a", "training_group.fine_tune_model_b"]
    ids += [f"tokenize_and_preprocess[{i}]" for i in range(3)]
    for task_id in ids:
        graph.add(task_id, 60)
    svg = graph_svg(build_plan(graph))
    names = re.findall(r'<text x="6" y="14" class="name">([^<]*)</text>', svg)
    assert len(names) == len(ids) == len(set(names))
    assert all(len(name) <= 24 for name in names)
    assert "tokenize_an\u2026reprocess[2]" in names
    short = TaskGraph("short")
    short.add("load", 60)
    assert '<text x="6" y="14" class="name">load</text>' in graph_svg(build_plan(short))


def test_predicted_schedules_say_which_priority_rule_they_assume() -> None:
    # The page showed "reservation: makespan ..." under a policy line saying a stock-rule DAG's weights
    # are Airflow's, while that chart was planned with the packing rule (`simulate` says so, the page
    # did not).
    for rule, ours in ((None, "packing"), ("critical_path", "critical_path")):
        graph = _graph(rule)
        page = render_page(build_plan(graph), predicted_schedules(graph, _pools()), _pools(), "s", "p")
        summary = re.search(r'<p id="gantt-summary">(.*?)</p>', page)
        assert summary is not None
        assert "stock (priority rule downstream)" in summary.group(1)
        assert f"reservation (priority rule {ours})" in summary.group(1)
        assert f"priority rule {ours}; lower bound" in page


def test_the_plan_endpoint_says_which_rule_each_prediction_assumes(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _graph()
    _serve(monkeypatch, LearnedGraph(graph, graph, {}))
    data = _endpoint("/api/plan/{dag_id}")("pipe", session=None, user=None)
    results = data["predicted"]["results"]
    assert {label: (r["policy"], r["priority_rule"]) for label, r in results.items()} == {
        "stock": ("stock", "downstream"),
        "reservation": ("reservation", "packing"),
    }
    train = next(t for t in results["stock"]["schedule"] if t["task_id"] == "train")
    assert train["pool"] == "gpu_default" and "priority" in train


def _learned_marker_graph() -> LearnedGraph:
    """``done`` declares 0 (a marker task) but its past runs took 5 s; ``train`` learned 2h; ``fit[0]``
    and ``fit[1]`` are instances of the mapped task ``fit``."""
    declared = _graph()
    declared.add("done", 0)
    declared.add_edge("train", "done")
    declared.add("fit[0]", 300, attrs={"map_of": "fit", "map_index": 0})
    declared.add("fit[1]", 300, attrs={"map_of": "fit", "map_index": 1})
    estimates = {
        "done": DurationEstimate("done", 0.0, 0.0, learned=5.0, runs=5),
        "train": DurationEstimate("train", 3600.0, 3600.0, learned=7200.0, runs=5),
    }
    return LearnedGraph(with_estimates(declared, estimates), declared, estimates)


def test_the_plan_endpoint_returns_the_json_of_plan_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/ui.md and docs/cli.md: the data endpoint returns the same object as `plan -o json`; it
    # lacked the per-task duration_source, declared_duration, map_of and map_index.
    from airflow_gpu_dag.cli.plan import _json as plan_cli_json

    learned = _learned_marker_graph()
    _serve(monkeypatch, learned)
    data = _endpoint("/api/plan/{dag_id}")("pipe", session=None, user=None)
    cli = plan_cli_json(build_plan(learned.graph), learned.graph, learned.estimates, "")
    assert data["tasks"] == cli["tasks"]
    tasks = {t["task_id"]: t for t in data["tasks"]}
    assert tasks["train"]["duration_source"] == "learned" and tasks["train"]["declared_duration"] == 3600
    assert tasks["done"]["duration_source"] == "declared"
    assert (tasks["fit[1]"]["map_of"], tasks["fit[1]"]["map_index"]) == ("fit", 1)


def test_a_task_declaring_zero_is_not_marked_learned(monkeypatch: pytest.MonkeyPatch) -> None:
    # The plan keeps a marker task's declared 0 (with_estimates) and `plan` shows it as declared; the
    # page's task table said "0s (learned)", from the estimate instead of the plan.
    learned = _learned_marker_graph()
    assert build_plan(learned.graph).task("done").duration == 0.0
    _serve(monkeypatch, learned)
    page = _endpoint("/critical-path/{dag_id}")("pipe", session=None, user=None).body.decode()
    done = re.search(r'<tr[^>]*data-task-id="done"[^>]*>(.*?)</tr>', page)
    train = re.search(r'<tr[^>]*data-task-id="train"[^>]*>(.*?)</tr>', page)
    assert done is not None and train is not None
    assert re.findall(r"<td>([^<]*)</td>", done.group(1))[2] == "0s"
    assert re.findall(r"<td>([^<]*)</td>", train.group(1))[2] == "2h00m (learned)"


def test_earliest_start_bars_name_the_pool_of_a_task_without_one() -> None:
    # Without live pools the chart shows earliest starts; a GPU task with no pool of its own had the
    # tooltip "2 slot(s) of " (no pool), where the simulator and the task table say default_pool.
    graph = TaskGraph("nopool")
    graph.add("train", 600, gpus=2)
    (bar,) = bars_from_plan(build_plan(graph))
    assert bar.pool == "default_pool"
