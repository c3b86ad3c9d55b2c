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
from tests.unit.graphs import draw_task_graph


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
