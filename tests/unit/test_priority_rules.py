"""Priority rules (downstream, critical path, width-aware, work), the packing planner, justification,
and the PackingPriorityStrategy wrapper."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.estimates import planning_error
from airflow_gpu_dag.core.analysis.weight_rules import (
    critical_path_weights,
    downstream_weights,
    plan_order_weights,
    resolve_priority,
    width_aware_weights,
    work_weights,
)
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.justification import (
    UsageProfile,
    justify,
    ordered_schedule,
    priority_serial_schedule,
    serial_schedule,
)
from airflow_gpu_dag.core.planning.planner import SEARCH_BUDGET, packing_weights_plan, predict
from airflow_gpu_dag.core.simulation.simulator import simulate
from tests.unit.graphs import draw_task_graph, gpu_graph

DIAMOND = gpu_graph(
    {"a": (10, 1), "b": (5, 8), "c": (20, 1), "d": (1, 1), "e": (3, 1)},
    [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
)


def test_downstream_is_airflows_rule() -> None:
    assert downstream_weights(DIAMOND) == {"a": 4, "b": 2, "c": 2, "d": 1, "e": 1}


def test_critical_path_weights_are_remaining_seconds() -> None:
    assert critical_path_weights(DIAMOND) == {"a": 31, "b": 6, "c": 21, "d": 1, "e": 3}


def test_width_aware_charges_a_drain_to_wide_tasks_only() -> None:
    w = width_aware_weights(DIAMOND, {"gpu": 8})
    # slot-weighted mean duration of the pool: (10+40+20+1+3)/(1+8+1+1+1) = 74/12; b pays it in full
    mean = 74 / 12
    assert w["b"] == round((5 + mean + 1) * 10)
    assert w["c"] == 210 and w["d"] == 10 and w["e"] == 30
    # with only 1-slot tasks it orders exactly like the critical path
    narrow = gpu_graph({"x": (3, 1), "y": (7, 1), "z": (2, 1)}, [("x", "z")])
    cp = critical_path_weights(narrow)
    wa = width_aware_weights(narrow, {"gpu": 4})
    assert sorted(narrow.nodes, key=cp.__getitem__) == sorted(narrow.nodes, key=wa.__getitem__)


def test_work_weights_count_what_a_task_unlocks() -> None:
    w = work_weights(DIAMOND, {"gpu": 8})
    # a unlocks everything but e: (10 + 40 + 20 + 1) / 8 = 8.875 s
    assert w["a"] == round(71 / 8 * 10)
    assert w["e"] == round(3 / 8 * 10)


def test_resolve_priority_errors() -> None:
    with pytest.raises(ValueError, match="needs the pool capacities"):
        resolve_priority("width_aware")
    with pytest.raises(ValueError, match="unknown priority rule 'x'"):
        resolve_priority("x")


def test_plan_order_weights_follow_the_plan() -> None:
    w = plan_order_weights(DIAMOND, {"a": 0, "e": 0, "c": 10, "b": 30, "d": 35})
    assert w == {"a": 5, "e": 4, "c": 3, "b": 2, "d": 1}


def test_usage_profile_earliest_and_add() -> None:
    p = UsageProfile(8)
    p.add(0, 10, 6)
    p.add(5, 20, 2)
    # in use: 6 on [0, 5), 8 on [5, 10), 2 on [10, 20), 0 after
    assert p.earliest(0, 5, 2) == 0
    assert p.earliest(0, 6, 2) == 10
    assert p.earliest(0, 5, 6) == 10
    assert p.earliest(12, 100, 8) == 20
    assert p.earliest(0, 0, 8) == 0  # zero length fits anywhere
    with pytest.raises(ValueError, match="never fit"):
        p.earliest(0, 1, 9)


def _feasible(graph: TaskGraph, cap: int, start: dict[str, float]) -> None:
    for up, down, _ in graph.edges():
        assert start[down] >= start[up] + graph.nodes[up].duration - 1e-9
    moments = sorted(set(start.values()))
    for m in moments:
        held = sum(
            graph.nodes[t].gpus
            for t in graph.nodes
            if graph.nodes[t].pool == "gpu" and start[t] <= m < start[t] + graph.nodes[t].duration
        )
        assert held <= cap


@st.composite
def random_dags(draw: st.DrawFn) -> TaskGraph:
    return draw_task_graph(draw, "random", (1, 18), [0, 1, 1, 2, 4, 8], 40)


@settings(max_examples=120, deadline=None)
@given(random_dags(), st.sampled_from([8, 10]))
def test_justification_never_lengthens_and_stays_feasible(graph: TaskGraph, cap: int) -> None:
    greedy = simulate(graph, {"gpu": cap}, "stock")
    start = {t.task_id: t.start for t in greedy.schedule}
    improved, makespan = justify(graph, {"gpu": cap}, start)
    assert makespan <= greedy.makespan + 1e-9
    assert makespan == max((improved[t] + graph.nodes[t].duration for t in improved), default=0.0)
    _feasible(graph, cap, improved)
    serial = serial_schedule(graph, {"gpu": cap}, graph.topological_order())
    _feasible(graph, cap, serial)
    by_rule = priority_serial_schedule(graph, {"gpu": cap}, critical_path_weights(graph))
    _feasible(graph, cap, by_rule)
    ordered = ordered_schedule(graph, {"gpu": cap}, graph.topological_order())
    _feasible(graph, cap, ordered)


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.sampled_from([8, 12]), st.sampled_from(["critical_path", "reservation"]))
def test_packing_plan_is_never_worse_than_its_candidates(graph: TaskGraph, cap: int, policy: str) -> None:
    caps = {"gpu": cap}
    plan = packing_weights_plan(graph, caps, policy)
    replay = simulate(graph, caps, policy, priority=lambda g: plan.weights)
    assert replay.makespan == plan.makespan  # the weights reproduce the predicted schedule
    for rule in ("critical_path", "width_aware", "work", "downstream"):
        assert plan.makespan <= simulate(graph, caps, policy, priority=rule).makespan + 1e-9
    if policy == "critical_path":  # greedy admission: never worse than stock Airflow
        assert plan.makespan <= simulate(graph, caps, "stock").makespan + 1e-9


@settings(max_examples=40, deadline=None)
@given(random_dags(), st.sampled_from([8, 12]))
def test_refining_more_options_never_lengthens_the_plan(graph: TaskGraph, cap: int) -> None:
    caps = {"gpu": cap}
    # without the local search (step 5), which may climb differently from another start
    winner_only = packing_weights_plan(graph, caps, "reservation", refine_options=1, search_budget=0)
    default = packing_weights_plan(graph, caps, "reservation", search_budget=0)
    assert default.makespan <= winner_only.makespan + 1e-9
    replay = simulate(graph, caps, "reservation", priority=lambda g: default.weights)
    assert replay.makespan == default.makespan
    simulated = [m for label, m in default.tried.items() if not label.endswith("(greedy)")]
    assert default.makespan == min(simulated)  # the shortest option simulated under the policy wins


@settings(max_examples=40, deadline=None)
@given(random_dags(), st.sampled_from([8, 12]), st.sampled_from(["critical_path", "reservation"]))
def test_local_search_never_lengthens_the_plan(graph: TaskGraph, cap: int, policy: str) -> None:
    caps = {"gpu": cap}
    plain = packing_weights_plan(graph, caps, policy)  # the search is off by default
    searched = packing_weights_plan(graph, caps, policy, search_budget=SEARCH_BUDGET)
    assert searched.makespan <= plain.makespan
    assert ("+search" in searched.rule) == (searched.makespan < plain.makespan)
    replay = simulate(graph, caps, policy, priority=lambda g: searched.weights)
    assert replay.makespan == searched.makespan  # the searched weights reproduce the prediction
    if "+search" in searched.rule:  # a searched plan is a strict order: ranks 1..n
        assert sorted(searched.weights.values()) == list(range(1, len(graph) + 1))


def test_local_search_packs_independent_rigid_tasks() -> None:
    """Seven independent shards (BLAST-like) of 1-2 GPUs on 4 GPUs: every rule, justified and sampled
    plan ends at 80 s; moving single tasks in the order finds the packing that ends at LB = 70 s."""
    tasks = {
        "t0": (10, 2), "t1": (40, 1), "t2": (60, 1), "t3": (50, 1),
        "t4": (20, 2), "t5": (40, 1), "t6": (30, 1),
    }  # fmt: skip
    graph = gpu_graph(tasks, [], dag_id="shards")
    caps = {"gpu": 4}
    plain = packing_weights_plan(graph, caps, "reservation")
    searched = packing_weights_plan(graph, caps, "reservation", search_budget=SEARCH_BUDGET)
    assert (plain.makespan, searched.makespan) == (80.0, 70.0) and "+search" in searched.rule
    assert searched.makespan <= simulate(graph, caps, "stock").makespan
    replay = simulate(graph, caps, "reservation", priority=lambda g: searched.weights)
    assert replay.makespan == searched.makespan
    again = packing_weights_plan(graph, caps, "reservation", search_budget=SEARCH_BUDGET)
    assert again.weights == searched.weights  # seeded: the same plan every time


def test_plain_critical_path_loses_to_packing_on_a_wide_short_task() -> None:
    """A 1-s 8-GPU task gates a long chain: critical path starts the long narrow tasks first and the
    wide one then waits for a full drain; the planner starts it while the pool is still empty."""
    tasks = {"split": (1, 1), "wide": (1, 8), "long_after_wide": (60, 1)}
    edges = [("split", "wide"), ("wide", "long_after_wide")]
    for i in range(8):
        tasks[f"prep{i}"] = (1, 1)
        tasks[f"map{i}"] = (58 + i, 1)
        edges += [("split", f"prep{i}"), (f"prep{i}", f"map{i}")]
    g = gpu_graph(tasks, edges)
    caps = {"gpu": 8}
    cp = simulate(g, caps, "critical_path", priority="critical_path")
    packed = predict(g, caps, "critical_path", priority="packing")
    assert packed.makespan < cp.makespan
    assert packed.makespan <= simulate(g, caps, "stock").makespan


def test_packing_strategy_never_raises_and_follows_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag import PACKING_WEIGHT_RULE, gpu_hints
    from airflow_gpu_dag import priority_strategy as ps
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core.planning.planner import planned_remaining
    from airflow_gpu_dag.core.policy.objective import key_of_weight

    assert PACKING_WEIGHT_RULE == "airflow_gpu_dag.priority_strategy.PackingPriorityStrategy"
    with DAG("packing_strategy_dag", schedule=None) as dag:
        a = EmptyOperator(task_id="a", pool="gpu", executor_config=gpu_hints(duration=10, gpus=1))
        b = EmptyOperator(task_id="b", pool="gpu", executor_config=gpu_hints(duration=100, gpus=8))
        c = EmptyOperator(task_id="c", pool="gpu", executor_config=gpu_hints(duration=5, gpus=1))
        a >> b
    del c
    strategy = ps.PackingPriorityStrategy()
    run_id = "manual__2026-11-30T12:00:00+00:00"

    def ti(task_id: str) -> Any:
        return SimpleNamespace(task=dag.task_dict[task_id], task_id=task_id, dag_id=dag.dag_id, run_id=run_id)

    def rest(task_id: str) -> float:  # the remaining time a weight encodes (trigger and work removed)
        key = key_of_weight(strategy.get_weight(ti(task_id)))
        assert key is not None
        return -key

    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 8}')
    ps.PackingPriorityStrategy._weights.reset()
    planned = planned_remaining(build_task_graph(dag)[0], {"gpu": 8})
    base = rest("a") - round(planned["a"])  # -(trigger + s * W): the same for every task of the run
    assert {t: rest(t) - round(planned[t]) for t in ("a", "b", "c")} == dict.fromkeys(("a", "b", "c"), base)
    assert strategy.get_weight(ti("a")) > strategy.get_weight(ti("b"))  # a gates the long wide task
    # a task wider than the configured pool: the planner refuses, critical-path remaining, no exception
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 4}')
    ps.PackingPriorityStrategy._weights.reset()
    assert rest("a") - rest("b") == 10  # remaining 110 vs 100: the critical path
    # no pool sizes configured: the critical path too
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS")
    ps.PackingPriorityStrategy._weights.reset()
    assert rest("a") - rest("c") == 105
    no_task: Any = SimpleNamespace(task=None, task_id="x")
    assert strategy.get_weight(no_task) == 1
    # anything else failing: the task's own priority_weight
    import airflow_gpu_dag.priority.basis as basis

    monkeypatch.setattr(basis, "build_task_graph", lambda dag: 1 / 0)
    ps.PackingPriorityStrategy._weights.reset()
    assert strategy.get_weight(ti("c")) == dag.task_dict["c"].priority_weight
    ps.PackingPriorityStrategy._weights.reset()


def test_packing_plan_scored_over_estimate_errors_is_deterministic() -> None:
    caps = {"gpu": 8}
    first = packing_weights_plan(DIAMOND, caps, "reservation", estimate_error=0.3, scenarios=2)
    again = packing_weights_plan(DIAMOND, caps, "reservation", estimate_error=0.3, scenarios=2)
    assert first.weights == again.weights and first.rule == again.rule
    assert set(first.weights) == set(DIAMOND.nodes)


def test_packing_plan_hedges_by_the_learned_durations_error() -> None:
    caps = {"gpu": 8}
    learned = TaskGraph(DIAMOND.dag_id)
    for node in DIAMOND.nodes.values():
        learned.add_task(replace(node, attrs={**node.attrs, "learned_error": 0.05}))
    for up, down, kind in DIAMOND.edges():
        learned.add_edge(up, down, kind)
    assert planning_error(learned) == pytest.approx(0.05)
    hedged = packing_weights_plan(learned, caps, "reservation")
    explicit = packing_weights_plan(learned, caps, "reservation", estimate_error=0.05)
    assert hedged.weights == explicit.weights and hedged.tried == explicit.tried
    # scored over worlds off by 5 %: the options' scores are means over them, not the exact makespans
    unhedged = packing_weights_plan(learned, caps, "reservation", estimate_error=0.0)
    assert hedged.tried != unhedged.tried
    # declared estimates (no learned_error): planned as before, on the estimates alone
    assert packing_weights_plan(DIAMOND, caps, "reservation").tried == (
        packing_weights_plan(DIAMOND, caps, "reservation", estimate_error=0.0).tried
    )


def test_simulator_controller_sees_estimates_not_actual_durations() -> None:
    """The controller sizes backfill from estimates. `long` (4 GPUs) really runs 10 s; the 8-GPU task
    turns ready at t=1 with four 20-s fillers. Believed exactly, nothing can backfill (the fillers would
    end after t=10) and `wide` starts at 10; believed to run 100 s, the fillers look safe, take the
    free slots, and `wide` starts only when they end at 21."""
    tasks = {"long": (10.0, 4), "prep": (1.0, 0), "wide": (5.0, 8)}
    edges = [("prep", "wide")]
    for i in range(4):
        tasks[f"fill{i}"] = (20.0, 1)
        edges.append(("prep", f"fill{i}"))
    g = gpu_graph(tasks, edges)

    def weights(graph: TaskGraph) -> dict[str, int]:
        return {t: 9 if t in ("long", "prep") else 8 if t == "wide" else 1 for t in graph.nodes}

    exact = simulate(g, {"gpu": 8}, "reservation", priority=weights)
    wrong = simulate(g, {"gpu": 8}, "reservation", priority=weights, estimates={"long": 100.0})
    assert exact.by_id()["wide"].start == 10.0
    assert wrong.by_id()["wide"].start == 21.0
    assert wrong.max_pool_usage["gpu"] <= 8 and exact.max_pool_usage["gpu"] <= 8


def test_packing_strategy_reads_the_search_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[gpu_dag] plan_search_budget`` reaches the planner; unset or malformed it stays 0 (off)."""
    import airflow_gpu_dag.settings as config

    seen: list[int] = []

    def fake_conf(key: str, fallback: str | None) -> str | None:
        return {"plan_search_budget": budget}.get(key, fallback)

    for budget, expected in (("60000", 60000), ("", 0), ("lots", 0), ("-5", 0)):
        monkeypatch.setattr(config, "conf_get", fake_conf)
        seen.append(config.plan_search_budget())
        assert seen[-1] == expected, budget
    monkeypatch.setattr(config, "conf_get", lambda key, fallback: fallback)
    assert config.plan_search_budget() == 0


def test_packing_strategy_reads_the_backfill_it_plans_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[gpu_dag] plan_backfill = strict`` makes the planner predict a strict-backfill controller."""
    import airflow_gpu_dag.settings as config

    for raw, expected in (("strict", True), (" Strict ", True), ("easy", False), ("", False)):
        monkeypatch.setattr(
            config, "conf_get", lambda key, fallback, raw=raw: raw if key == "plan_backfill" else fallback
        )
        assert config.plan_strict_backfill() is expected, raw
    monkeypatch.setattr(config, "conf_get", lambda key, fallback: fallback)
    assert config.plan_strict_backfill() is False
