"""TaskFlow decorators of the airflow-gpu-dag provider (``@task.gpu``)."""

from __future__ import annotations

from airflow_gpu_dag.decorators.gpu import gpu_task

__all__ = ["gpu_task"]
