"""The pure planning core: graph model, critical path, validation, admission policy, simulator.

Nothing under ``airflow_gpu_dag.core`` imports Airflow or Kubernetes (a test enforces it).
"""

from airflow_gpu_dag.core.analysis.critical_path import CriticalPathAnalysis, TaskTiming, analyze
from airflow_gpu_dag.core.analysis.validation import (
    Finding,
    GraphValidationError,
    ValidationPolicy,
    validate_graph,
)
from airflow_gpu_dag.core.model.graph import CycleError, TaskGraph, TaskNode
from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest, parse_duration, parse_memory_mib

__all__ = [
    "CriticalPathAnalysis",
    "CycleError",
    "EstimateError",
    "Finding",
    "GpuRequest",
    "GraphValidationError",
    "TaskGraph",
    "TaskNode",
    "TaskTiming",
    "ValidationPolicy",
    "analyze",
    "parse_duration",
    "parse_memory_mib",
    "validate_graph",
]
