"""The plan (airflow_gpu_dag.core.planning.plan): CPM figures, priority, GPU-hours, layers, Airflow DAG
input."""

from __future__ import annotations

import json

import pendulum
import pytest

from airflow_gpu_dag.airflow.dag_reader import plan_dag
from airflow_gpu_dag.core.model.graph import CycleError, TaskGraph, TaskNode
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.core.planning.plan import build_plan


def _diamond() -> TaskGraph:
    """load(10m) -> train(2h, 4 GPUs) -> eval(30m, 1 GPU); load -> stats(20m) -> eval."""
    graph = TaskGraph("diamond")
    graph.add("load", 600)
    graph.add("train", 7200, gpus=4)
    graph.add("stats", 1200)
    graph.add("eval", 1800, gpus=1)
    for up, down in (("load", "train"), ("load", "stats"), ("train", "eval"), ("stats", "eval")):
        graph.add_edge(up, down)
    return graph


def test_cpm_figures_per_task() -> None:
    plan = build_plan(_diamond())
    stats = plan.task("stats")
    assert (stats.earliest_start, stats.earliest_finish) == (600, 1800)
    assert (stats.latest_start, stats.latest_finish) == (7800 - 1200, 7800)
    assert stats.slack == 7800 - 1200 - 600
    assert not stats.critical
    train = plan.task("train")
    assert train.slack == 0 and train.critical
    assert plan.makespan == 600 + 7200 + 1800
    assert plan.critical_path == ["load", "train", "eval"]
    assert plan.critical_tasks == ["load", "train", "eval"]


def test_priority_is_remaining_critical_path_length() -> None:
    plan = build_plan(_diamond())
    assert plan.task("load").priority == 9600
    assert plan.task("train").priority == 9000
    assert plan.task("stats").priority == 3000
    assert plan.task("eval").priority == 1800
    huge = TaskGraph("huge")
    huge.add("forever", 1e12)
    assert build_plan(huge).task("forever").priority == 2**31 - 1  # clamped to Airflow's int32 column


def test_gpu_hours_and_requests() -> None:
    plan = build_plan(_diamond())
    assert plan.task("train").gpu_hours == pytest.approx(8.0)
    assert plan.task("eval").gpu_hours == pytest.approx(0.5)
    assert plan.task("load").gpus == 0 and plan.task("load").gpu == "-"
    assert plan.total_gpu_hours == pytest.approx(8.5)
    assert plan.task("train").gpu == "4x GPU"


def test_task_in_gpu_pool_without_request_counts_its_slots() -> None:
    graph = TaskGraph("pooled")
    graph.add_task(TaskNode("t", duration=3600, pool="gpu_a100", pool_slots=2))
    graph.add_task(TaskNode("cpu", duration=3600, pool="default_pool", pool_slots=3))
    graph.add_task(TaskNode("g", duration=1800, gpu=GpuRequest(8, 81920, "h100"), pool="gpu_h100"))
    plan = build_plan(graph)
    assert plan.task("t").gpus == 2
    assert plan.task("cpu").gpus == 0
    assert plan.task("g").gpu == "8x h100 (80GiB each)"
    assert plan.total_gpu_hours == pytest.approx(2 + 4)


def test_layers_follow_longest_upstream_chain() -> None:
    graph = _diamond()
    graph.add("late", 60)
    graph.add_edge("load", "late")
    graph.add_edge("eval", "late")
    plan = build_plan(graph)
    assert {t.task_id: t.layer for t in plan.tasks} == {
        "load": 0,
        "train": 1,
        "stats": 1,
        "eval": 2,
        "late": 3,
    }
    assert plan.layers == 4
    assert plan.task("eval").upstream == ("train", "stats")


def test_cycle_is_refused_with_its_tasks() -> None:
    graph = TaskGraph("loop")
    graph.add("a", 1)
    graph.add("b", 1)
    graph.add_edge("a", "b")
    graph.add_edge("b", "a")
    with pytest.raises(CycleError, match="a -> b -> a"):
        build_plan(graph)


def test_unknown_task_names_the_dag() -> None:
    with pytest.raises(KeyError, match="'diamond' has no task 'nope'"):
        build_plan(_diamond()).task("nope")


def test_to_dict_is_json() -> None:
    data = json.loads(json.dumps(build_plan(_diamond()).to_dict()))
    assert data["dag_id"] == "diamond"
    assert data["critical_path"] == ["load", "train", "eval"]
    assert [t["task_id"] for t in data["tasks"]] == ["load", "train", "stats", "eval"]
    assert ["load", "train"] in data["edges"]
    assert data["tasks"][3]["upstream"] == ["train", "stats"]


def test_empty_graph() -> None:
    plan = build_plan(TaskGraph("empty"))
    assert plan.tasks == [] and plan.makespan == 0 and plan.critical_path == [] and plan.layers == 0


def test_plan_of_an_airflow_dag_reads_hints_and_keeps_findings() -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag import gpu_hints

    with DAG("sdk_dag", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        load = EmptyOperator(task_id="load", executor_config=gpu_hints(duration="20m"))
        train = EmptyOperator(
            task_id="train",
            pool="gpu_default",
            pool_slots=2,
            executor_config=gpu_hints(duration="1h", gpus=2),
        )
        broken = EmptyOperator(task_id="broken", executor_config={"gpu_dag": {"duration_s": "soon"}})
        load >> train >> broken
    plan = plan_dag(dag, default_duration=600)
    assert plan.makespan == 1200 + 3600 + 600
    assert plan.task("train").gpus == 2 and plan.task("train").pool == "gpu_default"
    assert plan.task("broken").duration_declared is False
    assert [(f.code, f.task_id) for f in plan.findings] == [("bad-estimate", "broken")]
