"""Tests of ``airflow_gpu_dag.core.planning.justification``."""

from __future__ import annotations

import heapq
from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.weight_rules import critical_path_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.justification import (
    TaskTable,
    UsageProfile,
    _place,
    justify,
    ordered_schedule,
    priority_serial_schedule,
    serial_schedule,
)
from airflow_gpu_dag.core.simulation.simulator import simulate
from tests.unit.graphs import draw_task_graph, gpu_graph, sized_and_unlimited_pools


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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 400), st.integers(1, 30), st.integers(1, 4)
        ),  # start, length, slots: many short busy ranges, so the search runs past its short walk
        max_size=60,
    ),
    st.integers(0, 500),
    st.integers(1, 40),
    st.integers(1, 4),
)
def test_usage_profile_earliest_matches_the_step_walk(
    intervals: list[tuple[int, int, int]], not_before: int, duration: int, slots: int
) -> None:
    """The jumps over merged busy ranges find the same start as walking the steps one by one."""
    p = UsageProfile(4)
    for begin, length, width in intervals:
        at = p.earliest(begin, length, width)
        p.add(at, at + length, width)
    assert p.earliest(not_before, duration, slots) == p.earliest_by_steps(not_before, duration, slots)


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


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            # from time 0 (remembered), just before or after it, or anywhere
            st.one_of(st.just(0), st.integers(-3, 6), st.integers(-20, 400)),
            st.integers(1, 40),
            st.integers(1, 4),
            st.booleans(),  # placed there, or only searched
        ),
        max_size=80,
    )
)
def test_usage_profile_searches_from_zero_match_the_step_walk(
    searches: list[tuple[int, int, int, bool]],
) -> None:
    """Every search finds the start the step walk finds, whatever the searches from time 0 before it
    remembered: searches of every width and duration, some placed there before the next one."""
    p = UsageProfile(4)
    for not_before, length, width, place in searches:
        at = p.earliest(not_before, length, width)
        assert at == p.earliest_by_steps(not_before, length, width)
        if place:
            p.add(at, at + length, width)


def _placed_one_by_one(
    graph: TaskGraph, capacity: dict[str, int], order: list[str], reverse: bool
) -> dict[str, float]:
    """A serial pass placed task by task with :func:`_place`, reading the tasks by id."""
    tasks = TaskTable(graph)
    profiles = {pool: UsageProfile(cap) for pool, cap in capacity.items()}
    start: dict[str, float] = {}
    for task_id in order:
        _place(tasks, profiles, start, task_id, (tasks.down if reverse else tasks.up)[task_id])
    return start


def _random_topological_order(graph: TaskGraph, rng: Random) -> list[str]:
    """Every task after its upstream tasks, the next one drawn among those ready."""
    missing = {t: len(graph.upstream(t)) for t in graph.nodes}
    ready = [t for t, count in missing.items() if count == 0]
    order: list[str] = []
    while ready:
        task = ready.pop(rng.randrange(len(ready)))
        order.append(task)
        for down in graph.downstream(task):
            missing[down] -= 1
            if missing[down] == 0:
                ready.append(down)
    return order


@settings(max_examples=120, deadline=None)
@given(random_dags(), st.sampled_from([8, 10]), st.randoms(use_true_random=False))
def test_serial_pass_by_task_number_places_as_by_task_id(graph: TaskGraph, cap: int, rng: Random) -> None:
    """The serial pass over task numbers places every task where the pass by task id does, forward and
    backward, in the same order (tasks of unlimited pools included)."""
    order = _random_topological_order(graph, rng)
    for tasks, reverse in ((order, False), (list(reversed(order)), True)):
        expected = _placed_one_by_one(graph, {"gpu": cap}, tasks, reverse)
        placed = serial_schedule(graph, {"gpu": cap}, tasks, reverse=reverse)
        assert list(placed.items()) == list(expected.items())


def _justified_by_id(
    graph: TaskGraph, capacity: dict[str, int], start: dict[str, float], max_rounds: int
) -> tuple[dict[str, float], float]:
    """Forward-backward passes with the orders sorted by task id and key, one serial pass per task id."""
    topo = {t: i for i, t in enumerate(graph.topological_order())}
    dur = {t: node.duration for t, node in graph.nodes.items()}
    best = dict(start)
    best_makespan = max((best[t] + dur[t] for t in best), default=0.0)
    for _round in range(max_rounds):
        current = best
        backward = sorted(current, key=lambda t: (-(current[t] + dur[t]), -topo[t]))
        mirrored = serial_schedule(graph, capacity, backward, reverse=True)
        right = {t: best_makespan - mirrored[t] - dur[t] for t in mirrored}
        forward_order = sorted(right, key=lambda t: (right[t], topo[t]))
        forward = serial_schedule(graph, capacity, forward_order)
        makespan = max((forward[t] + dur[t] for t in forward), default=0.0)
        if not makespan < best_makespan - 1e-9 * max(1.0, best_makespan):
            break
        best, best_makespan = forward, makespan
    return best, best_makespan


@st.composite
def tied_dags(draw: st.DrawFn) -> TaskGraph:
    """Random DAGs whose tasks last 0-3 s: many ties in finish and in right-shifted start."""
    return draw_task_graph(draw, "tied", (1, 25), [0, 1, 2, 3, 4, 8], 3)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(random_dags(), tied_dags()),
    st.sampled_from([8, 10]),
    st.sampled_from(["stock", "critical_path"]),
    st.integers(1, 4),
)
def test_justify_by_task_number_matches_the_passes_by_task_id(
    graph: TaskGraph, cap: int, policy: str, rounds: int
) -> None:
    """justify (sort keys and passes by task number) returns the schedule, in the same order, and the
    makespan of the passes sorted and placed by task id."""
    start = {t.task_id: t.start for t in simulate(graph, {"gpu": cap}, policy).schedule}
    improved, makespan = justify(graph, {"gpu": cap}, start, max_rounds=rounds)
    expected, expected_makespan = _justified_by_id(graph, {"gpu": cap}, start, rounds)
    assert list(improved.items()) == list(expected.items())
    assert makespan == expected_makespan


def _by_priority_by_id(
    graph: TaskGraph, capacity: dict[str, int], priority: dict[str, float]
) -> dict[str, float]:
    """Serial generation by priority with a heap of task ids, each placed with :func:`_place`."""
    tasks = TaskTable(graph)
    topo = tasks.topo
    missing = {t: len(tasks.up[t]) for t in graph.nodes}
    eligible = [(-priority.get(t, 0.0), topo[t], t) for t, count in missing.items() if count == 0]
    heapq.heapify(eligible)
    profiles = {pool: UsageProfile(cap) for pool, cap in capacity.items()}
    start: dict[str, float] = {}
    while eligible:
        _p, _i, task_id = heapq.heappop(eligible)
        _place(tasks, profiles, start, task_id, tasks.up[task_id])
        for down in tasks.down[task_id]:
            missing[down] -= 1
            if missing[down] == 0:
                heapq.heappush(eligible, (-priority.get(down, 0.0), topo[down], down))
    return start


@settings(max_examples=150, deadline=None)
@given(st.one_of(random_dags(), tied_dags()), st.sampled_from([8, 10]), st.randoms(use_true_random=False))
def test_priority_serial_schedule_by_task_number_matches_the_heap_of_task_ids(
    graph: TaskGraph, cap: int, rng: Random
) -> None:
    """Placed in the same order at the same starts as with a heap of task ids, for priorities with
    ties (drawn from three values) and without."""
    for priority in (
        {t: float(rng.randrange(3)) for t in graph.nodes},
        critical_path_weights(graph),
        {t: rng.random() for t in list(graph.nodes)[::2]},  # the others 0
    ):
        placed = priority_serial_schedule(graph, {"gpu": cap}, priority)
        assert list(placed.items()) == list(_by_priority_by_id(graph, {"gpu": cap}, priority).items())


# -- UsageProfile -----------------------------------------------------------------------------------------
def test_usage_profile_add_ignores_empty_intervals_and_counts_overlaps() -> None:
    """An interval of no length or no slots holds nothing; overlapping ones add up, 0 outside them."""
    p = UsageProfile(4)
    p.add(5, 5, 2)
    p.add(5, 3, 2)
    p.add(0, 10, 0)
    assert (p.times, p.use) == ([0.0], [0])
    p.add(2, 6, 3)
    p.add(4, 8, 1)
    assert (p.times, p.use) == ([0.0, 2, 4, 6, 8], [0, 3, 4, 1, 0])
    assert p.earliest(0, 4, 1) == 0  # one slot is left free up to 4
    assert p.earliest(0, 5, 1) == 6  # 5 s of one slot: only after the full step [4, 6)
    assert p.earliest(0, 3, 2) == 6  # two slots are free only before 2 and from 6 on
    assert p.earliest(0, 3, 4) == 8  # the whole pool: only once both intervals have ended


def test_usage_profile_without_slots_to_hold_starts_at_not_before() -> None:
    """A task holding no slots fits a full pool at once; a pool of capacity 0 fits no slot at all."""
    p = UsageProfile(2)
    p.add(0, 100, 2)
    assert p.earliest(7, 5, 0) == 7
    assert p.earliest_by_steps(7, 5, 0) == 7
    with pytest.raises(ValueError, match="1 slots can never fit a pool of capacity 0"):
        UsageProfile(0).earliest(0, 1, 1)


# -- TaskTable --------------------------------------------------------------------------------------------
def test_task_table_reads_the_graph_once_and_is_reused_only_for_that_graph() -> None:
    graph = TaskGraph("table")
    graph.add("prep", 2.0)  # no GPU: default pool, 1 slot
    graph.add("train", 10.0, 4, pool="gpu")
    graph.add("eval", 1.0, 1, pool="gpu")
    graph.add_edge("prep", "train")
    graph.add_edge("train", "eval")
    graph.add_edge("prep", "eval")
    table = TaskTable(graph)
    assert table.duration == {"prep": 2.0, "train": 10.0, "eval": 1.0}
    assert table.pool == {"prep": "default_pool", "train": "gpu", "eval": "gpu"}
    assert table.slots == {"prep": 1, "train": 4, "eval": 1}
    assert table.up == {"prep": [], "train": ["prep"], "eval": ["train", "prep"]}
    assert table.down == {"prep": ["train", "eval"], "train": ["eval"], "eval": []}
    # the same by task number (position in graph.nodes)
    assert table.number == {"prep": 0, "train": 1, "eval": 2}
    assert (table.durations, table.pools, table.widths) == (
        [2.0, 10.0, 1.0],
        ["default_pool", "gpu", "gpu"],
        [1, 4, 1],
    )
    assert (table.ups, table.downs) == ([[], [0], [1, 0]], [[1, 2], [2], []])
    assert table.topo == {"prep": 0, "train": 1, "eval": 2}
    assert table.topo_numbers == [0, 1, 2]
    assert TaskTable.of(graph, table) is table
    other_graph = TaskGraph("other")
    other = TaskTable.of(other_graph, table)
    assert other is not table and other.graph is other_graph
    assert TaskTable.of(graph, None).graph is graph


def test_task_table_topological_numbers_follow_the_graph_order_not_insertion() -> None:
    """A task added before its upstream task comes after it in ``topo`` and ``topo_numbers``."""
    graph = TaskGraph("late_source")
    graph.add("b", 1.0)
    graph.add("a", 1.0)
    graph.add_edge("a", "b")
    table = TaskTable(graph)
    assert table.number == {"b": 0, "a": 1}
    assert table.topo == {"a": 0, "b": 1}
    assert table.topo_numbers == [1, 0]


# -- serial passes ----------------------------------------------------------------------------------------
def test_serial_schedule_places_each_task_at_its_earliest_fit_in_order() -> None:
    """Two 1-GPU tasks share a 2-GPU pool at 0; the 2-GPU task waits for both; the last 1-GPU task
    waits for it (it cannot start in the hole before: the pool is full there)."""
    graph = gpu_graph({"a": (4, 1), "b": (4, 1), "c": (2, 2), "d": (4, 1)}, [])
    placed = serial_schedule(graph, {"gpu": 2}, ["a", "b", "c", "d"])
    assert list(placed.items()) == [("a", 0.0), ("b", 0.0), ("c", 4.0), ("d", 6.0)]


def test_serial_schedule_backwards_returns_mirrored_starts() -> None:
    """Reversed, a chain a (10 s) -> b (5 s) is placed from its end: b's mirrored start is 0 and a's
    is 5 (= makespan 15 - its finish 10)."""
    graph = gpu_graph({"a": (10, 1), "b": (5, 1)}, [("a", "b")])
    assert serial_schedule(graph, {"gpu": 1}, ["b", "a"], reverse=True) == {"b": 0.0, "a": 5.0}
    assert serial_schedule(graph, {"gpu": 1}, ["a", "b"]) == {"a": 0.0, "b": 10.0}


def test_serial_passes_start_tasks_of_pools_without_capacity_when_ready() -> None:
    """Pools not in ``capacity`` are unlimited: three 4-GPU tasks of pool ``tpu`` start together, while
    the 4-GPU tasks of the sized pool ``gpu`` take turns."""
    graph = sized_and_unlimited_pools()
    caps = {"gpu": 4}
    order = list(graph.nodes)
    expected = {"tpu0": 0.0, "tpu1": 0.0, "tpu2": 0.0, "after": 10.0, "gpu0": 0.0, "gpu1": 10.0, "gpu2": 20.0}
    assert serial_schedule(graph, caps, order) == expected
    assert ordered_schedule(graph, caps, order) == expected
    assert priority_serial_schedule(graph, caps, {}) == expected
    improved, makespan = justify(graph, caps, expected)
    assert makespan == 30.0 and improved["gpu2"] - improved["gpu0"] in (20.0, -20.0)


def test_zero_duration_tasks_hold_no_slots_but_wait_for_their_upstream_tasks() -> None:
    """A 0-s 4-GPU join runs while the pool is full, but only after its upstream task."""
    graph = gpu_graph({"long": (10, 4), "short": (3, 1), "join": (0, 4), "next": (2, 1)}, [])
    graph.add_edge("short", "join")
    graph.add_edge("join", "next")
    placed = serial_schedule(graph, {"gpu": 4}, ["long", "short", "join", "next"])
    assert placed == {"long": 0.0, "short": 10.0, "join": 13.0, "next": 13.0}
    placed = serial_schedule(graph, {"gpu": 5}, ["long", "short", "join", "next"])
    assert placed == {"long": 0.0, "short": 0.0, "join": 3.0, "next": 3.0}


def test_serial_passes_refuse_a_task_wider_than_its_pool() -> None:
    """An 8-GPU task on a 4-GPU pool is reported (ValueError), not silently placed or dropped."""
    graph = gpu_graph({"small": (1, 1), "wide": (5, 8)}, [("small", "wide")])
    caps = {"gpu": 4}
    with pytest.raises(ValueError, match="8 slots can never fit a pool of capacity 4"):
        serial_schedule(graph, caps, ["small", "wide"])
    with pytest.raises(ValueError, match="never fit"):
        ordered_schedule(graph, caps, ["small", "wide"])
    with pytest.raises(ValueError, match="never fit"):
        priority_serial_schedule(graph, caps, {"small": 2, "wide": 1})
    with pytest.raises(ValueError, match="never fit"):
        justify(graph, caps, {"small": 0.0, "wide": 1.0})


def test_ordered_schedule_starts_no_task_before_the_one_placed_before_it_in_its_pool() -> None:
    """The 1-GPU task fits beside the first one at 0, but the controller reserves for the 4-GPU task
    placed before it, so it starts after that one; a task of an unlimited pool is not held back. What
    the simulated controller without backfill does with the order as weights."""
    graph = gpu_graph({"a": (10, 1), "w": (5, 4), "s": (1, 1), "cpu": (3, 0)}, [])
    order = ["a", "w", "s", "cpu"]
    start = ordered_schedule(graph, {"gpu": 4}, order)
    assert start == {"a": 0.0, "w": 10.0, "s": 15.0, "cpu": 0.0}
    assert serial_schedule(graph, {"gpu": 4}, order)["s"] == 0.0  # a serial pass fills the hole
    weights = {t: len(order) - k for k, t in enumerate(order)}
    simulated = simulate(graph, {"gpu": 4}, "reservation", priority=lambda g: weights, backfill=False)
    assert {t.task_id: t.start for t in simulated.schedule} == start


def test_priority_serial_schedule_places_by_priority_into_holes_left_earlier() -> None:
    """Placed by priority (a, then b, then c), c goes into the hole beside a, before b, which was
    placed earlier; the returned order is the order placed. A task without a priority counts 0."""
    graph = gpu_graph({"a": (10, 1), "b": (5, 2), "c": (10, 1)}, [])
    placed = priority_serial_schedule(graph, {"gpu": 2}, {"a": 3, "b": 2, "c": 1})
    assert list(placed.items()) == [("a", 0.0), ("b", 10.0), ("c", 0.0)]
    placed = priority_serial_schedule(graph, {"gpu": 2}, {"b": 2, "a": -1})
    assert list(placed.items()) == [("b", 0.0), ("c", 5.0), ("a", 5.0)]


def test_priority_serial_schedule_places_a_task_only_after_its_upstream_tasks() -> None:
    """The highest priority goes to the last task of a chain: it is still placed last."""
    graph = gpu_graph({"a": (2, 1), "b": (3, 1), "c": (1, 1)}, [("a", "b"), ("b", "c")])
    placed = priority_serial_schedule(graph, {"gpu": 1}, {"c": 10, "b": 5, "a": 1})
    assert list(placed.items()) == [("a", 0.0), ("b", 2.0), ("c", 5.0)]


# -- justify ----------------------------------------------------------------------------------------------
def test_justify_moves_narrow_work_into_the_hole_before_a_wide_task() -> None:
    """One task after the other (14 s) on 2 GPUs: justification runs the 1-GPU tasks side by side
    around the 2-GPU one and ends at 10 s, the optimum (three 4-s tasks on 2 GPUs and 2 s of both)."""
    graph = gpu_graph({"a": (4, 1), "b": (4, 1), "c": (2, 2), "d": (4, 1)}, [])
    start = {"a": 0.0, "b": 4.0, "c": 8.0, "d": 10.0}
    improved, makespan = justify(graph, {"gpu": 2}, start)
    assert (improved, makespan) == ({"a": 0.0, "b": 0.0, "c": 4.0, "d": 6.0}, 10.0)
    assert justify(graph, {"gpu": 2}, start, max_rounds=1) == (improved, makespan)
    assert start == {"a": 0.0, "b": 4.0, "c": 8.0, "d": 10.0}  # the input is not changed


def test_justify_returns_its_input_when_no_round_shortens_it() -> None:
    """No rounds, a schedule that cannot be shorter (a chain) and an empty one come back as given."""
    graph = gpu_graph({"a": (4, 1), "b": (4, 1), "c": (2, 2), "d": (4, 1)}, [])
    start = {"a": 0.0, "b": 4.0, "c": 8.0, "d": 10.0}
    assert justify(graph, {"gpu": 2}, start, max_rounds=0) == (start, 14.0)
    chain = gpu_graph({"a": (10, 1), "b": (5, 1)}, [("a", "b")])
    assert justify(chain, {"gpu": 1}, {"a": 0.0, "b": 10.0}) == ({"a": 0.0, "b": 10.0}, 15.0)
    assert justify(TaskGraph("empty"), {"gpu": 1}, {}) == ({}, 0.0)
    table = TaskTable(graph)  # a table read once for many calls gives the same result
    assert justify(graph, {"gpu": 2}, start, table=table) == justify(graph, {"gpu": 2}, start)


def _feasible_in_pools(graph: TaskGraph, capacity: dict[str, int], start: dict[str, float]) -> None:
    """Every task placed, after its upstream tasks; no capacity pool over its size at any moment."""
    assert start.keys() == graph.nodes.keys()
    for up, down, _ in graph.edges():
        assert start[down] >= start[up] + graph.nodes[up].duration - 1e-9
    for pool, cap in capacity.items():
        for moment in set(start.values()):
            held = sum(
                graph.nodes[t].gpus
                for t in graph.nodes
                if graph.nodes[t].pool == pool and start[t] <= moment < start[t] + graph.nodes[t].duration
            )
            assert held <= cap


@st.composite
def two_pool_dags(draw: st.DrawFn) -> TaskGraph:
    """Random DAGs whose GPU tasks hold slots of ``a``, ``b`` or the unsized ``c``."""
    return draw_task_graph(
        draw, "pools", (1, 14), [0, 1, 2, 3, 4], 20, lambda d, _count: d(st.sampled_from(["a", "b", "c"]))
    )


@settings(max_examples=120, deadline=None)
@given(two_pool_dags(), st.randoms(use_true_random=False))
def test_every_pass_keeps_each_pool_within_its_capacity(graph: TaskGraph, rng: Random) -> None:
    """Several pools and an unlimited one: every serial pass and the justification of a greedy schedule
    keep each sized pool within its capacity and every task after its upstream tasks."""
    caps = {"a": 4, "b": 5}
    order = _random_topological_order(graph, rng)
    _feasible_in_pools(graph, caps, serial_schedule(graph, caps, order))
    _feasible_in_pools(graph, caps, ordered_schedule(graph, caps, order))
    priority = {t: rng.random() for t in graph.nodes}
    _feasible_in_pools(graph, caps, priority_serial_schedule(graph, caps, priority))
    greedy = simulate(graph, caps, "stock")
    improved, makespan = justify(graph, caps, {t.task_id: t.start for t in greedy.schedule})
    _feasible_in_pools(graph, caps, improved)
    assert makespan <= greedy.makespan


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.sampled_from([8, 10]), st.integers(0, 4))
def test_justify_is_deterministic(graph: TaskGraph, cap: int, rounds: int) -> None:
    """The same schedule, in the same order, for the same input, with or without a table read once."""
    start = {t.task_id: t.start for t in simulate(graph, {"gpu": cap}, "stock").schedule}
    first = justify(graph, {"gpu": cap}, start, max_rounds=rounds)
    again = justify(graph, {"gpu": cap}, dict(start), max_rounds=rounds, table=TaskTable(graph))
    assert list(first[0].items()) == list(again[0].items()) and first[1] == again[1]


def test_justify_keeps_a_task_after_its_zero_duration_upstream_task() -> None:
    """A chain w (0.1 s) -> u (0 s) -> d (0.1 s) -> e (0.7 s) without any resource conflict: no
    schedule ends before 0.9 s and d cannot start before u. Justified, d starts at 0."""
    graph = gpu_graph({"w": (0.1, 1), "u": (0.0, 1), "d": (0.1, 1), "e": (0.7, 1)}, [])
    for up, down in (("w", "u"), ("u", "d"), ("d", "e")):
        graph.add_edge(up, down)
    start = {"w": 0.0, "u": 0.1, "d": 0.1, "e": 0.2}
    improved, makespan = justify(graph, {"gpu": 4}, start)
    assert improved["d"] >= improved["u"]
    assert makespan == pytest.approx(0.9)


def test_justify_keeps_a_task_within_its_start_window() -> None:
    """A task whose start window opens at 100 s starts there in the greedy schedule; justified it
    starts at 0 and the makespan (10 s) is one no schedule can reach."""
    graph = TaskGraph("window")
    graph.add("late", 10.0, 1, pool="gpu", not_before=100.0)
    graph.add("early", 10.0, 1, pool="gpu")
    greedy = simulate(graph, {"gpu": 4}, "stock")
    start = {t.task_id: t.start for t in greedy.schedule}
    assert start == {"early": 0.0, "late": 100.0}
    improved, makespan = justify(graph, {"gpu": 4}, start)
    assert improved["late"] >= 100.0 and makespan == 110.0


def test_ordered_schedule_is_what_the_controller_realizes_with_a_start_window() -> None:
    """Its docstring: for DAGs whose tasks all hold slots of capacity pools, exactly what the simulator
    predicts. The simulator holds a task back until its start window opens."""
    graph = TaskGraph("window")
    graph.add("late", 10.0, 1, pool="gpu", not_before=100.0)
    simulated = simulate(graph, {"gpu": 4}, "reservation", priority=lambda g: {"late": 1}, backfill=False)
    assert simulated.by_id()["late"].start == 100.0
    assert ordered_schedule(graph, {"gpu": 4}, ["late"]) == {"late": 100.0}
