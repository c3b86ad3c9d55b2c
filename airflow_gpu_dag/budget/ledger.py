"""Read GPU usage for budgets from the lease usage ledger (``airflow_gpu_dag.gpu.usage``).

The ledger is the append-only JSON-lines file the lease manager writes when a lease ends. Its
location: ``[gpu_dag] usage_ledger`` (a file), else ``<[gpu_dag] lease_dir>/usage.jsonl``; a gate may
also name the file explicitly. Only finished leases are counted: a task still running is charged
when its lease ends.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow_gpu_dag.core.budget import BudgetUsage
from airflow_gpu_dag.gpu.usage import USAGE_FILE, UsageLedger, gpu_seconds_by_dag_run, gpu_seconds_by_pool_day
from airflow_gpu_dag.settings import conf_get

__all__ = ["BudgetUsage", "read_usage", "usage_ledger_path"]


def usage_ledger_path(explicit: str | os.PathLike[str] | None = None) -> str | None:
    """The ledger file: ``explicit``, ``[gpu_dag] usage_ledger``, or ``[gpu_dag] lease_dir``/usage.jsonl."""
    if explicit:
        return os.fspath(explicit)
    configured = conf_get("usage_ledger", None)
    if configured:
        return configured
    lease_dir = conf_get("lease_dir", None)
    if lease_dir:
        return os.path.join(lease_dir, USAGE_FILE)
    return None


def today(now: float | None = None) -> str:
    """UTC day ``YYYY-MM-DD`` of ``now`` (epoch seconds; default: now)."""
    moment = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    return moment.date().isoformat()


def read_usage(
    ledger: str | os.PathLike[str] | None,
    dag_id: str,
    run_id: str,
    pool: str | None,
    now: float | None = None,
) -> BudgetUsage:
    """Sum the ledger for ``(dag_id, run_id)`` and for ``pool`` on today's UTC day.

    A missing ledger (no lease ended yet) counts as zero usage.
    """
    day = today(now)
    if not ledger or not os.path.exists(ledger):
        return BudgetUsage(0.0, 0.0, day)
    records = UsageLedger(ledger).read()
    by_run = gpu_seconds_by_dag_run(records)
    by_pool_day = gpu_seconds_by_pool_day(records)
    return BudgetUsage(
        run_gpu_seconds=by_run.get((dag_id, run_id), 0.0),
        pool_day_gpu_seconds=by_pool_day.get((pool, day), 0.0) if pool else 0.0,
        day=day,
    )
