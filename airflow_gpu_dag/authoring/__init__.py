"""Authoring helpers: what a DAG file calls to declare typed edges and node constraints.

Every helper wires real Airflow tasks (sensors, gates, branches, labels) that the graph view shows,
and labels the edge (``airflow.sdk.Label``) with its kind, which
:func:`airflow_gpu_dag.airflow.dag_reader.build_task_graph` reads back as the edge kind. See docs/edges.md
and docs/fallback.md.

* typed edges: :func:`data_edge`, :func:`exit_code_edge`, :func:`validation_edge`, :func:`branch_edge`,
  :func:`stage_dependency`, :func:`cleanup`, :func:`exclusive`, :func:`share`,
  :func:`fix_hidden_dependencies`;
* node constraints: :func:`start_window`, :func:`data_affinity` / :func:`pin_to_queue`,
  :func:`budget_gate`, :func:`failure_policy`, :func:`fallback_ladder`.

::

    from airflow_gpu_dag.authoring import data_edge, fallback_ladder, Rung, budget_gate
"""

from __future__ import annotations

from airflow_gpu_dag.authoring.budget import budget_gate
from airflow_gpu_dag.authoring.cleanup import CLEANUP, cleanup
from airflow_gpu_dag.authoring.control import CONTROL, branch_edge, exit_code_edge, validation_edge
from airflow_gpu_dag.authoring.data import DATA, data_edge, dataset_path
from airflow_gpu_dag.authoring.failure_policy import Abort, Retry, Skip, failure_policy
from airflow_gpu_dag.authoring.fallback import FallbackError, FallbackLadder, Rung, fallback_ladder
from airflow_gpu_dag.authoring.hidden import HiddenDependencyFix, fix_hidden_dependencies
from airflow_gpu_dag.authoring.resource import data_affinity, exclusive, pin_to_queue, share
from airflow_gpu_dag.authoring.timing import TIME, stage_dependency, start_window

__all__ = [
    "CLEANUP",
    "CONTROL",
    "DATA",
    "TIME",
    "Abort",
    "FallbackError",
    "FallbackLadder",
    "HiddenDependencyFix",
    "Retry",
    "Rung",
    "Skip",
    "branch_edge",
    "budget_gate",
    "cleanup",
    "data_affinity",
    "data_edge",
    "dataset_path",
    "exclusive",
    "exit_code_edge",
    "failure_policy",
    "fallback_ladder",
    "fix_hidden_dependencies",
    "pin_to_queue",
    "share",
    "stage_dependency",
    "start_window",
    "validation_edge",
]
