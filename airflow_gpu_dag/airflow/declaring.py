"""The DAG a task is being declared in, as Airflow will attach it: ``kwargs["dag"]``, else the
``with DAG(...)`` block around the constructor call; and what Airflow fills from ``default_args``."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from airflow.sdk.bases.operator import get_merged_defaults
from airflow.sdk.definitions._internal.contextmanager import DagContext, TaskGroupContext

__all__ = ["declaring_dag", "declaring_group", "partial_default"]


def declaring_dag(kwargs: Mapping[str, Any]) -> Any:
    """The DAG of an operator's constructor ``kwargs``: ``kwargs["dag"]``, else the current DAG
    context; None outside any (or when Airflow's context cannot be read)."""
    dag = kwargs.get("dag")
    if dag is None:
        with suppress(Exception):
            dag = DagContext.get_current()
    return dag


def declaring_group(kwargs: Mapping[str, Any], dag: Any) -> Any:
    """The task group of an operator's constructor ``kwargs`` in ``dag``: ``kwargs["task_group"]``, else
    the current task-group context (the DAG's root group outside any); None without a DAG."""
    return kwargs.get("task_group") or (TaskGroupContext.get_current(dag) if dag is not None else None)


def partial_default(kwargs: Mapping[str, Any], key: str) -> Any:
    """``kwargs[key]`` of a ``.partial()`` (or an operator's ``**kwargs``), else what Airflow fills from
    ``default_args`` (the task's, its task group's, its DAG's): it fills only keys not given, and the
    GPU operators give ``executor_config`` (the GPU hints), so a task lost the DAG's ``pod_override``."""
    if key in kwargs:
        return kwargs[key]
    dag = declaring_dag(kwargs)
    defaults, _ = get_merged_defaults(dag, declaring_group(kwargs, dag), None, kwargs.get("default_args"))
    return defaults.get(key)
