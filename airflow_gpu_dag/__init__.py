"""airflow-gpu-dag: an Apache Airflow 3 provider for dependency-graph-driven GPU scheduling."""

from __future__ import annotations

from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.version import __version__

#: ``weight_rule`` value for critical-path priority.
CRITICAL_PATH_WEIGHT_RULE = "airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy"
#: ``weight_rule`` value for the planned priority that packs the GPU pools (docs/priority.md).
PACKING_WEIGHT_RULE = "airflow_gpu_dag.priority_strategy.PackingPriorityStrategy"

__all__ = ["CRITICAL_PATH_WEIGHT_RULE", "PACKING_WEIGHT_RULE", "__version__", "gpu_hints"]
