"""Critical path method: hand-checked cases and property tests against a brute force."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core import CycleError, TaskGraph, analyze


def test_textbook_example() -> None:
    # a(3) -> b(2) -> d(4); a -> c(6) -> d; e(1) independent
    graph = TaskGraph.from_edges(
        "ex",
        {"a": 3, "b": 2, "c": 6, "d": 4, "e": 1},
        [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
    )
    result = analyze(graph)
    t = result.timings
    assert result.makespan == 13
    assert result.critical_path == ["a", "c", "d"]
    assert result.critical_tasks == ["a", "c", "d"]
    assert (t["b"].earliest_start, t["b"].latest_start, t["b"].slack) == (3, 7, 4)
    assert (t["e"].earliest_start, t["e"].latest_finish, t["e"].slack) == (0, 13, 12)
    assert [t[x].remaining for x in "abcde"] == [13, 6, 10, 4, 1]
    assert result.priority("a") == 13


def test_zero_duration_and_many_sources_and_sinks() -> None:
    graph = TaskGraph.from_edges(
        "z",
        {"start": 0, "x": 5, "y": 5, "marker": 0, "end1": 2, "end2": 0},
        [("start", "x"), ("start", "y"), ("x", "marker"), ("marker", "end1"), ("y", "end2")],
    )
    result = analyze(graph)
    assert result.makespan == 7
    assert result.timings["end2"].slack == 2
    assert result.timings["marker"].critical
    assert result.critical_path == ["start", "x", "marker", "end1"]


def test_empty_graph() -> None:
    result = analyze(TaskGraph("empty"))
    assert result.makespan == 0 and result.critical_path == [] and result.timings == {}


def test_cycle_is_named() -> None:
    graph = TaskGraph.from_edges(
        "cyc", {"a": 1, "b": 1, "c": 1, "d": 1}, [("a", "b"), ("b", "c"), ("c", "b"), ("c", "d")]
    )
    with pytest.raises(CycleError) as err:
        analyze(graph)
    assert err.value.cycle in (["b", "c", "b"], ["c", "b", "c"])
    message = str(err.value)
    assert "DAG 'cyc'" in message
    assert "b -> c -> b" in message or "c -> b -> c" in message


def test_deterministic_order() -> None:
    durations = {f"t{i}": float(i % 3) for i in range(30)}
    edges = [(f"t{i}", f"t{j}") for i in range(30) for j in range(i + 1, 30) if (i * 7 + j) % 5 == 0]
    first = analyze(TaskGraph.from_edges("d", durations, edges))
    second = analyze(TaskGraph.from_edges("d", durations, edges))
    assert first == second


@st.composite
def small_dags(draw: st.DrawFn) -> TaskGraph:
    n = draw(st.integers(min_value=1, max_value=8))
    durations = {f"t{i}": float(draw(st.integers(min_value=0, max_value=20))) for i in range(n)}
    # edges only from lower to higher index (acyclic), in a random subset; insertion order shuffled
    pairs = [(i, j) for i, j in itertools.combinations(range(n), 2)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    order = draw(st.permutations(list(durations)))
    graph = TaskGraph("prop")
    for task_id in order:
        graph.add(task_id, durations[task_id])
    for i, j in chosen:
        graph.add_edge(f"t{i}", f"t{j}")
    return graph


def _all_paths(graph: TaskGraph) -> list[list[str]]:
    paths: list[list[str]] = []

    def walk(path: list[str]) -> None:
        downs = graph.downstream(path[-1])
        if not downs:
            paths.append(path)
        for d in downs:
            walk([*path, d])

    for source in graph.sources():
        walk([source])
    return paths


@settings(max_examples=300, deadline=None)
@given(small_dags())
def test_matches_brute_force(graph: TaskGraph) -> None:
    result = analyze(graph)
    d = {t: graph.nodes[t].duration for t in graph}
    paths = _all_paths(graph)
    makespan = max(sum(d[t] for t in p) for p in paths)
    assert result.makespan == pytest.approx(makespan)
    for task_id in graph:
        through = [p for p in paths if task_id in p]
        es = max(sum(d[t] for t in p[: p.index(task_id)]) for p in through)
        remaining = max(sum(d[t] for t in p[p.index(task_id) :]) for p in through)
        timing = result.timings[task_id]
        assert timing.earliest_start == pytest.approx(es)
        assert timing.earliest_finish == pytest.approx(es + d[task_id])
        assert timing.remaining == pytest.approx(remaining)
        assert timing.latest_start == pytest.approx(makespan - remaining)
        assert timing.latest_finish == pytest.approx(makespan - remaining + d[task_id])
        assert timing.slack == pytest.approx(makespan - remaining - es)
        assert timing.slack >= 0
        assert timing.critical == (abs(makespan - remaining - es) < 1e-9)
    # the reported critical path is a real source-to-sink path of length == makespan
    cp = result.critical_path
    assert cp in paths
    assert sum(d[t] for t in cp) == pytest.approx(makespan)
