"""Critical path method: hand-checked cases and property tests against a brute force."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core import CycleError, TaskGraph, analyze


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


# -- networkx as the oracle of the graph algorithms of ``core``: on random graphs (hypothesis), what


MAX_TASKS = 24


@st.composite
def task_graphs(draw: st.DrawFn, acyclic: bool) -> TaskGraph:
    """A random graph of up to ``MAX_TASKS`` tasks with integer durations, tasks added in a random
    order (so insertion order is not a topological order). ``acyclic``: every edge follows a hidden
    random ranking; otherwise any edge, self-loops included, may appear."""
    n = draw(st.integers(0, MAX_TASKS))
    ids = [f"t{i}" for i in range(n)]
    insertion = draw(st.permutations(ids))
    graph = TaskGraph("oracle")
    for task_id in insertion:
        graph.add(task_id, draw(st.integers(0, 100)))
    if n == 0:
        return graph
    pairs = draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), max_size=3 * n))
    if acyclic:
        rank = {t: i for i, t in enumerate(draw(st.permutations(ids)))}
        pairs = [(a, b) if rank[a] < rank[b] else (b, a) for a, b in pairs if a != b]
    for up, down in pairs:
        graph.add_edge(up, down)
    return graph


def to_networkx(graph: TaskGraph) -> nx.DiGraph:
    oracle = nx.DiGraph()
    oracle.add_nodes_from(graph)
    oracle.add_edges_from((up, down) for up, down, _ in graph.edges())
    return oracle


def split_nodes(graph: TaskGraph) -> nx.DiGraph:
    """Each task ``t`` as an edge ``(t, "in") -> (t, "out")`` weighted by its duration, each graph edge
    ``u -> v`` as ``(u, "out") -> (v, "in")`` weighted 0: node-weighted paths become edge-weighted."""
    split = nx.DiGraph()
    for task_id, node in graph.nodes.items():
        split.add_edge((task_id, "in"), (task_id, "out"), weight=node.duration)
    for up, down, _ in graph.edges():
        split.add_edge((up, "out"), (down, "in"), weight=0)
    return split


def longest_from(split: nx.DiGraph, start: tuple[str, str]) -> float:
    reach = nx.descendants(split, start) | {start}
    return float(nx.dag_longest_path_length(split.subgraph(reach), weight="weight"))


def longest_into(split: nx.DiGraph, end: tuple[str, str]) -> float:
    reach = nx.ancestors(split, end) | {end}
    return float(nx.dag_longest_path_length(split.subgraph(reach), weight="weight"))


@settings(max_examples=150, deadline=None)
@given(task_graphs(acyclic=True))
def test_topological_order_is_valid(graph: TaskGraph) -> None:
    oracle = to_networkx(graph)
    assert nx.is_directed_acyclic_graph(oracle)
    order = graph.topological_order()
    assert sorted(order) == sorted(graph)
    position = {t: i for i, t in enumerate(order)}
    assert all(position[u] < position[v] for u, v in oracle.edges)
    assert graph.find_cycle() is None


@settings(max_examples=200, deadline=None)
@given(task_graphs(acyclic=False))
def test_cycles_are_found_exactly_when_networkx_finds_one(graph: TaskGraph) -> None:
    oracle = to_networkx(graph)
    cycle = graph.find_cycle()
    if nx.is_directed_acyclic_graph(oracle):
        assert cycle is None
        graph.topological_order()  # does not raise
        return
    assert cycle is not None, f"networkx finds {nx.find_cycle(oracle)}, find_cycle found none"
    assert len(cycle) >= 2 and cycle[0] == cycle[-1]
    assert len(set(cycle[:-1])) == len(cycle) - 1, f"not a simple cycle: {cycle}"
    assert all(oracle.has_edge(u, v) for u, v in itertools.pairwise(cycle)), cycle
    with pytest.raises(CycleError) as err:
        graph.topological_order()
    assert err.value.cycle[0] == err.value.cycle[-1]
    assert " -> ".join(err.value.cycle) in str(err.value)


@settings(max_examples=150, deadline=None)
@given(task_graphs(acyclic=False))
def test_ancestors_and_descendants_match_networkx(graph: TaskGraph) -> None:
    oracle = to_networkx(graph)
    for task_id in graph:
        # networkx never counts a node as its own ancestor; ours does when it lies on a cycle
        on_cycle = any(nx.has_path(oracle, after, task_id) for after in oracle.successors(task_id))
        own = {task_id} if on_cycle else set()
        assert graph.descendants(task_id) == nx.descendants(oracle, task_id) | own
        assert graph.ancestors(task_id) == nx.ancestors(oracle, task_id) | own


@settings(max_examples=150, deadline=None)
@given(task_graphs(acyclic=True))
def test_critical_path_is_networkx_longest_path(graph: TaskGraph) -> None:
    analysis = analyze(graph)
    if not len(graph):
        assert analysis.makespan == 0 and analysis.critical_path == []
        return
    split = split_nodes(graph)
    makespan = float(nx.dag_longest_path_length(split, weight="weight"))
    assert analysis.makespan == makespan
    on_a_longest_path = set()
    for task_id, timing in analysis.timings.items():
        into = longest_into(split, (task_id, "in"))
        out = longest_from(split, (task_id, "in"))
        assert timing.earliest_start == into
        assert timing.remaining == out
        assert timing.slack == makespan - into - out
        if into + out == makespan:
            on_a_longest_path.add(task_id)
    assert set(analysis.critical_tasks) == on_a_longest_path
    path = analysis.critical_path
    assert path, "a non-empty graph has a critical path"
    assert not graph.upstream(path[0]) and not graph.downstream(path[-1])
    assert all(v in graph.downstream(u) for u, v in itertools.pairwise(path))
    assert sum(graph.nodes[t].duration for t in path) == makespan


# -- critical path with release times -----------------------------------------------------------------
def test_critical_path_respects_not_before() -> None:
    graph = TaskGraph.from_edges("w", {"prep": 600, "train": 3600, "side": 1800}, [("prep", "train")])
    graph.nodes["train"].not_before = 7200  # its window opens 2 h after the run started
    result = analyze(graph)
    train, prep = result.timings["train"], result.timings["prep"]
    assert train.earliest_start == 7200 and train.earliest_finish == 10800
    assert result.makespan == 10800
    assert train.critical and not prep.critical
    assert prep.slack == 7200 - 600  # prep may start as late as the window needs it
    assert result.critical_path == ["train"]  # starts at its window, not after prep
    assert train.remaining == 3600  # priority weights do not move with the window
    graph.nodes["train"].not_before = 0
    assert analyze(graph).critical_path == ["prep", "train"]
