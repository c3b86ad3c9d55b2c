"""The DAG a task is being declared in, as Airflow will attach it: ``kwargs["dag"]``, else the
``with DAG(...)`` block around the constructor call."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any

__all__ = ["declaring_dag"]


def declaring_dag(kwargs: Mapping[str, Any]) -> Any:
    """The DAG of an operator's constructor ``kwargs``: ``kwargs["dag"]``, else the current DAG
    context; None outside any (or when Airflow's context cannot be read)."""
    dag = kwargs.get("dag")
    if dag is None:
        with suppress(Exception):
            from airflow.sdk.definitions._internal.contextmanager import DagContext

            dag = DagContext.get_current()
    return dag
