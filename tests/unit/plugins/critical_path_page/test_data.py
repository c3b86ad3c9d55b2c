"""Critical-path page: the data it shows (pool descriptions, pool views, predicted schedules, learned
marks, weight-rule notes) and the rendered page."""

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
    rule_uses_of_serialized,
    weight_rule_notes,
)
from airflow_gpu_dag.plugins.critical_path_page.page_html import render_page
from tests.unit.plugins.critical_path_page.conftest import (
    app_endpoint,
    gpu_pools,
    learned_marker_graph,
    page_graph,
    pipe_graph,
    serve_learned,
)


def _pool_slots_graph() -> TaskGraph:
    """``train`` asks for no GPU but holds 4 slots of ``gpu_default`` (the plan counts 4 GPUs)."""
    graph = TaskGraph("slots")
    graph.add("load", 600)
    graph.add("train", 3600, pool="gpu_default", pool_slots=4)
    graph.add_edge("load", "train")
    return graph


def test_a_gpu_pool_task_without_a_gpu_request_in_a_missing_pool_gets_no_makespan() -> None:
    # A task holding slots of a GPU pool that does not exist is checked even without a GPU request:
    # simulated on an unlimited pool, it would give a makespan (4200 s) for a run whose GPU task
    # Airflow never starts.
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
    graph = page_graph()
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
    graph = page_graph()
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


def test_a_persons_description_is_not_read_as_the_controllers() -> None:
    # "4 of capacity 16" in a hand-written description made the page simulate on 16 GPUs.
    text = "A100 node pool (4 of capacity 16 lent to us by team ML) - jobs too large: ask infra"
    assert parse_pool_description(text) == (None, 0, None)
    views = pool_views(
        {"gpu_default": {"total": 4, "running": 0, "queued": 0, "open": 4}}, {"gpu_default": text}
    )
    assert views[0].capacity is None and views[0].too_large is None
    assert predicted_schedules(page_graph(), views).capacity == {"gpu_default": 4}


def test_no_makespan_is_predicted_for_gpu_tasks_in_a_pool_that_does_not_exist() -> None:
    # Airflow never runs them; before, the missing pool counted as unlimited and a makespan was shown.
    views = pool_views({"default_pool": {"total": 128, "running": 0, "queued": 0, "open": 128}}, {})
    schedules = predicted_schedules(page_graph(), views)
    assert schedules.results == {} and "pool(s) gpu_default do not exist" in schedules.note


def test_an_over_committed_pool_has_no_open_slots_not_unlimited() -> None:
    # Airflow's slots_stats gives open = total - running - queued, negative once the watermark
    # controller shrinks a pool below the slots its running tasks hold; -1 is also the page's
    # "unlimited", so the pool table (and the JSON the table refreshes from) said "unlimited".
    views = pool_views({"gpu_default": {"total": 2, "running": 4, "queued": 1, "open": -3}}, {})
    assert views[0].open == 0 and views[0].used == 5
    page = render_page(build_plan(pipe_graph()), predicted_schedules(pipe_graph(), views), views, "s", "p")
    row = re.search(r'<tr data-pool="gpu_default">(.*?)</tr>', page)
    assert row is not None
    cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
    assert cells[1] == "2" and cells[6] == "0" and "unlimited" not in row.group(1)
    unlimited = pool_views(
        {"p": {"total": float("inf"), "running": 1, "queued": 0, "open": float("inf")}}, {}
    )
    assert unlimited[0].open == -1 and unlimited[0].slots == -1


def test_predicted_schedules_say_which_priority_rule_they_assume() -> None:
    # The page showed "reservation: makespan ..." under a policy line saying a stock-rule DAG's weights
    # are Airflow's, while that chart was planned with the packing rule (`simulate` says so, the page
    # did not).
    for rule, ours in ((None, "packing"), ("critical_path", "critical_path")):
        graph = pipe_graph(rule)
        page = render_page(build_plan(graph), predicted_schedules(graph, gpu_pools()), gpu_pools(), "s", "p")
        summary = re.search(r'<p id="gantt-summary">(.*?)</p>', page)
        assert summary is not None
        assert "stock (priority rule downstream)" in summary.group(1)
        assert f"reservation (priority rule {ours})" in summary.group(1)
        assert f"priority rule {ours}; lower bound" in page


def test_a_task_declaring_zero_is_not_marked_learned(monkeypatch: pytest.MonkeyPatch) -> None:
    # The plan keeps a marker task's declared 0 (with_estimates) and `plan` shows it as declared; the
    # page's task table said "0s (learned)", from the estimate instead of the plan.
    learned = learned_marker_graph()
    assert build_plan(learned.graph).task("done").duration == 0.0
    serve_learned(monkeypatch, learned)
    page = app_endpoint("/critical-path/{dag_id}")("pipe", session=None, user=None).body.decode()
    done = re.search(r'<tr[^>]*data-task-id="done"[^>]*>(.*?)</tr>', page)
    train = re.search(r'<tr[^>]*data-task-id="train"[^>]*>(.*?)</tr>', page)
    assert done is not None and train is not None
    assert re.findall(r"<td>([^<]*)</td>", done.group(1))[2] == "0s"
    assert re.findall(r"<td>([^<]*)</td>", train.group(1))[2] == "2h00m (learned)"


# -- DAGs whose weight rule cannot be compared across DAGs ---------------------------------------------------
def _serialized_dicts() -> dict[str, Any]:
    """The serialized JSON of a DAG on the critical-path rule (a plain and a mapped GPU task in
    gpu_default) and of a DAG on Airflow's default rule with a task in gpu_default."""
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

    with DAG("keyed", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as keyed:
        EmptyOperator(task_id="prep")
        BashOperator.partial(task_id="sweep", pool="gpu_default", executor_config=gpu_hints(gpus=1)).expand(
            bash_command=["a", "b"]
        )
    with DAG("stock", schedule=None) as stock:
        EmptyOperator(task_id="eval", pool="gpu_default", pool_slots=2)
    return {dag.dag_id: DagSerialization.to_dict(dag) for dag in (keyed, stock)}


def test_the_weight_rules_of_each_pool_are_read_from_the_serialized_json() -> None:
    data = _serialized_dicts()
    keyed = {
        (u.pool, u.rule.rsplit(".", 1)[-1], u.cross_dag, u.gpu)
        for u in rule_uses_of_serialized("keyed", data["keyed"])
    }
    assert keyed == {
        ("default_pool", "CriticalPathPriorityStrategy", True, False),
        ("gpu_default", "CriticalPathPriorityStrategy", True, True),  # the mapped task's partial arguments
    }
    stock = rule_uses_of_serialized("stock", data["stock"])
    assert [(u.pool, u.rule, u.cross_dag) for u in stock] == [("gpu_default", "downstream", False)]
    assert rule_uses_of_serialized("gone", None) == []


def test_the_page_names_a_dag_whose_weights_cannot_be_compared_with_the_dags_sharing_its_pools() -> None:
    """The page names the DAG on a stock weight rule: its tasks in gpu_default always sort after the
    other DAGs' keys."""
    data = _serialized_dicts()
    uses = [use for dag_id, d in data.items() for use in rule_uses_of_serialized(dag_id, d)]
    notes = weight_rule_notes("keyed", uses)
    assert notes == weight_rule_notes("stock", uses) and len(notes) == 1
    assert notes[0].startswith(
        "DAG 'stock' uses weight rule 'downstream' in GPU pool(s) gpu_default, which DAG(s) 'keyed'"
    )
    assert weight_rule_notes("other", uses) == []
    graph = _pool_slots_graph()
    page = render_page(build_plan(graph), ScheduleView(), None, "s", "p", weight_rules=notes)
    assert 'id="incomparable-weight-rules"' in page and "DAG &#x27;stock&#x27; uses weight rule" in page
    assert 'id="incomparable-weight-rules"' not in render_page(
        build_plan(graph), ScheduleView(), None, "s", "p"
    )
