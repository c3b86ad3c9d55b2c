"""Shared helpers of the tests under ``tests/unit/authoring/``."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_gpu_dag.airflow.dag_reader import build_task_graph


def edge_kinds(dag: DAG) -> dict[tuple[str, str], str | None]:
    """Every edge of ``dag`` with its kind (the edge label the helpers set)."""
    graph, _ = build_task_graph(dag)
    return {(u, d): graph._down[u][d] for u in graph._down for d in graph._down[u]}


def edges(dag: DAG) -> set[tuple[str, str]]:
    """Every edge of ``dag`` as Airflow holds it (upstream, downstream task id)."""
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}
