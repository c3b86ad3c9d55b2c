"""Budget gate: a task placed before a GPU task that defers while a GPU-hour cap is reached.

    from airflow_gpu_dag.budget import budget_gate

    budget_gate(train, gpu_hours_per_run=40, gpu_hours_per_pool_day=200, pool="gpu_a100")

inserts ``train__budget`` between ``train`` and its upstream tasks (edge label ``budget``). When the
run's or the pool's usage (from the lease usage ledger) has reached the cap, the gate *defers*: it
holds no worker slot and no GPU, the task shows ``deferred`` in the UI with the reason in its log,
and ``train`` does not start. The triggerer re-checks every ``poke_interval`` seconds and lets the
gate finish once the cap is raised or the UTC day rolls over (pool caps). Nothing fails silently.

Raise a cap at run time with an Airflow Variable (a number of GPU-hours):
``gpu_dag_budget.run.<dag_id>`` for the per-run cap, ``gpu_dag_budget.pool_day.<pool>`` for the pool cap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseOperator

from airflow_gpu_dag.budget.ledger import BudgetUsage, read_usage
from airflow_gpu_dag.edges._wiring import insert_before
from airflow_gpu_dag.hints import control_task_hints
from airflow_gpu_dag.sensors._common import (
    RESUME_RACE_RETRIES,
    RESUME_RACE_RETRY_DELAY,
    resume_race_retry,
)

__all__ = [
    "BudgetCap",
    "BudgetDecision",
    "BudgetGateOperator",
    "budget_gate",
    "evaluate",
    "pool_variable",
    "run_variable",
]

#: Variable prefix for run-time cap overrides.
VARIABLE_PREFIX = "gpu_dag_budget"


def run_variable(dag_id: str) -> str:
    """Variable holding the per-run GPU-hour cap override for ``dag_id``."""
    return f"{VARIABLE_PREFIX}.run.{dag_id}"


def pool_variable(pool: str) -> str:
    """Variable holding the per-day GPU-hour cap override for ``pool``."""
    return f"{VARIABLE_PREFIX}.pool_day.{pool}"


def _check_hours(value: object, what: str, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: {what}={value!r} is not a number of GPU-hours; pass e.g. {what}=40.")
    if value < 0:
        raise ValueError(
            f"{where}: {what}={value!r} is negative; a GPU-hour budget must be >= 0 "
            f"(0 blocks every GPU task), e.g. {what}=40."
        )
    return float(value)


@dataclass(frozen=True)
class BudgetCap:
    """Caps in GPU-hours; None = no cap of that kind. ``pool`` is needed for the per-day cap."""

    gpu_hours_per_run: float | None = None
    gpu_hours_per_pool_day: float | None = None
    pool: str | None = None

    @classmethod
    def checked(
        cls,
        where: str,
        gpu_hours_per_run: object = None,
        gpu_hours_per_pool_day: object = None,
        pool: str | None = None,
    ) -> BudgetCap:
        """Build and validate; ``where`` names the DAG/task in the error message."""
        run = _check_hours(gpu_hours_per_run, "gpu_hours_per_run", where)
        day = _check_hours(gpu_hours_per_pool_day, "gpu_hours_per_pool_day", where)
        if run is None and day is None:
            raise ValueError(f"{where}: a budget gate needs gpu_hours_per_run= or gpu_hours_per_pool_day=.")
        if day is not None and not pool:
            raise ValueError(
                f"{where}: gpu_hours_per_pool_day needs the pool it caps; pass pool='<gpu pool name>'."
            )
        return cls(run, day, pool)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_hours_per_run": self.gpu_hours_per_run,
            "gpu_hours_per_pool_day": self.gpu_hours_per_pool_day,
            "pool": self.pool,
        }


@dataclass(frozen=True)
class BudgetDecision:
    """Whether the next GPU task may start, and why (for the task log and the trigger event)."""

    allowed: bool
    reason: str


def evaluate(cap: BudgetCap, usage: BudgetUsage) -> BudgetDecision:
    """Pure: compare usage with the caps. A cap is reached when usage >= cap."""
    if cap.gpu_hours_per_run is not None and usage.run_gpu_hours >= cap.gpu_hours_per_run:
        return BudgetDecision(
            False,
            f"this DAG run used {usage.run_gpu_hours:.3f} GPU-hours, cap {cap.gpu_hours_per_run:g}",
        )
    if cap.gpu_hours_per_pool_day is not None and usage.pool_day_gpu_hours >= cap.gpu_hours_per_pool_day:
        return BudgetDecision(
            False,
            f"pool {cap.pool!r} used {usage.pool_day_gpu_hours:.3f} GPU-hours on {usage.day}, "
            f"cap {cap.gpu_hours_per_pool_day:g} per day",
        )
    return BudgetDecision(
        True,
        f"within budget (run {usage.run_gpu_hours:.3f} GPU-h, pool {cap.pool!r} "
        f"{usage.pool_day_gpu_hours:.3f} GPU-h on {usage.day})",
    )


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


class BudgetGateOperator(BaseOperator):
    """Succeeds when the GPU-hour budget allows the next GPU task; otherwise defers until it does.

    :param gpu_hours_per_run: cap for one DAG run (all its GPU tasks).
    :param gpu_hours_per_pool_day: cap for ``pool`` per UTC day (all DAGs).
    :param pool_to_cap: the GPU pool the per-day cap applies to.
    :param ledger: the usage ledger file; default ``[gpu_dag] usage_ledger`` / ``lease_dir``.
    :param poke_interval: seconds between re-checks in the triggerer.
    """

    template_fields: Sequence[str] = ("ledger",)
    ui_color = "#f6d6a8"

    def __init__(
        self,
        *,
        gpu_hours_per_run: float | None = None,
        gpu_hours_per_pool_day: float | None = None,
        pool_to_cap: str | None = None,
        ledger: str | None = None,
        poke_interval: float = 30.0,
        **kwargs: Any,
    ) -> None:
        kwargs["executor_config"] = control_task_hints(kwargs.get("executor_config"))
        super().__init__(**resume_race_retry(kwargs))
        self.cap = BudgetCap.checked(
            f"task {self.task_id!r}", gpu_hours_per_run, gpu_hours_per_pool_day, pool_to_cap
        )
        self.ledger = ledger
        self.poke_interval = poke_interval

    def _ledger(self) -> str | None:
        from airflow_gpu_dag.budget.ledger import usage_ledger_path

        return usage_ledger_path(self.ledger)

    def execute(self, context: Any) -> dict[str, Any]:
        dag_id = context["dag"].dag_id
        run_id = context["run_id"]
        ledger = self._ledger()
        decision = check_budget(self.cap, dag_id, run_id, ledger)
        if decision.allowed:
            self.log.info("budget ok: %s", decision.reason)
            return {"allowed": True, "reason": decision.reason, "waited": False}
        self.log.warning(
            "GPU budget reached: %s. Deferring (no worker, no GPU held) until the cap is raised "
            "(Variable %s / %s) or the day resets.",
            decision.reason,
            run_variable(dag_id),
            pool_variable(self.cap.pool) if self.cap.pool else "-",
        )
        from airflow_gpu_dag.triggers.budget import BudgetTrigger

        self.defer(
            trigger=BudgetTrigger(
                dag_id=dag_id,
                run_id=run_id,
                cap=self.cap.to_dict(),
                ledger=ledger,
                poke_interval=self.poke_interval,
            ),
            method_name="execute_complete",
        )
        raise AssertionError("unreachable: defer() raises")  # pragma: no cover

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        reason = (event or {}).get("reason", "")
        self.log.info("budget available again: %s", reason)
        return {"allowed": True, "reason": reason, "waited": True}


def budget_gate(
    task: Any,
    *,
    gpu_hours_per_run: float | None = None,
    gpu_hours_per_pool_day: float | None = None,
    pool: str | None = None,
    ledger: str | None = None,
    poke_interval: float = 30.0,
    task_id: str | None = None,
) -> BudgetGateOperator:
    """Insert a :class:`BudgetGateOperator` before ``task`` (it takes over ``task``'s upstream edges).

    ``pool`` defaults to ``task.pool`` (the GPU pool whose daily usage is capped). The gate itself
    runs in the default pool, so waiting for budget never holds a GPU slot.
    """
    dag = task.dag
    if dag is None:
        raise ValueError(f"task {task.task_id!r}: add it to a DAG before calling budget_gate().")
    gate = BudgetGateOperator(
        task_id=task_id or f"{task.label}__budget",  # label: the id inside its task group
        gpu_hours_per_run=gpu_hours_per_run,
        gpu_hours_per_pool_day=gpu_hours_per_pool_day,
        pool_to_cap=pool or (task.pool if gpu_hours_per_pool_day is not None else None),
        ledger=ledger,
        poke_interval=poke_interval,
        dag=dag,
        task_group=getattr(task, "task_group", None),
        retries=RESUME_RACE_RETRIES,
        retry_delay=RESUME_RACE_RETRY_DELAY,
        execution_timeout=None,
    )
    gate.doc_md = "GPU-hour budget gate: defers while the budget is used up."
    insert_before(task, gate, label="budget")
    return gate
