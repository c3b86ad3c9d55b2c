"""Our graph algorithms (``core.model.graph``, ``core.analysis.critical_path``) against networkx's and
the standard library's ``graphlib``, same graphs.

The measurement behind "networkx: why not in the package" in docs/dependencies.md. For layered random
DAGs (1-3 upstream tasks each, like benchmarks/plan_speed.py) it times, best of ``--repeat``:

* build: a ``TaskGraph`` / an ``nx.DiGraph`` from the task list and the edges;
* topological order: ``TaskGraph.topological_order`` / ``list(nx.topological_sort)``;
* cycle check (acyclic graph, so the whole graph is searched): ``find_cycle`` / ``nx.find_cycle``, and
  ``nx.is_directed_acyclic_graph`` (a yes/no without the cycle);
* descendants of the first ``--sample`` tasks (the ones with the most): ``TaskGraph.descendants`` /
  ``nx.descendants``;
* longest path: ``critical_path.analyze`` (ES, LS, slack of every task and one critical path) /
  ``nx.dag_longest_path`` on the split-node graph (the length and one path only), with and without
  converting the ``TaskGraph`` first (the package's model is a ``TaskGraph``: using networkx means
  converting, or keeping both).

Then against ``graphlib.TopologicalSorter`` (the standard library, so it would cost no dependency), the
measurement behind docs/benchmarks.md#graph-algorithms-graphlib:

* topological order: ``TaskGraph.topological_order`` / ``list(TopologicalSorter(...).static_order())``;
* cycle check of an acyclic graph: ``find_cycle`` / ``TopologicalSorter(...).prepare()``;
* cycle found: the same graph with one edge back from its last task to its first, both naming the
  whole cycle (``CycleError``'s ``cycle`` / ``graphlib.CycleError.args[1]``).

    .venv/bin/python benchmarks/graph_algorithms.py [--tasks 1000 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import graphlib
import random
import time
from collections.abc import Callable

import networkx as nx

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.graph import TaskGraph


def layered_dag(tasks: int, seed: int = 7) -> tuple[dict[str, float], list[tuple[str, str]]]:
    """Durations and edges of a layered random DAG (layers of 5-40 tasks, 1-3 upstream edges each)."""
    rng = random.Random(seed)
    durations: dict[str, float] = {}
    edges: list[tuple[str, str]] = []
    previous: list[str] = []
    current: list[str] = []
    for i in range(tasks):
        task_id = f"task_{i}"
        durations[task_id] = float(rng.randint(600, 7200))
        if previous:
            edges += [(up, task_id) for up in rng.sample(previous, min(len(previous), rng.randint(1, 3)))]
        current.append(task_id)
        if len(current) >= rng.randint(5, 40):
            previous, current = current, []
    return durations, edges


def to_networkx(graph: TaskGraph) -> nx.DiGraph:
    digraph = nx.DiGraph()
    digraph.add_nodes_from(graph)
    digraph.add_edges_from((u, v) for u, v, _ in graph.edges())
    return digraph


def split_graph(graph: TaskGraph) -> nx.DiGraph:
    """Node durations as edge weights: ``(t, in) -> (t, out)`` weighs t's duration."""
    split = nx.DiGraph()
    for task_id, node in graph.nodes.items():
        split.add_edge((task_id, 0), (task_id, 1), weight=node.duration)
    split.add_edges_from(((u, 1), (v, 0), {"weight": 0.0}) for u, v, _ in graph.edges())
    return split


def best(repeat: int, func: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def no_cycle(digraph: nx.DiGraph) -> None:
    try:
        nx.find_cycle(digraph)
    except nx.NetworkXNoCycle:
        return
    raise AssertionError("the benchmark graph has a cycle")


def measure(tasks: int, repeat: int, sample: int = 200) -> list[tuple[str, float, float]]:
    durations, edges = layered_dag(tasks)
    graph = TaskGraph.from_edges(f"bench_{tasks}", durations, edges)
    digraph = to_networkx(graph)
    split = split_graph(graph)
    first = list(graph)[:sample]
    assert analyze(graph).makespan == nx.dag_longest_path_length(split, weight="weight")

    def build_nx() -> nx.DiGraph:
        built = nx.DiGraph()
        built.add_nodes_from(durations)
        built.add_edges_from(edges)
        return built

    rows = [
        (
            "build",
            best(repeat, lambda: TaskGraph.from_edges("b", durations, edges)),
            best(repeat, build_nx),
        ),
        (
            "topological order",
            best(repeat, graph.topological_order),
            best(repeat, lambda: list(nx.topological_sort(digraph))),
        ),
        ("cycle check (find_cycle)", best(repeat, graph.find_cycle), best(repeat, lambda: no_cycle(digraph))),
        (
            "cycle check (is_directed_acyclic_graph)",
            best(repeat, graph.find_cycle),
            best(repeat, lambda: nx.is_directed_acyclic_graph(digraph)),
        ),
        (
            f"descendants of {min(sample, tasks)} tasks",
            best(repeat, lambda: [graph.descendants(t) for t in first]),
            best(repeat, lambda: [nx.descendants(digraph, t) for t in first]),
        ),
        (
            "longest path (ours: full CPM)",
            best(repeat, lambda: analyze(graph)),
            best(repeat, lambda: nx.dag_longest_path(split, weight="weight")),
        ),
        (
            "longest path, converting first",
            best(repeat, lambda: analyze(graph)),
            best(repeat, lambda: nx.dag_longest_path(split_graph(graph), weight="weight")),
        ),
    ]
    return rows


def predecessors(graph: TaskGraph) -> dict[str, list[str]]:
    """What ``graphlib`` takes: task -> its upstream tasks (built before the timing: inside the package
    it would be the graph's own upstream mapping)."""
    return {task_id: graph.upstream(task_id) for task_id in graph}


def graphlib_cycle(before: dict[str, list[str]]) -> list[str] | None:
    """The cycle ``graphlib`` finds in the graph of ``before`` (task -> upstream tasks), or None."""
    try:
        graphlib.TopologicalSorter(before).prepare()
    except graphlib.CycleError as err:
        return list(err.args[1])
    return None


def measure_graphlib(tasks: int, repeat: int) -> list[tuple[str, float, float]]:
    """``(operation, ours s, graphlib s)``: topological order, cycle check, cycle found (see above)."""
    durations, edges = layered_dag(tasks)
    graph = TaskGraph.from_edges(f"bench_{tasks}", durations, edges)
    before = predecessors(graph)
    order = list(graphlib.TopologicalSorter(before).static_order())
    position = {task_id: i for i, task_id in enumerate(order)}
    assert sorted(order) == sorted(graph) and all(position[u] < position[v] for u, v, _ in graph.edges())
    cyclic = TaskGraph.from_edges(f"cyclic_{tasks}", durations, [*edges, (order[-1], order[0])])
    cyclic_before = predecessors(cyclic)
    ours_cycle, their_cycle = cyclic.find_cycle(), graphlib_cycle(cyclic_before)
    assert ours_cycle and their_cycle and set(ours_cycle) == set(their_cycle), (ours_cycle, their_cycle)
    return [
        (
            "topological order",
            best(repeat, graph.topological_order),
            best(repeat, lambda: list(graphlib.TopologicalSorter(before).static_order())),
        ),
        (
            "cycle check (acyclic)",
            best(repeat, graph.find_cycle),
            best(repeat, lambda: graphlib_cycle(before)),
        ),
        ("cycle found", best(repeat, cyclic.find_cycle), best(repeat, lambda: graphlib_cycle(cyclic_before))),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sample", type=int, default=200, help="tasks whose descendants are timed")
    args = parser.parse_args(argv)
    print(f"networkx {nx.__version__}; best of {args.repeat}; milliseconds")
    print("| tasks | operation | ours | networkx | networkx / ours |")
    print("|---:|---|---:|---:|---:|")
    for tasks in args.tasks:
        for name, ours, theirs in measure(tasks, args.repeat, args.sample):
            print(f"| {tasks:,} | {name} | {ours * 1000:.2f} | {theirs * 1000:.2f} | {theirs / ours:.1f}x |")
    print()
    print("| tasks | operation | ours | graphlib | graphlib / ours |")
    print("|---:|---|---:|---:|---:|")
    for tasks in args.tasks:
        for name, ours, theirs in measure_graphlib(tasks, args.repeat):
            print(f"| {tasks:,} | {name} | {ours * 1000:.2f} | {theirs * 1000:.2f} | {theirs / ours:.1f}x |")


if __name__ == "__main__":
    main()
