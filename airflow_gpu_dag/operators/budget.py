"""The budget gate operator: defers while a GPU-hour cap is reached (see docs/edges.md, budgets).

Added before a GPU task by :func:`airflow_gpu_dag.authoring.budget_gate`. The gate *claims* the
GPU-seconds its task is expected to use (GPUs x duration estimate) in the budget ledger, checking the
caps and writing the claim in one atomic step: when the run's or the pool's usage plus the open
claims leave no room for it, the gate *defers*: it holds no worker slot and no GPU, the task shows
``deferred`` in the UI with the reason in its log, and the GPU task does not start. The triggerer
re-checks every ``poke_interval`` seconds; when the request fits again (cap raised, day rolled over,
a claim settled lower than claimed) the gate resumes and claims again, so two gates that both saw
room cannot both pass unless both fit. The gated task settles the claim when it ends
(:class:`~airflow_gpu_dag.budget.charge.SettleBudgetClaim`). Nothing fails silently.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_gpu_dag.budget.check import claim_budget, pool_variable, run_variable
from airflow_gpu_dag.core.model.budget import BudgetCap
from airflow_gpu_dag.core.model.resources import real_number
from airflow_gpu_dag.deferral import is_deferrable, resume_race_retry
from airflow_gpu_dag.executor_config import control_task_hints
from airflow_gpu_dag.triggers.budget import MIN_POKE_INTERVAL, BudgetTrigger

__all__ = ["BudgetGateOperator"]


def _number(value: object, what: str, where: str, *, zero_ok: bool) -> float:
    """``value`` as a finite float >= 0 (> 0 unless ``zero_ok``), else a ValueError naming the task.

    A NaN claim made every later comparison with the pool's claimed total False, so every gate of the
    pool passed; a negative one gave the other gates room that was not there; a poke_interval of
    0 or less re-read the ledger in a tight loop, an infinite one never re-checked."""
    number = real_number(value)
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ValueError(
            f"{where}: {what}={value!r} is not a finite number of seconds {bound}. Fix: pass e.g. "
            f"{what}={3600 if zero_ok else 30}."
        )
    return number


class BudgetGateOperator(BaseOperator):
    """Succeeds when the GPU-hour budget has room for the gated task (and claims it); otherwise
    defers until it does.

    :param gpu_hours_per_run: cap for one DAG run (all its GPU tasks); > 0.
    :param gpu_hours_per_pool_day: cap for ``pool`` per UTC day (all DAGs); > 0.
    :param pool_to_cap: the GPU pool the per-day cap applies to.
    :param ledger: a usage ledger file; default: the shared ledger of ``[gpu_dag] budget_conn_id``,
        else ``[gpu_dag] usage_ledger`` / ``lease_dir``.
    :param poke_interval: seconds between re-checks in the triggerer; > 0.
    :param gated_task_id: the task the gate lets through (its claim is keyed by it); default: the
        gate's own id.
    :param claim_gpu_seconds: what the gated task is expected to use (0: only check the caps); >= 0.
    :param deferrable: wait in the triggerer (no worker slot held); default ``[operators]
        default_deferrable`` (False unless set: deferring needs ``airflow triggerer``). Not deferring,
        the gate checks again every ``poke_interval`` from its worker.
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
        gated_task_id: str | None = None,
        claim_gpu_seconds: float = 0.0,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["executor_config"] = control_task_hints(kwargs.get("executor_config"))
        super().__init__(**resume_race_retry(kwargs))
        where = f"DAG {self.dag_id!r}, task {self.task_id!r}" if self.has_dag() else f"task {self.task_id!r}"
        self.cap, self.claim_gpu_seconds, self.poke_interval = self.checked_arguments(
            where, gpu_hours_per_run, gpu_hours_per_pool_day, pool_to_cap, claim_gpu_seconds, poke_interval
        )
        self.ledger = ledger
        self.gated_task_id = gated_task_id or self.task_id
        self.deferrable = is_deferrable(deferrable)

    @staticmethod
    def checked_arguments(
        where: str,
        gpu_hours_per_run: object,
        gpu_hours_per_pool_day: object,
        pool_to_cap: str | None,
        claim_gpu_seconds: object,
        poke_interval: object,
    ) -> tuple[BudgetCap, float, float]:
        """``(cap, claim_gpu_seconds, poke_interval)`` checked as the constructor checks them, so that
        :func:`~airflow_gpu_dag.authoring.budget.budget_gate` can refuse them before it adds anything.

        :raises ValueError: naming ``where`` and the fix.
        """
        cap = BudgetCap.checked(where, gpu_hours_per_run, gpu_hours_per_pool_day, pool_to_cap)
        claim = _number(claim_gpu_seconds, "claim_gpu_seconds", where, zero_ok=True)
        cap.check_request(claim, where)
        return cap, claim, _number(poke_interval, "poke_interval", where, zero_ok=False)

    def _claim(self, context: Any) -> Any:
        ti = context.get("ti")
        map_index = getattr(ti, "map_index", -1)
        return claim_budget(
            self.cap,
            dag_id=context["dag"].dag_id,
            run_id=context["run_id"],
            task_id=self.gated_task_id,
            map_index=map_index if isinstance(map_index, int) else -1,
            gpu_seconds=self.claim_gpu_seconds,
            ledger=self.ledger,
        )

    def _wait(self, context: Any, reason: str) -> None:
        dag_id = context["dag"].dag_id
        self.log.warning(
            "GPU budget reached: %s. %s until the cap is raised (Variable %s / %s), the day resets or "
            "claims are settled.",
            reason,
            "Deferring (no worker, no GPU held)"
            if self.deferrable
            else f"Checking again every {self.poke_interval:g}s (no GPU held)",
            run_variable(dag_id),
            pool_variable(self.cap.pool)
            if self.cap.pool and self.cap.gpu_hours_per_pool_day is not None
            else "-",
        )
        if not self.deferrable:
            return
        self.defer(
            trigger=BudgetTrigger(
                dag_id=dag_id,
                run_id=context["run_id"],
                cap=self.cap.to_dict(),
                ledger=self.ledger,
                poke_interval=self.poke_interval,
                request_gpu_seconds=self.claim_gpu_seconds,
            ),
            method_name="execute_complete",
        )

    def execute(self, context: Any) -> dict[str, Any]:
        decision = self._claim(context)
        if decision.allowed:
            self.log.info("budget ok, claimed %.3f GPU-h: %s", self.claim_gpu_seconds / 3600, decision.reason)
            return {"allowed": True, "reason": decision.reason, "waited": False}
        return self._until_claimed(context, decision.reason)

    def _until_claimed(self, context: Any, reason: str) -> dict[str, Any]:
        """Wait for room: defer (``defer()`` raises) or, not deferring, check again from this worker
        every ``poke_interval`` (at least the trigger's minimum) until a claim is made."""
        self._wait(context, reason)
        while True:
            time.sleep(max(MIN_POKE_INTERVAL, self.poke_interval))
            decision = self._claim(context)
            if decision.allowed:
                self.log.info("budget available again, claimed %.3f GPU-h", self.claim_gpu_seconds / 3600)
                return {"allowed": True, "reason": decision.reason, "waited": True}

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        decision = self._claim(context)
        if not decision.allowed:  # another gate claimed the room first: wait again, never pass unclaimed
            return self._until_claimed(context, decision.reason)
        reason = (event or {}).get("reason", "") or decision.reason
        self.log.info("budget available again, claimed %.3f GPU-h: %s", self.claim_gpu_seconds / 3600, reason)
        return {"allowed": True, "reason": reason, "waited": True}
