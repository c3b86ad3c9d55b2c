"""The budget gate operator: defers while a GPU-hour cap is reached (see docs/edges.md, budgets).

Added before a GPU task by :func:`airflow_gpu_dag.authoring.budget_gate`. When the run's or the
pool's usage (from the lease usage ledger) has reached the cap, the gate *defers*: it holds no worker
slot and no GPU, the task shows ``deferred`` in the UI with the reason in its log, and the GPU task
does not start. The triggerer re-checks every ``poke_interval`` seconds and lets the gate finish once
the cap is raised or the UTC day rolls over (pool caps). Nothing fails silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_gpu_dag.budget.check import check_budget, pool_variable, run_variable
from airflow_gpu_dag.budget.ledger import usage_ledger_path
from airflow_gpu_dag.core.budget import BudgetCap
from airflow_gpu_dag.hints import control_task_hints
from airflow_gpu_dag.sensors._common import resume_race_retry
from airflow_gpu_dag.triggers.budget import BudgetTrigger

__all__ = ["BudgetGateOperator"]


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
