"""Is the budget available now? The ledger against the caps, with run-time overrides, and the claim.

Raise a cap at run time with an Airflow Variable (a number of GPU-hours):
``gpu_dag_budget.run.<dag_id>`` for the per-run cap, ``gpu_dag_budget.pool_day.<pool>`` for the pool cap.
Used by the budget gate (:class:`airflow_gpu_dag.operators.budget.BudgetGateOperator`), its trigger and
the code that charges tasks (:mod:`airflow_gpu_dag.budget.charge`).
"""

from __future__ import annotations

import logging
import math
import os
from datetime import UTC, datetime

from airflow.sdk import Variable

from airflow_gpu_dag.budget.ledger import BudgetLedger, FileBudgetLedger, today, usage_ledger_path
from airflow_gpu_dag.budget.shared import SqlBudgetLedger, forward_local_usage
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim, BudgetDecision, evaluate
from airflow_gpu_dag.core.model.resources import EstimateError, parse_duration
from airflow_gpu_dag.settings import conf_get

__all__ = [
    "DEFAULT_CLAIM_TTL",
    "VARIABLE_PREFIX",
    "budget_ledger",
    "check_budget",
    "claim_budget",
    "claim_ttl_seconds",
    "effective_cap",
    "forward_host_usage",
    "forward_this_host",
    "pool_variable",
    "run_variable",
    "shared_conn_id",
]

log = logging.getLogger(__name__)

#: Variable prefix for run-time cap overrides.
VARIABLE_PREFIX = "gpu_dag_budget"
#: How long an unsettled claim counts (``[gpu_dag] budget_claim_ttl``).
DEFAULT_CLAIM_TTL = "24h"


def run_variable(dag_id: str) -> str:
    """Variable holding the per-run GPU-hour cap override for ``dag_id``."""
    return f"{VARIABLE_PREFIX}.run.{dag_id}"


def pool_variable(pool: str) -> str:
    """Variable holding the per-day GPU-hour cap override for ``pool``."""
    return f"{VARIABLE_PREFIX}.pool_day.{pool}"


def shared_conn_id() -> str | None:
    """``[gpu_dag] budget_conn_id``: the connection of the shared SQL ledger, or None."""
    value = conf_get("budget_conn_id", None)
    return value.strip() if value and value.strip() else None


def claim_ttl_seconds() -> float:
    """``[gpu_dag] budget_claim_ttl``: how long a claim whose task never reported counts (default 24h)."""
    raw = conf_get("budget_claim_ttl", DEFAULT_CLAIM_TTL) or DEFAULT_CLAIM_TTL
    try:
        ttl = parse_duration(raw)
    except EstimateError as err:
        log.warning("[gpu_dag] budget_claim_ttl %r is invalid (%s); using %s", raw, err, DEFAULT_CLAIM_TTL)
        return parse_duration(DEFAULT_CLAIM_TTL)
    if ttl <= 0:  # claims would expire as they are made: every gate would pass, whatever was claimed
        log.warning("[gpu_dag] budget_claim_ttl %r is not > 0; using %s", raw, DEFAULT_CLAIM_TTL)
        return parse_duration(DEFAULT_CLAIM_TTL)
    return ttl


def budget_ledger(explicit: str | os.PathLike[str] | None = None) -> BudgetLedger:
    """The ledger to use: an explicit ledger file, else the shared SQL ledger of
    ``[gpu_dag] budget_conn_id``, else this host's file ledger (:func:`usage_ledger_path`)."""
    if not explicit:
        conn_id = shared_conn_id()
        if conn_id:
            return SqlBudgetLedger.from_conn_id(conn_id)
    return FileBudgetLedger(usage_ledger_path(explicit))


def _variable_float(key: str) -> float | None:
    try:
        raw = Variable.get(key, default=None)
    except Exception as err:  # no Variable backend reachable, access denied: say so, the cap stays
        log.warning(
            "budget: could not read Variable %s (%s: %s); the DAG's cap applies (a 0 set there to pause "
            "gated tasks is not seen). Fix: check the Variable backend.",
            key,
            type(err).__name__,
            err,
        )
        return None
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not value >= 0:  # not a number, or negative: the DAG's cap stays (0 pauses gated tasks on purpose)
        log.warning(
            "budget: Variable %s = %r is not a number of GPU-hours >= 0; it is ignored (the DAG's cap "
            "applies). Fix: set it to a number, e.g. 300.",
            key,
            raw,
        )
        return None
    return value


def effective_cap(cap: BudgetCap, dag_id: str) -> BudgetCap:
    """``cap`` with run-time Variable overrides applied (blocking: triggers call it via asyncio.to_thread)."""
    run = cap.gpu_hours_per_run
    day = cap.gpu_hours_per_pool_day
    if run is not None:
        override = _variable_float(run_variable(dag_id))
        run = override if override is not None else run
    if day is not None and cap.pool:
        override = _variable_float(pool_variable(cap.pool))
        day = override if override is not None else day
    return BudgetCap(run, day, cap.pool)


def forward_host_usage(ledger: BudgetLedger) -> None:
    """Shared ledger: first send this host's finished leases (see ``budget.shared``)."""
    if isinstance(ledger, SqlBudgetLedger):
        try:
            forward_local_usage(ledger, usage_ledger_path())
        except Exception:
            log.exception("budget: could not forward this host's usage to %r", ledger)


def check_budget(
    cap: BudgetCap,
    dag_id: str,
    run_id: str,
    ledger: str | os.PathLike[str] | BudgetLedger | None,
    now: float | None = None,
    request_gpu_seconds: float = 0.0,
) -> BudgetDecision:
    """Read the ledger and Variables, then :func:`~airflow_gpu_dag.core.model.budget.evaluate` (no claim)."""
    book = (
        ledger if ledger is not None and not isinstance(ledger, (str, os.PathLike)) else budget_ledger(ledger)
    )
    usage = book.usage(dag_id, run_id, cap.pool, now)
    return evaluate(effective_cap(cap, dag_id), usage, request_gpu_seconds)


def claim_budget(
    cap: BudgetCap,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    gpu_seconds: float,
    ledger: str | os.PathLike[str] | BudgetLedger | None,
    now: float | None = None,
) -> BudgetDecision:
    """Check and claim ``gpu_seconds`` for the gated task ``task_id`` in one atomic step."""
    book = (
        ledger if ledger is not None and not isinstance(ledger, (str, os.PathLike)) else budget_ledger(ledger)
    )
    forward_host_usage(book)
    moment = now if now is not None else datetime.now(UTC).timestamp()
    cap_now = effective_cap(cap, dag_id)
    claim = BudgetClaim(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        gpu_seconds=gpu_seconds,
        pool=cap.pool,
        day=today(moment),
        created=moment,
        expires=moment + claim_ttl_seconds(),
        map_index=map_index,
    )
    return book.claim(cap_now, claim, moment)


def forward_this_host() -> None:
    """With a shared ledger (``[gpu_dag] budget_conn_id``), send this host's finished leases to it;
    nothing otherwise. Never raises (called by the GPU operators when a lease ends)."""
    if not shared_conn_id():
        return
    try:
        forward_host_usage(budget_ledger())
    except Exception:
        log.exception("budget: could not forward this host's usage to the shared ledger")
