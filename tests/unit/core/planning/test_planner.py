"""Tests of ``airflow_gpu_dag.core.planning.planner``."""

from __future__ import annotations

import weakref
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.analysis.estimates import planning_error
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.planner import (
    SEARCH_BUDGET,
    packing_weights_plan,
    planned_remaining,
    predict,
)
from airflow_gpu_dag.core.simulation.simulator import simulate
from tests.unit.graphs import (
    draw_task_graph,
    gpu_graph,
)

DIAMOND = gpu_graph(
    {"a": (10, 1), "b": (5, 8), "c": (20, 1), "d": (1, 1), "e": (3, 1)},
    [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
)


@st.composite
def random_dags(draw: st.DrawFn) -> TaskGraph:
    return draw_task_graph(draw, "random", (1, 18), [0, 1, 1, 2, 4, 8], 40)


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


@pytest.mark.parametrize(("budget", "rounds"), [(0, 4), (10_000, 4), (15, 3), (10, 2), (1, 2)])
def test_justification_rounds_follow_the_budget_in_placed_tasks(
    budget: int, rounds: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A justification of steps 2 and 4 runs at most ``justify_budget // tasks`` rounds, never fewer
    than 2 nor more than ``justify_rounds`` (budget 0: no budget); the serial samples' own two rounds
    stay."""
    from airflow_gpu_dag.core.planning import planner

    seen: list[int] = []
    real = planner.justify

    def recording(*args: object, max_rounds: int = 4, **kwargs: object) -> object:
        seen.append(max_rounds)
        return real(*args, max_rounds=max_rounds, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planner, "justify", recording)
    monkeypatch.setattr(planner, "_STAGE_CACHE", weakref.WeakKeyDictionary())  # steps 1-2 run again
    assert len(DIAMOND) == 5
    packing_weights_plan(DIAMOND, {"gpu": 8}, "reservation", serial_budget=0, justify_budget=budget)
    assert seen and set(seen) == {rounds}
    seen.clear()
    packing_weights_plan(DIAMOND, {"gpu": 8}, "critical_path", justify_budget=budget)
    assert rounds in seen and set(seen) <= {rounds, 2}  # the serial samples justify twice


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


H = 3600.0


# -- 3. planned remaining times of a DAG with nothing to plan against ----------------------------------------
def test_planned_remaining_without_a_capacity_pool_is_the_critical_path() -> None:
    """The DAG's GPUs are in pool ``gpu_h100``; ``[gpu_dag] pools`` sizes only ``gpu_a100``. With no
    capacity to plan against, the remaining times are the critical path's: a plan on unlimited pools
    would start both chains at 0 and give the 1-minute task the remaining time of the 1-hour chain
    (60 min) and the same key as its head."""
    graph = TaskGraph("h100_only")
    graph.add("long", H, 4, pool="gpu_h100")
    graph.add("after", H, 4, pool="gpu_h100")
    graph.add("short", 60.0, 1, pool="gpu_h100")
    graph.add_edge("long", "after")
    remaining = planned_remaining(graph, {"gpu_a100": 8})
    assert remaining == {t: timing.remaining for t, timing in analyze(graph).timings.items()}
    assert remaining["short"] == pytest.approx(60.0)  # not the chain's 7200
    assert planned_remaining(TaskGraph("empty"), {"gpu_a100": 8}) == {}


def test_planned_remaining_still_plans_a_dag_in_a_capacity_pool() -> None:
    graph = TaskGraph("h100")
    graph.add("long", H, 4, pool="gpu_h100")
    graph.add("short", 60.0, 1, pool="gpu_h100")
    remaining = planned_remaining(graph, {"gpu_h100": 4})
    assert remaining == {"long": pytest.approx(H + 60.0), "short": pytest.approx(60.0)}
