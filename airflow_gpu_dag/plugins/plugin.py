"""The Airflow plugin: registers the priority weight strategies (and, later, the UI page)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy


class GpuDagPlugin(AirflowPlugin):
    """Loaded through the ``airflow.plugins`` entry point in every Airflow process."""

    name = "gpu_dag"
    priority_weight_strategies = [CriticalPathPriorityStrategy]
