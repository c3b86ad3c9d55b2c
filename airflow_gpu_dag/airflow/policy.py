"""Cluster policy (``airflow.policy`` entry point): validate GPU DAGs when they are parsed.

Only DAGs that use this provider (a task with ``gpu_dag`` hints or one of our weight rules) are
checked. Errors (malformed estimates, impossible GPU requests, unknown pools when
``[gpu_dag] pools`` is set) raise ``AirflowClusterPolicyViolation``, which Airflow shows as the
DAG's import error with the task and the fix; warnings are logged.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.policies import hookimpl

from airflow_gpu_dag.airflow.graph import build_task_graph
from airflow_gpu_dag.core.validation import ValidationPolicy, ValidationReport, validate_graph
from airflow_gpu_dag.hints import HINTS_KEY
from airflow_gpu_dag.settings import max_gpus_per_host, pool_capacities

log = logging.getLogger(__name__)


def uses_provider(dag: Any) -> bool:
    """True when any task carries our hints or weight rule."""
    for task in dag.task_dict.values():
        config = getattr(task, "executor_config", None)
        if isinstance(config, dict) and HINTS_KEY in config:
            return True
        rule = getattr(task, "weight_rule", None)
        if "airflow_gpu_dag" in str(getattr(rule, "__module__", "")) or "airflow_gpu_dag" in str(rule):
            return True
    return False


def validate_dag(dag: Any) -> ValidationReport:
    """Validate an Airflow DAG with the settings in ``[gpu_dag]`` (pools, largest host) and the
    configured GPU inventory (NVML on this host or ``[gpu_dag] inventory``, when there is one)."""
    graph, findings = build_task_graph(dag)
    policy = ValidationPolicy(
        pool_slots=pool_capacities(), max_gpus_per_host=max_gpus_per_host(), inventory=_inventory()
    )
    return validate_graph(graph, policy, extra=findings)


def _inventory() -> Any:
    """The parse-time GPU inventory (None when there is none or its configuration is invalid)."""
    from airflow_gpu_dag.gpu.inventory import InventoryError, parse_time_inventory_summary

    try:
        return parse_time_inventory_summary()
    except InventoryError as err:
        log.warning("airflow-gpu-dag: the GPU inventory configuration is invalid (%s); not checked", err)
        return None


@hookimpl
def dag_policy(dag: Any) -> None:
    if not uses_provider(dag):
        return
    report = validate_dag(dag)
    for warning in report.warnings:
        log.warning("%s", warning)
    if report.errors:
        from airflow.exceptions import AirflowClusterPolicyViolation

        raise AirflowClusterPolicyViolation("\n".join(str(f) for f in report.errors))
