"""networkx as the oracle of the graph algorithms of ``core``: on random graphs (hypothesis), what
:class:`~airflow_gpu_dag.core.model.graph.TaskGraph` and
:func:`~airflow_gpu_dag.core.analysis.critical_path.analyze`
compute must agree with networkx's own algorithms.

- topological order: a permutation of the tasks in which every edge points forward;
- cycles: ``find_cycle`` finds one exactly when networkx says the graph is not a DAG, and the one it
  returns is a real cycle (consecutive tasks joined by edges, first task repeated at the end);
- ancestors and descendants: equal to ``nx.ancestors`` / ``nx.descendants``, also on cyclic graphs;
- critical path: the makespan is networkx's longest path (node durations put on split-node edges), each
  task's earliest start and remaining length are the longest paths into and out of it, slack zero
  marks exactly the tasks on a longest path, and the returned path is one of them.

networkx is a test dependency only (``[test]`` extra); docs/dependencies.md says why the package keeps
its own implementations.
"""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.graph import CycleError, TaskGraph

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
