"""Typed edges in Airflow primitives the graph view shows: data, control, time, cleanup, resource.

Every helper wires real tasks and labels the edge (``airflow.sdk.Label``) with its kind, which
``airflow_gpu_dag.airflow.graph.build_task_graph`` reads back as the edge kind. See docs/edges.md.
"""

from __future__ import annotations

from airflow_gpu_dag.edges.cleanup import CLEANUP, cleanup
from airflow_gpu_dag.edges.control import CONTROL, branch_edge, exit_code_edge, validation_edge
from airflow_gpu_dag.edges.data import DATA, data_edge, dataset_path
from airflow_gpu_dag.edges.hidden import HiddenDependencyFix, fix_hidden_dependencies
from airflow_gpu_dag.edges.resource import data_affinity, exclusive, pin_to_queue, share
from airflow_gpu_dag.edges.timing import TIME, stage_dependency, start_window

__all__ = [
    "CLEANUP",
    "CONTROL",
    "DATA",
    "TIME",
    "HiddenDependencyFix",
    "branch_edge",
    "cleanup",
    "data_affinity",
    "data_edge",
    "dataset_path",
    "exclusive",
    "exit_code_edge",
    "fix_hidden_dependencies",
    "pin_to_queue",
    "share",
    "stage_dependency",
    "start_window",
    "validation_edge",
]
