"""Small task graphs for the planning-core tests."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_gpu_dag.core.graph import TaskGraph


def gpu_graph(
    tasks: Mapping[str, tuple[float, int]], edges: list[tuple[str, str]], dag_id: str = "g"
) -> TaskGraph:
    """``tasks``: task id -> (duration, GPUs); a task with GPUs holds that many slots of pool ``gpu``."""
    graph = TaskGraph(dag_id)
    for task_id, (duration, gpus) in tasks.items():
        node = graph.add(task_id, duration, gpus)
        node.pool = "gpu" if gpus else None
    for up, down in edges:
        graph.add_edge(up, down)
    return graph
