"""Mapped tasks as the N task instances they become: expand one node into ``task_id[0]`` ...

Pure: no Airflow. A mapped task (``.expand()``) runs as N task instances. The plan, the predicted
schedule and the controller's lookahead must see N tasks competing for the pool, not one. The adapter
(:mod:`airflow_gpu_dag.airflow.mapped`) says which tasks are mapped and how many instances each has;
:func:`expand_mapped` rewrites the graph:

* node ``t`` with N instances becomes ``t[0]`` ... ``t[N-1]``, each a copy of ``t`` with
  ``attrs["map_of"] = "t"`` and ``attrs["map_index"] = i``;
* an edge ``u -> t`` becomes ``u -> t[i]`` for every i (fan-out), ``t -> d`` becomes ``t[i] -> d``
  (fan-in); between two expanded tasks every pair is joined, except pairs listed in ``index_wise``
  with the same N (tasks of one mapped task group: instance i waits for instance i only);
* a task whose N is unknown keeps one node with its own id (and ``attrs["mapped"] = True``); one
  with N = 0 keeps one node taking no time, so the order around it stays.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping
from dataclasses import replace

from airflow_gpu_dag.core.model.graph import TaskGraph

__all__ = ["expand_mapped", "expanded_id", "node_for", "task_of", "typical_map_count", "weights_by_task"]


def typical_map_count(counts: Collection[int]) -> int | None:
    """The number of instances to plan a mapped task with from its last runs' counts: the median,
    rounded up (the planner and the controller's lookahead must expand it the same way); None
    without counts."""
    if not counts:
        return None
    return math.ceil(statistics.median(counts))


def expanded_id(task_id: str, index: int) -> str:
    """The node id of instance ``index`` of mapped task ``task_id``: ``"train[3]"``."""
    return f"{task_id}[{index}]"


def task_of(graph: TaskGraph, node_id: str) -> str:
    """The Airflow task id behind a node (its ``map_of`` for an expanded instance)."""
    node = graph.nodes[node_id]
    return str(node.attrs.get("map_of") or node.task_id)


def node_for(graph: TaskGraph, task_id: str, map_index: int = -1) -> str | None:
    """The node of a task instance in a (possibly expanded) graph: ``task_id[map_index]`` when the
    task was expanded and has that instance, else ``task_id`` when it is a node, else None."""
    if map_index >= 0:
        instance = expanded_id(task_id, map_index)
        if instance in graph.nodes:
            return instance
    return task_id if task_id in graph.nodes else None


def weights_by_task(graph: TaskGraph, weights: Mapping[str, int]) -> dict[str, int]:
    """Per-node weights folded back to Airflow task ids: an expanded task gets the largest weight of
    its instances (for a weight rule that must give every instance of a task one number)."""
    folded: dict[str, int] = {}
    for node_id, weight in weights.items():
        task_id = task_of(graph, node_id) if node_id in graph.nodes else node_id
        folded[task_id] = max(weight, folded.get(task_id, weight))
    return folded


def expand_mapped(
    graph: TaskGraph,
    counts: Mapping[str, int | None],
    index_wise: Collection[tuple[str, str]] = (),
    sources: Mapping[str, str] | None = None,
) -> TaskGraph:
    """A copy of ``graph`` with every task of ``counts`` that has a known count (>= 1) expanded.

    :param counts: mapped task id -> number of instances (None: unknown, the task stays one node).
    :param index_wise: ``(upstream, downstream)`` pairs of mapped tasks joined instance by instance.
    :param sources: mapped task id -> where its count came from (kept in ``attrs["map_source"]``).
    :raises ValueError: a count below 0.
    """
    sources = sources or {}
    ids: dict[str, list[str]] = {}
    copy = TaskGraph(graph.dag_id, priority_rule=graph.priority_rule)
    for task_id, node in graph.nodes.items():
        if task_id not in counts:
            ids[task_id] = [task_id]
            copy.add_task(node)
            continue
        count = counts[task_id]
        if count is not None and count < 0:
            raise ValueError(f"DAG {graph.dag_id!r}: mapped task {task_id!r} has a negative count {count}")
        attrs = {**node.attrs, "mapped": True}
        if task_id in sources:
            attrs["map_source"] = sources[task_id]
        if count is None:
            ids[task_id] = [task_id]
            copy.add_task(replace(node, attrs=attrs))
            continue
        attrs["map_count"] = count
        if count == 0:  # no instance runs (Airflow skips it): one node taking no time and no slots
            ids[task_id] = [task_id]  # keeps the order
            attrs.setdefault("declared_duration", node.duration)  # what it declares, for the tables
            copy.add_task(replace(node, duration=0.0, gpu=None, pool=None, pool_slots=0, attrs=attrs))
            continue
        ids[task_id] = []
        for index in range(count):
            instance = expanded_id(task_id, index)
            ids[task_id].append(instance)
            copy.add_task(
                replace(node, task_id=instance, attrs={**attrs, "map_of": task_id, "map_index": index})
            )
    pairs = set(index_wise)
    for up, down, kind in graph.edges():
        ups, downs = ids[up], ids[down]
        if (up, down) in pairs and len(ups) == len(downs) and up in counts and down in counts:
            for a, b in zip(ups, downs, strict=True):
                copy.add_edge(a, b, kind)
            continue
        for a in ups:
            for b in downs:
                copy.add_edge(a, b, kind)
    return copy
