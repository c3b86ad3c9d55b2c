"""Tests of ``airflow_gpu_dag.core.planning.planner``."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import FrozenInstanceError, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.analysis.estimates import planning_error
from airflow_gpu_dag.core.analysis.weight_rules import resolve_priority
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.justification import ordered_schedule, priority_serial_schedule
from airflow_gpu_dag.core.planning.planner import (
    SEARCH_BUDGET,
    PackingPlan,
    packing_rule,
    packing_weights_plan,
    planned_remaining,
    predict,
    resolve_rule,
    search_order,
)
from airflow_gpu_dag.core.simulation.simulator import CapacityError, simulate
from tests.unit.graphs import (
    draw_task_graph,
    gpu_graph,
    sized_and_unlimited_pools,
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


# -- 4. what every plan keeps -------------------------------------------------------------------------------
def _copy(graph: TaskGraph) -> TaskGraph:
    """An equal graph, another object (the planner caches its first steps per graph object)."""
    copy = TaskGraph(graph.dag_id, priority_rule=graph.priority_rule)
    for node in graph.nodes.values():
        copy.add_task(replace(node, attrs=dict(node.attrs)))
    for up, down, kind in graph.edges():
        copy.add_edge(up, down, kind)
    return copy


def _assert_feasible(graph: TaskGraph, capacity: dict[str, int], start: dict[str, float]) -> None:
    """Every task planned, after all its upstream tasks and not before its start window opens; no
    sized pool holds more slots than its capacity at any moment."""
    nodes = graph.nodes
    assert start.keys() == nodes.keys()
    for up, down, _ in graph.edges():
        assert start[down] >= start[up] + nodes[up].duration - 1e-9
    for task_id, begin in start.items():
        assert begin >= nodes[task_id].not_before
    for pool, cap in capacity.items():
        for moment in set(start.values()):
            held = sum(
                nodes[t].gpus
                for t in nodes
                if nodes[t].pool == pool and start[t] <= moment < start[t] + nodes[t].duration
            )
            assert held <= cap


@st.composite
def pooled_dags_with_windows(draw: st.DrawFn) -> TaskGraph:
    """Random DAGs on two sized pools (``a`` of 4, ``b`` of 5) and an unsized one (``c``), some tasks
    of 0 s, some with a start window opening at 5 or 20 s."""
    graph = draw_task_graph(
        draw, "windows", (1, 10), [0, 1, 2, 4], 20, lambda d, _count: d(st.sampled_from(["a", "b", "c"]))
    )
    for node in graph.nodes.values():
        node.not_before = float(draw(st.sampled_from([0, 0, 0, 5, 20])))
    return graph


@settings(max_examples=40, deadline=None)
@given(pooled_dags_with_windows(), st.sampled_from(["critical_path", "reservation"]), st.booleans())
def test_packing_plan_keeps_capacities_dependencies_and_start_windows(
    graph: TaskGraph, policy: str, strict: bool
) -> None:
    """Whatever the pools, start windows and backfill: the planned schedule is feasible, its makespan
    is the plan's, and the weights reproduce it."""
    caps = {"a": 4, "b": 5}
    plan = packing_weights_plan(graph, caps, policy, strict_backfill=strict)
    _assert_feasible(graph, caps, plan.schedule)
    assert plan.makespan == max(plan.schedule[t] + graph.nodes[t].duration for t in graph.nodes)
    assert plan.weights.keys() == graph.nodes.keys()
    replay = simulate(graph, caps, policy, priority=lambda g: plan.weights, strict_backfill=strict)
    assert replay.makespan == plan.makespan
    assert plan.tried[plan.rule] == plan.makespan


@settings(max_examples=30, deadline=None)
@given(random_dags(), st.sampled_from([8, 12]))
def test_strict_backfill_plan_is_never_worse_than_its_candidates(graph: TaskGraph, cap: int) -> None:
    """Planned for a controller that backfills only work ending before the reserved task can start,
    the plan is simulated with that controller and beats every candidate rule under it."""
    caps = {"gpu": cap}
    plan = packing_weights_plan(graph, caps, "reservation", strict_backfill=True)
    replay = simulate(graph, caps, "reservation", priority=lambda g: plan.weights, strict_backfill=True)
    assert replay.makespan == plan.makespan
    for rule in ("critical_path", "width_aware", "work", "downstream"):
        candidate = simulate(graph, caps, "reservation", priority=rule, strict_backfill=True)
        assert plan.makespan <= candidate.makespan


@settings(max_examples=15, deadline=None)
@given(random_dags(), st.sampled_from(["critical_path", "reservation"]), st.sampled_from([0, 2_000]))
def test_packing_plan_is_deterministic(graph: TaskGraph, policy: str, budget: int) -> None:
    """Two equal graphs (no cache shared) get the same plan: weights, rule, schedule and every score."""
    first = packing_weights_plan(graph, {"gpu": 8}, policy, search_budget=budget)
    again = packing_weights_plan(_copy(graph), {"gpu": 8}, policy, search_budget=budget)
    assert first == again
    assert list(first.tried) == list(again.tried)


@settings(max_examples=15, deadline=None)
@given(random_dags())
def test_a_larger_search_budget_never_lengthens_a_greedy_admission_plan(graph: TaskGraph) -> None:
    """With greedy admission every move is simulated from the same seed: a larger budget runs the
    moves of a smaller one and then more, and the shortest order seen wins."""
    caps = {"gpu": 8}
    small = packing_weights_plan(graph, caps, "critical_path", search_budget=len(graph) * 25)
    large = packing_weights_plan(graph, caps, "critical_path", search_budget=len(graph) * 200)
    assert large.makespan <= small.makespan


def test_empty_graph_is_planned_as_nothing_to_do() -> None:
    for policy in ("critical_path", "reservation"):
        plan = packing_weights_plan(TaskGraph("empty"), {"gpu": 8}, policy, search_budget=SEARCH_BUDGET)
        assert (plan.weights, plan.schedule, plan.makespan) == ({}, {}, 0.0)
        assert set(plan.tried.values()) == {0.0}


def test_single_task_starts_at_once_and_the_search_leaves_it_alone() -> None:
    graph = gpu_graph({"train": (10, 2)}, [], dag_id="single")
    for policy in ("critical_path", "reservation"):
        plan = packing_weights_plan(graph, {"gpu": 4}, policy, search_budget=SEARCH_BUDGET)
        assert (plan.schedule, plan.makespan) == ({"train": 0.0}, 10.0)
        assert "+search" not in plan.rule and plan.weights.keys() == {"train"}


def test_equal_options_keep_the_earliest_candidate() -> None:
    """Every option of a single task ends at 10 s: the first candidate rule wins the tie."""
    graph = gpu_graph({"train": (10, 2)}, [], dag_id="ties")
    assert packing_weights_plan(graph, {"gpu": 4}).rule == "critical_path"
    reordered = packing_weights_plan(_copy(graph), {"gpu": 4}, candidates=("downstream", "critical_path"))
    assert reordered.rule == "downstream"


def test_refinement_rounds_are_recorded_and_zero_rounds_refine_nothing() -> None:
    plan = packing_weights_plan(DIAMOND, {"gpu": 8}, "reservation")
    assert "critical_path+refined1" in plan.tried
    unrefined = packing_weights_plan(DIAMOND, {"gpu": 8}, "reservation", refine_rounds=0)
    assert not [label for label in unrefined.tried if "+refined" in label]
    assert unrefined.makespan == plan.makespan == 36.0  # a at 0, then c and b one after the other, d


def test_zero_duration_tasks_are_planned_after_their_upstream_tasks() -> None:
    """0-s tasks (joins, markers) of 4 GPUs hold no slots; each still starts after its upstream task."""
    graph = gpu_graph(
        {"start": (0, 4), "train": (10, 4), "join": (0, 4), "eval": (5, 4), "marker": (0, 0)},
        [("start", "train"), ("train", "join"), ("join", "eval"), ("eval", "marker")],
        dag_id="zeros",
    )
    for policy in ("critical_path", "reservation"):
        plan = packing_weights_plan(graph, {"gpu": 4}, policy)
        assert plan.schedule == {"start": 0.0, "train": 0.0, "join": 10.0, "eval": 10.0, "marker": 15.0}
        assert plan.makespan == 15.0


def test_tasks_of_pools_without_capacity_start_when_ready() -> None:
    """Pools not in ``capacity`` are unlimited: three 4-GPU tasks of ``tpu`` run together while the
    4-GPU tasks of the sized ``gpu`` pool take turns."""
    graph = sized_and_unlimited_pools()
    plan = packing_weights_plan(graph, {"gpu": 4}, "reservation")
    assert {t: plan.schedule[t] for t in ("tpu0", "tpu1", "tpu2", "after")} == {
        "tpu0": 0.0,
        "tpu1": 0.0,
        "tpu2": 0.0,
        "after": 10.0,
    }
    assert sorted(plan.schedule[f"gpu{i}"] for i in range(3)) == [0.0, 10.0, 20.0]
    assert plan.makespan == 30.0
    everything_unlimited = packing_weights_plan(_copy(graph), {}, "reservation")
    assert set(everything_unlimited.schedule.values()) == {0.0, 10.0}
    assert everything_unlimited.makespan == 11.0


def test_start_window_holds_a_task_back_in_the_plan() -> None:
    """The 8-GPU task may start only at 100 s: the plan runs the other work first and ends at 110 s."""
    graph = TaskGraph("window")
    graph.add("late", 10.0, 8, pool="gpu", not_before=100.0)
    graph.add("early", 60.0, 8, pool="gpu")
    graph.add("after_late", 5.0, 1, pool="gpu")
    graph.add_edge("late", "after_late")
    for policy in ("critical_path", "reservation"):
        plan = packing_weights_plan(_copy(graph), {"gpu": 8}, policy)
        assert plan.schedule == {"early": 0.0, "late": 100.0, "after_late": 110.0}
        assert plan.makespan == 115.0


def test_task_wider_than_its_pool_is_refused_not_dropped() -> None:
    """An 8-GPU task on a 4-GPU pool (of any length, 0 s too) is reported naming the task and the
    pool, by the planner and by everything that plans."""
    for seconds in (5, 0):
        graph = gpu_graph({"small": (1, 1), "wide": (seconds, 8)}, [("small", "wide")], dag_id="too_wide")
        with pytest.raises(CapacityError, match="'wide' needs 8 slots of pool 'gpu', which has capacity 4"):
            packing_weights_plan(graph, {"gpu": 4}, "reservation")
        with pytest.raises(CapacityError, match="'wide'"):
            planned_remaining(graph, {"gpu": 4})
        with pytest.raises(CapacityError, match="'wide'"):
            predict(graph, {"gpu": 4}, "reservation", priority="packing")


def test_packing_plan_is_frozen() -> None:
    plan = packing_weights_plan(DIAMOND, {"gpu": 8})
    with pytest.raises(FrozenInstanceError):
        plan.makespan = 0.0  # type: ignore[misc]


# -- 5. the local search on its own ------------------------------------------------------------------------
INDEPENDENT = gpu_graph({f"t{i}": (float(i + 1), 1) for i in range(10)}, [], dag_id="independent")


def _plan_of(graph: TaskGraph, makespan: float) -> PackingPlan:
    """A plan ranking the tasks in graph order (the first highest), with the given makespan."""
    weights = {t: len(graph) - k for k, t in enumerate(graph.nodes)}
    return PackingPlan(weights, "given", makespan, {t: 0.0 for t in graph.nodes}, {})


def _rank_order(weights: Mapping[str, int]) -> list[str]:
    return sorted(weights, key=lambda t: -weights[t])


def test_search_order_returns_the_plan_itself_when_nothing_is_shorter() -> None:
    plan = _plan_of(INDEPENDENT, 50.0)
    calls: list[Mapping[str, int]] = []

    def no_better(weights: Mapping[str, int]) -> tuple[float, dict[str, float]]:
        calls.append(weights)
        return 50.0 + len(calls) % 2, {}  # equal or longer

    assert search_order(INDEPENDENT, plan, no_better, budget=0, seed="s") is plan
    assert calls  # it searched
    single = gpu_graph({"only": (3, 1)}, [], dag_id="one")
    calls.clear()
    assert search_order(single, _plan_of(single, 3.0), no_better) == _plan_of(single, 3.0)
    assert not calls  # nothing to reorder


def test_search_order_keeps_the_shortest_order_seen_and_counts_its_improvements() -> None:
    """Scored by how far each task is from its place in the reversed order: the returned plan is the
    shortest score seen, its weights are ranks 1..n, its start is the evaluation's, and its rule counts
    the moves that set a new best."""
    target = {t: k for k, t in enumerate(reversed(list(INDEPENDENT.nodes)))}
    seen: list[float] = []

    def displacement(weights: Mapping[str, int]) -> tuple[float, dict[str, float]]:
        score = float(sum(abs(k - target[t]) for k, t in enumerate(_rank_order(weights))))
        seen.append(score)
        return score, {t: float(weights[t]) for t in weights}

    plan = _plan_of(INDEPENDENT, 50.0)  # graph order is 50 away from the reversed one
    found = search_order(INDEPENDENT, plan, displacement, budget=200 * len(INDEPENDENT), seed="x")
    assert len(seen) <= 200
    assert found.makespan == min(seen) < 50.0
    best = 50.0
    improvements = 0
    for score in seen:
        if score < best:
            best, improvements = score, improvements + 1
    assert found.rule == f"given+search{improvements}"
    assert sorted(found.weights.values()) == list(range(1, len(INDEPENDENT) + 1))
    assert found.schedule == {t: float(w) for t, w in found.weights.items()}
    assert found.tried is plan.tried
    again = search_order(INDEPENDENT, plan, displacement, budget=200 * len(INDEPENDENT), seed="x")
    assert again == found  # seeded


@pytest.mark.parametrize(
    ("budget", "fast", "most"),
    [
        (0, False, 20),
        (50 * 10, False, 50),
        (10**9, False, 600),
        (0, True, 20),
        (100 * 10, True, 4800),
        (10**9, True, 9000),
    ],
)
def test_search_order_evaluations_follow_the_budget(budget: int, fast: bool, most: int) -> None:
    """``budget // n`` evaluations, 20 to 600; with ``fast``, 48 times as many, at most 9,000, after
    one of the plan itself. A drawn move that changes nothing (a task onto its own place) is not
    evaluated, so a few fewer."""
    calls = 0

    def never_better(weights: Mapping[str, int]) -> tuple[float, dict[str, float]]:
        nonlocal calls
        calls += 1
        return 100.0, {}

    search_order(INDEPENDENT, _plan_of(INDEPENDENT, 100.0), never_better, budget, "count", fast=fast)
    moves = calls - 1 if fast else calls
    assert 0.8 * most <= moves <= most  # 1 in 10 draws picks the same place twice


def test_fast_search_scores_the_plan_itself_and_keeps_upstream_tasks_first() -> None:
    """With ``fast`` the search starts from the evaluation's own score of the plan (returned when
    nothing is shorter) and never evaluates an order with a task before one of its upstream tasks."""
    tasks = dict.fromkeys(("a", "b", "c", "x", "y"), (1, 1))
    chain_and_more = gpu_graph(tasks, [("a", "b"), ("b", "c"), ("x", "y")])
    topological: list[bool] = []

    def one_pass(weights: Mapping[str, int]) -> tuple[float, dict[str, float]]:
        position = {t: k for k, t in enumerate(_rank_order(weights))}
        topological.append(all(position[u] < position[d] for u, d, _ in chain_and_more.edges()))
        return 70.0, {}

    plan = _plan_of(chain_and_more, 50.0)
    found = search_order(chain_and_more, plan, one_pass, budget=0, seed="s", fast=True)
    assert found == replace(plan, makespan=70.0)
    assert len(topological) > 1 and all(topological)


@settings(max_examples=30, deadline=None)
@given(random_dags(), st.sampled_from([8, 12]), st.booleans())
def test_search_order_with_a_larger_budget_is_never_worse(graph: TaskGraph, cap: int, fast: bool) -> None:
    """Seeded: a larger budget evaluates the moves of a smaller one first, so it never ends longer;
    the same call twice gives the same plan. Scored by the controller's one-pass schedule (``fast``:
    only orders with upstream tasks first) or by serial generation by the weights."""
    caps = {"gpu": cap}
    topo = {t: i for i, t in enumerate(graph.topological_order())}

    def evaluate(weights: Mapping[str, int]) -> tuple[float, dict[str, float]]:
        if fast:
            start = ordered_schedule(graph, caps, sorted(graph.nodes, key=lambda t: (-weights[t], topo[t])))
        else:
            start = priority_serial_schedule(graph, caps, weights)
        return max((start[t] + graph.nodes[t].duration for t in start), default=0.0), start

    weights = {t: len(topo) - k for t, k in topo.items()}
    makespan, start = evaluate(weights)
    plan = PackingPlan(weights, "topological", makespan, start, {})
    small = search_order(graph, plan, evaluate, budget=len(graph) * 30, seed="seed", fast=fast)
    large = search_order(graph, plan, evaluate, budget=len(graph) * 300, seed="seed", fast=fast)
    assert large.makespan <= small.makespan <= plan.makespan
    assert search_order(graph, plan, evaluate, budget=len(graph) * 30, seed="seed", fast=fast) == small


# -- 6. the rule as a callable, and predictions -------------------------------------------------------------
def test_packing_rule_plans_each_graph_on_the_capacity_it_was_given() -> None:
    caps = {"gpu": 8}
    rule = packing_rule(caps, "reservation")
    caps["gpu"] = 1  # a copy was taken
    assert rule(DIAMOND) == packing_weights_plan(DIAMOND, {"gpu": 8}, "reservation").weights
    strict = packing_rule({"gpu": 8}, "reservation", strict_backfill=True)(DIAMOND)
    assert strict == packing_weights_plan(DIAMOND, {"gpu": 8}, "reservation", strict_backfill=True).weights


def test_resolve_rule_resolves_every_name_packing_included() -> None:
    caps = {"gpu": 8}
    packing = resolve_rule("packing", caps)(DIAMOND)
    assert packing == packing_weights_plan(DIAMOND, caps, "reservation").weights
    greedy = resolve_rule("packing", caps, "critical_path")(DIAMOND)
    assert greedy == packing_weights_plan(DIAMOND, caps, "critical_path").weights
    assert resolve_rule("downstream", caps)(DIAMOND) == {"a": 4, "b": 2, "c": 2, "d": 1, "e": 1}
    assert resolve_rule("width_aware", caps)(DIAMOND) == resolve_priority("width_aware", caps)(DIAMOND)

    def mine(graph: TaskGraph) -> dict[str, int]:
        return dict.fromkeys(graph.nodes, 1)

    assert resolve_rule(mine, caps) is mine
    with pytest.raises(ValueError, match="unknown priority rule 'fastest'"):
        resolve_rule("fastest", caps)


def test_predict_simulates_the_declared_rule_and_plans_packing_by_default() -> None:
    """Under reservation a DAG without a declared rule is predicted with the packing plan (for the
    backfill asked for); one declaring critical_path with that; other policies with their own rule."""
    caps = {"gpu": 8}
    planned = packing_weights_plan(DIAMOND, caps, "reservation").weights
    packed = predict(DIAMOND, caps, "reservation")
    assert packed.schedule == simulate(DIAMOND, caps, "reservation", priority=lambda g: planned).schedule
    strict_weights = packing_weights_plan(DIAMOND, caps, "reservation", strict_backfill=True).weights
    strict = predict(DIAMOND, caps, "reservation", strict_backfill=True)
    expected = simulate(DIAMOND, caps, "reservation", priority=lambda g: strict_weights, strict_backfill=True)
    assert strict.schedule == expected.schedule
    declared = _copy(DIAMOND)
    declared.priority_rule = "critical_path"
    assert predict(declared, caps, "reservation").schedule == (
        simulate(declared, caps, "reservation", priority="critical_path").schedule
    )
    assert predict(DIAMOND, caps, "stock").schedule == simulate(DIAMOND, caps, "stock").schedule
    greedy = predict(DIAMOND, caps, "critical_path", priority="packing")
    greedy_weights = packing_weights_plan(DIAMOND, caps, "critical_path").weights
    expected = simulate(DIAMOND, caps, "critical_path", priority=lambda g: greedy_weights)
    assert greedy.schedule == expected.schedule


def test_planned_remaining_is_the_planned_end_minus_each_planned_start() -> None:
    """DIAMOND on 8 GPUs: a and e start at 0 of a 36-s plan, the 8-GPU b at 30, d last at 35."""
    plan = packing_weights_plan(DIAMOND, {"gpu": 8}, "reservation")
    remaining = planned_remaining(DIAMOND, {"gpu": 8})
    assert remaining == {t: 36.0 - start for t, start in plan.schedule.items()}
    assert remaining == {"a": 36.0, "e": 36.0, "c": 26.0, "b": 6.0, "d": 1.0}


# -- 7. plans of unusual durations and of no candidate rule -----------------------------------------------
def test_reservation_plan_with_the_search_survives_float_durations_and_zero_duration_joins() -> None:
    """Found by random search: 0-s joins and tenths of seconds. Without the search this DAG plans."""
    tasks = {
        "t1": (4, 1), "t2": (4.7, 2), "t3": (1.4, 0), "t4": (1.2, 2), "t5": (0, 0), "t6": (1.4, 0),
        "t7": (0, 0), "t8": (2, 4), "t9": (4.3, 1), "t10": (0.7, 1), "t11": (0, 0),
    }  # fmt: skip
    edges = [("t1", "t5"), ("t2", "t5"), ("t2", "t9"), ("t3", "t4"), ("t4", "t9"), ("t5", "t6")]
    edges += [("t6", "t10"), ("t7", "t10")]
    graph = gpu_graph(tasks, edges)
    plain = packing_weights_plan(graph, {"gpu": 4}, "reservation")
    searched = packing_weights_plan(graph, {"gpu": 4}, "reservation", search_budget=SEARCH_BUDGET)
    assert searched.makespan <= plain.makespan


def test_plan_without_candidates_still_predicts_its_weights() -> None:
    """PackingPlan: ``makespan`` the predicted makespan with these weights, ``schedule`` the planned
    start of every task."""
    plan = packing_weights_plan(DIAMOND, {"gpu": 8}, "reservation", candidates=())
    predicted = simulate(DIAMOND, {"gpu": 8}, "reservation", priority=lambda g: plan.weights)
    assert plan.schedule.keys() == DIAMOND.nodes.keys()
    assert plan.makespan == predicted.makespan
