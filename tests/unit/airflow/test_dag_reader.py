"""Tests of ``airflow_gpu_dag.airflow.dag_reader``: Airflow DAGs read into task graphs, with the GPU
declaration checks they go through (no Airflow services)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Label, TaskGroup, task

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow.dag_reader import (
    _edge_kind,
    _group_ids,
    build_task_graph,
    dag_default_duration,
    plan_dag,
    priority_rule_of,
    rule_name,
    rule_uses,
    windows_from,
)
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


# -- the weight rule a DAG's tasks use -------------------------------------------------------------------
def test_the_priority_rule_is_the_one_most_tasks_use_and_a_tie_goes_to_the_providers() -> None:
    with DAG("mostly_packing", schedule=None) as dag:
        for i in range(2):
            EmptyOperator(task_id=f"p{i}", weight_rule=PACKING_WEIGHT_RULE)
        EmptyOperator(task_id="c", weight_rule=CRITICAL_PATH_WEIGHT_RULE)
        EmptyOperator(task_id="stock")
    assert priority_rule_of(dag) == priority_rule_of(_serialized(dag)) == "packing"
    with DAG("tie", schedule=None) as tie:
        EmptyOperator(task_id="c", weight_rule=CRITICAL_PATH_WEIGHT_RULE)
        EmptyOperator(task_id="stock")
    assert priority_rule_of(tie) == priority_rule_of(_serialized(tie)) == "critical_path"
    with DAG("stock_only", schedule=None) as stock:
        EmptyOperator(task_id="a", weight_rule="upstream")
    assert priority_rule_of(stock) is None and priority_rule_of(_serialized(stock)) is None


def test_a_dag_without_tasks_is_an_empty_graph_and_an_empty_plan() -> None:
    with DAG("nothing", schedule=None) as dag:
        pass
    graph, findings = build_task_graph(dag)
    assert (graph.nodes, findings, graph.priority_rule) == ({}, [], None)
    assert plan_dag(dag).makespan == 0.0


def test_rule_name_reads_airflows_rules_in_each_form() -> None:
    from airflow.task.priority_strategy import (
        _AbsolutePriorityWeightStrategy,
        _DownstreamPriorityWeightStrategy,
        _UpstreamPriorityWeightStrategy,
    )
    from airflow.task.weight_rule import WeightRule

    assert rule_name(None) == "downstream"  # Airflow's default
    assert [rule_name(w) for w in (WeightRule.UPSTREAM, WeightRule.ABSOLUTE)] == ["upstream", "absolute"]
    strategies = (
        _DownstreamPriorityWeightStrategy,
        _UpstreamPriorityWeightStrategy,
        _AbsolutePriorityWeightStrategy,
    )
    assert [rule_name(s()) for s in strategies] == ["downstream", "upstream", "absolute"]
    assert rule_name(CRITICAL_PATH_WEIGHT_RULE) == CRITICAL_PATH_WEIGHT_RULE

    class MyStrategy:
        pass

    assert rule_name(MyStrategy()) == "MyStrategy"


# -- the DAG's default duration ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (math.nan, "not finite"),
        (math.inf, "not finite"),
        (-1, "negative"),
        (True, "boolean"),
        ([1200], "has type list"),
        ("", "empty"),
        ("\uff11h", "write '1h'"),  # a full-width digit
        ("1000d", "longer than any task runs"),
    ],
)
def test_a_dag_default_duration_that_is_no_duration_is_an_error_naming_the_dag_and_the_fix(
    value: object, fragment: str
) -> None:
    with DAG("bad_default", schedule=None, default_args={"gpu_dag_default_duration": value}) as dag:
        EmptyOperator(task_id="a")
    seconds, finding = dag_default_duration(dag)
    assert seconds is None and finding is not None
    assert (finding.code, finding.dag_id, finding.task_id) == ("bad-default-duration", "bad_default", None)
    assert fragment in finding.message and "[gpu_dag] default_duration applies" in finding.fix
    graph, findings = build_task_graph(dag, default_duration=60.0)
    assert graph.nodes["a"].duration == 60.0 and graph.nodes["a"].attrs["duration_default"] == "deployment"
    assert findings == [finding]


def test_a_dag_default_duration_of_none_or_no_default_args_is_no_default() -> None:
    with DAG("unset", schedule=None, default_args={"gpu_dag_default_duration": None}) as dag:
        EmptyOperator(task_id="a")
    assert dag_default_duration(dag) == (None, None)
    assert dag_default_duration(SimpleNamespace(dag_id="fake", default_args=None)) == (None, None)
    with DAG("zero", schedule=None, default_args={"gpu_dag_default_duration": " 0 "}) as zero:
        EmptyOperator(task_id="a")
    graph, findings = build_task_graph(zero, default_duration=60.0)
    assert (graph.nodes["a"].duration, graph.nodes["a"].attrs["duration_default"], findings) == (
        0.0,
        "dag",
        [],
    )


# -- what a task's node says --------------------------------------------------------------------------------
def test_a_node_carries_the_pool_slots_and_retries_of_its_task() -> None:
    with DAG("attrs", schedule=None) as dag:
        EmptyOperator(
            task_id="t",
            pool="gpu_a100",
            pool_slots=2,
            retries=3,
            executor_config=gpu_hints(gpus=2, gpu_type="a100", duration="1h"),
        )
    for read in (dag, _serialized(dag)):
        graph, findings = build_task_graph(read)
        node = graph.nodes["t"]
        assert (node.pool, node.pool_slots, node.retries, node.gpus, node.duration) == (
            "gpu_a100",
            2,
            3,
            2,
            3600,
        )
        assert node.duration_declared and findings == []


def test_pool_slots_that_contradict_the_gpus_are_an_error_naming_the_task_pool_and_fix() -> None:
    with DAG("slots", schedule=None) as dag:
        EmptyOperator(task_id="t", pool="gpu_a100", pool_slots=1, executor_config=gpu_hints(gpus=4))
        EmptyOperator(task_id="in_default", pool_slots=1, executor_config=gpu_hints(gpus=4))
    _, findings = build_task_graph(dag)
    (mismatch,) = [f for f in findings if f.code == "pool-slots-mismatch"]
    assert (mismatch.dag_id, mismatch.task_id) == ("slots", "t")
    assert "requests 4 GPUs but takes 1 slots of pool 'gpu_a100'" in mismatch.message
    assert mismatch.fix.startswith("set pool_slots=4")


@pytest.mark.parametrize(
    ("config", "code", "fragment"),
    [
        ({"gpu_dag": "junk"}, "bad-hint", "must be a dict of hints"),
        ({"gpu_dag": {"duration_s": math.nan}}, "bad-estimate", "not finite"),
        ({"gpu_dag": {"duration_s": -5}}, "bad-estimate", "negative"),
        ({"gpu_dag": {"gpus": "\uff12"}}, "bad-gpu-request", "write '2'"),  # a full-width 2
        ({"gpu_dag": {"duration_s": 60, "window": "22-06"}}, "bad-hint", "start window hint must be a dict"),
        (
            {"gpu_dag": {"duration_s": 60, "window": {"opens": "25:00", "closes": "06:00"}}},
            "bad-hint",
            "no window",
        ),
    ],
)
def test_a_malformed_hint_is_an_error_naming_the_task_and_planning_goes_on_with_the_default(
    config: dict[str, Any], code: str, fragment: str
) -> None:
    with DAG("hints", schedule=None) as dag:
        EmptyOperator(task_id="t", executor_config=config)
        EmptyOperator(task_id="ok", executor_config=gpu_hints(duration="10m"))
    graph, findings = build_task_graph(dag, default_duration=60.0, run_start=_at(9))
    assert [(f.code, f.dag_id, f.task_id) for f in findings] == [(code, "hints", "t")]
    assert fragment in findings[0].message and findings[0].fix
    node = graph.nodes["t"]
    assert node.duration in (60.0, 60) and node.gpu is None and node.not_before == 0.0
    assert plan_dag(dag, default_duration=60.0, run_start=_at(9)).findings == findings


# -- fallback rungs -----------------------------------------------------------------------------------------
def _rung(index: int, assumed_index: int, assumed_rung: str | None = "small") -> dict[str, Any]:
    fallback = {
        "ladder": "train",
        "rung": f"r{index}",
        "index": index,
        "rungs": 3,
        "assumed_index": assumed_index,
        "assumed_rung": assumed_rung,
        "start_within_s": 600,
        "watched": False,
    }
    return {"gpu_dag": {"duration_s": 3600.0, "fallback": fallback}}


def test_the_assumed_rung_counts_its_estimate_and_a_later_rung_counts_nothing() -> None:
    with DAG("ladder", schedule=None) as dag:
        EmptyOperator(task_id="first", executor_config=_rung(0, 0, None))
        EmptyOperator(task_id="later", executor_config=_rung(1, 0, None))
    graph, findings = build_task_graph(dag)
    assert findings == []
    first, later = graph.nodes["first"], graph.nodes["later"]
    assert first.duration == 3600.0 and "contingent_duration" not in first.attrs
    assert later.duration == 0.0 and later.attrs["contingent_duration"] == 3600.0
    first_info: Any = first.attrs["fallback"]
    later_info: Any = later.attrs["fallback"]
    assert (first_info["role"], first_info["assumed_rung"]) == ("assumed", "r0")  # the first rung: itself
    assert (later_info["role"], later_info["assumed_rung"], later_info["expected_duration"]) == (
        "contingent",
        None,
        3600.0,
    )


# -- start windows ------------------------------------------------------------------------------------------
_NIGHT = {"opens": "22:00:00", "closes": "06:00:00", "tz": "UTC", "on_missed": "skip"}


def test_every_instance_of_a_mapped_task_with_a_window_waits_for_it_and_windows_from_moves_them() -> None:
    with DAG("mapped_window", schedule=None) as dag:

        @task(executor_config={"gpu_dag": {"duration_s": 60, "window": _NIGHT}})
        def each(x: int) -> int:
            return x

        each.expand(x=[1, 2, 3])
    graph, findings = build_task_graph(dag, run_start=_at(9), expand_mapped=True)
    assert findings == []
    assert {t: n.not_before for t, n in graph.nodes.items()} == {f"each[{i}]": 13 * 3600.0 for i in range(3)}
    inside = windows_from(dag, graph, _at(23))
    assert {n.not_before for n in inside.nodes.values()} == {0.0}
    assert {n.not_before for n in graph.nodes.values()} == {13 * 3600.0}  # the input is never changed


def test_windows_from_gives_the_same_graph_when_no_task_has_a_window() -> None:
    with DAG("no_window", schedule=None) as dag:
        _op("a") >> _op("b")
    graph, _ = build_task_graph(dag)
    assert windows_from(dag, graph, _at(23)) is graph


# -- task groups whose proxy is gone ----------------------------------------------------------------------
def test_a_task_group_that_is_gone_falls_back_to_the_prefixes_of_the_task_id() -> None:
    class Gone:
        @property
        def group_id(self) -> str:
            raise ReferenceError("weakly-referenced object no longer exists")

    dag = SimpleNamespace(
        task_dict={"a.b.c": SimpleNamespace(task_group=Gone())},
        edge_info={"a.b.downstream_join_id": {"d": {"label": "data"}}},
    )
    assert _group_ids(dag, "a.b.c") == ["a.b", "a"]
    assert _edge_kind(dag, "a.b.c", "d") == "data"
    assert _edge_kind(dag, "d", "a.b.c") is None
