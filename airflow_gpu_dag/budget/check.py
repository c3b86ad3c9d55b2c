"""Is the budget available now? The usage ledger against the caps, with run-time overrides.

Raise a cap at run time with an Airflow Variable (a number of GPU-hours):
``gpu_dag_budget.run.<dag_id>`` for the per-run cap, ``gpu_dag_budget.pool_day.<pool>`` for the pool cap.
Used by the budget gate (:class:`airflow_gpu_dag.operators.budget.BudgetGateOperator`) and its trigger.
"""

from __future__ import annotations

from airflow_gpu_dag.budget.ledger import read_usage
from airflow_gpu_dag.core.budget import BudgetCap, BudgetDecision, evaluate

__all__ = ["VARIABLE_PREFIX", "check_budget", "effective_cap", "pool_variable", "run_variable"]

#: Variable prefix for run-time cap overrides.
VARIABLE_PREFIX = "gpu_dag_budget"


def run_variable(dag_id: str) -> str:
    """Variable holding the per-run GPU-hour cap override for ``dag_id``."""
    return f"{VARIABLE_PREFIX}.run.{dag_id}"


def pool_variable(pool: str) -> str:
    """Variable holding the per-day GPU-hour cap override for ``pool``."""
    return f"{VARIABLE_PREFIX}.pool_day.{pool}"


def _variable_float(key: str) -> float | None:
    try:
        from airflow.sdk import Variable

        raw = Variable.get(key, default=None)
    except Exception:  # no Variable backend reachable (unit tests)
        return None
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def effective_cap(cap: BudgetCap, dag_id: str) -> BudgetCap:
    """``cap`` with run-time Variable overrides applied (blocking; call via sync_to_async in triggers)."""
    run = cap.gpu_hours_per_run
    day = cap.gpu_hours_per_pool_day
    if run is not None:
        override = _variable_float(run_variable(dag_id))
        run = override if override is not None else run
    if day is not None and cap.pool:
        override = _variable_float(pool_variable(cap.pool))
        day = override if override is not None else day
    return BudgetCap(run, day, cap.pool)


def check_budget(
    cap: BudgetCap, dag_id: str, run_id: str, ledger: str | None, now: float | None = None
) -> BudgetDecision:
    """Read the ledger and Variables, then :func:`evaluate`."""
    usage = read_usage(ledger, dag_id, run_id, cap.pool, now)
    return evaluate(effective_cap(cap, dag_id), usage)
