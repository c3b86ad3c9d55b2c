"""Shared helpers of the tests under ``tests/unit/authoring/``."""

from __future__ import annotations

from airflow.sdk import DAG, task

from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.operators.gpu import GpuBashOperator


def edge_kinds(dag: DAG) -> dict[tuple[str, str], str | None]:
    """Every edge of ``dag`` with its kind (the edge label the helpers set)."""
    graph, _ = build_task_graph(dag)
    return {(u, d): graph._down[u][d] for u in graph._down for d in graph._down[u]}


def edges(dag: DAG) -> set[tuple[str, str]]:
    """Every edge of ``dag`` as Airflow holds it (upstream, downstream task id)."""
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}


def gpu_tasks_dag(dag_id: str) -> tuple[DAG, GpuBashOperator, object]:
    """A DAG with two unconnected GPU tasks: ``train_a`` (a GpuBashOperator, 1 GPU of 40 GiB) and
    ``train_b`` (``@task.gpu``, 2 GPUs); the DAG, the operator and the decorated task's output."""
    with DAG(dag_id, schedule=None) as dag:
        bash = GpuBashOperator(
            task_id="train_a", bash_command="true", gpus=1, gpu_memory="40GiB", duration="1h"
        )

        @task.gpu(gpus=2, duration="1h")
        def train_b() -> None:
            pass

        decorated = train_b()
    return dag, bash, decorated
