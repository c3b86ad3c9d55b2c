"""Tests of ``airflow_gpu_dag.airflow.dag_reader``: Airflow DAGs read into task graphs, with the GPU
declaration checks they go through (no Airflow services)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Label, TaskGroup, task

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph, plan_dag, rule_uses
from airflow_gpu_dag.authoring import start_window
from airflow_gpu_dag.core.model.mapping import expanded_id, task_of
from airflow_gpu_dag.core.planning.plan import build_plan
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from tests.unit.airflow.conftest import one_task_dag, sweep_dag
from tests.unit.airflow_dags import serialized as _serialized


def _op(task_id: str, **hints: Any) -> EmptyOperator:
    return EmptyOperator(task_id=task_id, executor_config=gpu_hints(duration="10m", **hints))


def _rung_hints(start_within: object) -> dict[str, Any]:
    fallback = {
        "ladder": "train",
        "rung": "big",
        "index": 0,
        "rungs": 2,
        "assumed_index": 1,  # the plan assumes the second rung: this one "fell back" (waits start_within)
        "assumed_rung": "small",
        "start_within_s": start_within,
        "watched": True,
    }
    return {"gpu_dag": {"duration_s": 3600.0, "fallback": fallback}}


def test_a_label_on_an_edge_leaving_an_unprefixed_task_group_becomes_the_edge_kind() -> None:
    # A group made with prefix_group_id=False leaves its tasks' ids bare, so the enclosing groups are
    # read from the DAG, not guessed from the task id ("g.b" -> "g"): the label Airflow keeps on
    # "g1.downstream_join_id" is found and the edge gets its kind (DAG and serialized DAG).
    with DAG("unprefixed", schedule=None) as dag:
        a = _op("a")
        with TaskGroup("g0"), TaskGroup("g1", prefix_group_id=False) as g1:
            _op("b")
        with TaskGroup("g2", prefix_group_id=False) as g2:
            _op("d")
        c = _op("c")
        a >> Label("data") >> g1 >> Label("control") >> c
        g1 >> Label("time") >> g2
    assert set(dag.task_dict) == {"a", "b", "c", "d"}
    for reader in (dag, _serialized(dag)):
        graph, _ = build_task_graph(reader)
        assert graph.edge_kind("a", "b") == "data"
        assert graph.edge_kind("b", "c") == "control"
        assert graph.edge_kind("b", "d") == "time"


def test_labels_of_prefixed_groups_nested_three_deep_still_become_edge_kinds() -> None:
    with DAG("nested3", schedule=None) as dag:
        a = _op("a")
        with TaskGroup("x") as x, TaskGroup("y"), TaskGroup("z"):
            _op("b")
        c = _op("c")
        a >> Label("data") >> x >> Label("control") >> c
    for reader in (dag, _serialized(dag)):
        graph, _ = build_task_graph(reader)
        assert graph.edge_kind("a", "x.y.z.b") == "data"
        assert graph.edge_kind("x.y.z.b", "c") == "control"


@pytest.mark.parametrize("start_within", ["20m", math.nan, -5.0, math.inf, True, [1200]])
def test_a_malformed_start_within_hint_is_an_error_naming_the_task(start_within: object) -> None:
    # float(start_within_s) is no check: "20m" or a list would crash the whole graph read (policy,
    # page, weights) with a bare ValueError/TypeError, and NaN, a negative number, inf or True would be
    # planned silently as the rung's duration.
    with DAG("bad_rung", schedule=None) as dag:
        EmptyOperator(task_id="big", executor_config=_rung_hints(start_within))
    graph, findings = build_task_graph(dag)
    node = graph.nodes["big"]
    assert node.duration == 0.0
    fallback: Any = node.attrs["fallback"]
    assert fallback["start_within_s"] is None  # (the ladder code does float() on it)
    assert [(f.code, f.dag_id, f.task_id) for f in findings] == [("bad-hint", "bad_rung", "big")]
    assert "start_within_s" in findings[0].message and "fallback_ladder" in findings[0].fix
    assert plan_dag(dag).makespan == 0.0


def test_a_valid_start_within_hint_is_planned_as_the_wait() -> None:
    with DAG("good_rung", schedule=None) as dag:
        EmptyOperator(task_id="big", executor_config=_rung_hints(1200))
    graph, findings = build_task_graph(dag)
    assert graph.nodes["big"].duration == 1200.0 and findings == []
    fallback: Any = graph.nodes["big"].attrs["fallback"]
    assert fallback["start_within_s"] == 1200.0


def test_bad_gpu_hints_get_the_fix_for_the_wrong_hint() -> None:
    with DAG("bad_hint_type", schedule=None) as dag:
        EmptyOperator(task_id="t", executor_config=gpu_hints(gpus=1, gpu_type=["a100", "h100"]))  # type: ignore[arg-type]
        EmptyOperator(task_id="m", executor_config=gpu_hints(gpus=1, gpu_memory="eighty"))
        EmptyOperator(task_id="n", executor_config=gpu_hints(gpus=0))
    _, findings = build_task_graph(dag)
    fixes = {f.task_id: f.fix for f in findings if f.code == "bad-gpu-request"}
    assert "gpu_type=" in fixes["t"] and "gpus=" not in fixes["t"]
    assert "gpu_memory=" in fixes["m"]
    assert "gpus=" in fixes["n"]


@pytest.mark.parametrize("serialize", [False, True])
def test_build_task_graph_expands_mapped_tasks(serialize: bool) -> None:
    dag = sweep_dag()
    dag = _serialized(dag) if serialize else dag
    flat, _ = build_task_graph(dag)
    assert "trial" in flat.nodes and "trial[0]" not in flat.nodes  # off by default
    graph, findings = build_task_graph(dag, expand_mapped=True)
    assert findings == []
    trials = [expanded_id("trial", i) for i in range(6)]
    assert all(t in graph.nodes for t in trials) and "trial" not in graph.nodes
    node = graph.nodes["trial[4]"]
    assert node.attrs["map_of"] == "trial" and node.attrs["map_index"] == 4
    assert node.attrs["map_source"] == "expand" and node.gpus == 1 and node.duration == 3600
    assert task_of(graph, "trial[4]") == "trial"
    for t in trials:  # fan-out from prep, fan-in to select
        assert graph.upstream(t) == ["prep"] and graph.downstream(t) == ["select"]
    assert sorted(graph.upstream("select")) == sorted(trials)
    assert [f"evaluate[{i}]" for i in range(4)] == [t for t in graph.nodes if t.startswith("evaluate")]
    assert graph.nodes["unknown"].attrs["mapped"] is True and "map_of" not in graph.nodes["unknown"].attrs
    plan = build_plan(graph)
    assert plan.total_gpu_hours == pytest.approx(6.0)  # six 1-GPU trials of an hour


def test_bad_map_length_hint_is_an_error_naming_the_task() -> None:
    with DAG("bad_hint", schedule=None) as dag:
        BashOperator(task_id="plain", bash_command="true", executor_config=gpu_hints(map_length=3))

        @task(executor_config=gpu_hints(map_length="many"))
        def each(x: int) -> int:
            return x

        each.expand(x=[1])
    _, findings = build_task_graph(dag)
    assert {(f.code, f.task_id) for f in findings} == {
        ("bad-map-length", "plain"),
        ("bad-map-length", "each"),
    }
    assert "not a mapped task" in next(f.message for f in findings if f.task_id == "plain")


def test_map_length_above_airflows_max_map_length_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Airflow fails the upstream task that pushes more than [core] max_map_length values: such a
    # task could never expand, and planning 100,000 instances would only stall the command.
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "8")

    def dag_with(length: int) -> DAG:
        with DAG("long_map", schedule=None) as dag:

            @task(executor_config=gpu_hints(duration="1m"))
            def items() -> list[int]:
                return []

            @task(executor_config=gpu_hints(duration="10m", map_length=length))
            def each(x: int) -> int:
                return x

            each.expand(x=items())
        return dag

    graph, findings = build_task_graph(dag_with(8), expand_mapped=True)
    assert not findings and len([t for t in graph.nodes if t.startswith("each[")]) == 8
    graph, findings = build_task_graph(dag_with(9), expand_mapped=True)
    assert [(f.code, f.task_id) for f in findings] == [("bad-map-length", "each")]
    assert "[core] max_map_length (8)" in findings[0].message and "at most 8" in findings[0].fix
    assert "each" in graph.nodes and graph.nodes["each"].attrs.get("mapped")  # not expanded: one node


@pytest.mark.usefixtures("_fresh_strategies")
def test_found_a_single_path_string_is_one_path() -> None:
    """``inputs="/data/clean"`` written by hand (not through gpu_hints) is one path, not one per
    character (which made up hidden dependencies between unrelated tasks)."""
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph

    graph, findings = build_task_graph(one_task_dag({"duration_s": 60, "inputs": "/data/clean"}))
    assert findings == []
    assert graph.nodes["train"].inputs == ("/data/clean",)


def _at(hour: int, minute: int = 0, day: int = 10) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def test_plan_of_a_dag_with_a_start_window() -> None:
    with DAG("pw", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep", executor_config={"gpu_dag": {"duration_s": 600}})
        train = GpuBashOperator(task_id="train", bash_command="true", gpus=1, duration="1h")
        prep >> train
        start_window(train, opens="22:00", closes="06:00")
    graph, _ = build_task_graph(dag, run_start=_at(9))
    assert graph.nodes["train"].not_before == 13 * 3600
    assert graph.nodes["train__window"].not_before == 13 * 3600
    plan = plan_dag(dag, run_start=_at(9))
    assert plan.task("train").earliest_start == 13 * 3600
    assert plan.makespan == 14 * 3600
    assert plan.task("train").not_before == 13 * 3600
    assert "start window opens at +13h00m" in plan.task("train").note
    inside = plan_dag(dag, run_start=_at(23))
    assert inside.task("train").earliest_start == 600  # inside the window: right after prep


# -- durations of tasks that declare none: teardowns, the DAG's default --------------------------------------
def _train_then_teardown(default_args: dict[str, Any] | None = None) -> Any:
    with DAG("defaults", schedule=None, default_args=default_args or {}) as dag:
        prepare = EmptyOperator(task_id="prepare")
        train = EmptyOperator(task_id="train", executor_config=gpu_hints(gpus=1, duration="1h"))
        release = EmptyOperator(task_id="release").as_teardown()
        prepare >> train >> release
    return dag


@pytest.mark.parametrize("serialized", [False, True])
def test_a_teardown_without_an_estimate_is_not_on_the_critical_path(serialized: bool) -> None:
    """A teardown without an estimate takes no time in the plan: [gpu_dag] default_duration (30 min)
    would lengthen the remaining critical path of every task before it."""
    dag = _train_then_teardown()
    graph, findings = build_task_graph(_serialized(dag) if serialized else dag, default_duration=1800.0)
    release = graph.nodes["release"]
    assert (release.duration, release.duration_declared, release.attrs["duration_default"]) == (
        0.0,
        False,
        "teardown",
    )
    assert graph.nodes["prepare"].attrs["duration_default"] == "deployment"
    assert graph.nodes["prepare"].duration == 1800.0 and findings == []
    assert plan_dag(dag, default_duration=1800.0).makespan == 1800.0 + 3600.0


@pytest.mark.parametrize("serialized", [False, True])
def test_the_dags_default_duration_is_what_its_tasks_without_an_estimate_take(serialized: bool) -> None:
    dag = _train_then_teardown({"gpu_dag_default_duration": "20m"})
    graph, findings = build_task_graph(_serialized(dag) if serialized else dag, default_duration=1800.0)
    prepare = graph.nodes["prepare"]
    assert (prepare.duration, prepare.duration_declared, prepare.attrs["duration_default"]) == (
        1200.0,
        False,
        "dag",
    )
    assert graph.nodes["train"].duration == 3600.0  # its own estimate first
    assert graph.nodes["release"].duration == 0.0  # a teardown's default is its own
    assert findings == []


def test_a_malformed_dag_default_duration_is_an_error_and_the_deployment_default_applies() -> None:
    dag = _train_then_teardown({"gpu_dag_default_duration": "twenty minutes"})
    graph, findings = build_task_graph(dag, default_duration=1800.0)
    (bad,) = findings
    assert (bad.code, bad.severity, bad.dag_id, bad.task_id) == (
        "bad-default-duration",
        "error",
        "defaults",
        None,
    )
    assert "gpu_dag_default_duration" in bad.message and "'20m'" in bad.fix
    assert graph.nodes["prepare"].duration == 1800.0


def test_rule_uses_reads_each_pools_weight_rules_from_sdk_and_serialized_dags() -> None:
    with DAG("rules", schedule=None) as dag:
        EmptyOperator(
            task_id="keyed",
            pool="gpu_default",
            weight_rule=CRITICAL_PATH_WEIGHT_RULE,
            executor_config=gpu_hints(gpus=1),
        )
        EmptyOperator(task_id="stock", pool="gpu_default", pool_slots=2)
        EmptyOperator(task_id="up", weight_rule="upstream")
    for read in (dag, _serialized(dag)):
        found = {(u.pool, u.rule.rsplit(".", 1)[-1], u.cross_dag, u.gpu) for u in rule_uses(read)}
        assert found == {
            ("gpu_default", "CriticalPathPriorityStrategy", True, True),
            ("gpu_default", "downstream", False, False),
            ("default_pool", "upstream", False, False),
        }
