"""Wait in the triggerer until a GPU-hour budget allows the next GPU task again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

import airflow_gpu_dag.budget.check as budget_check
from airflow_gpu_dag.core.model.budget import BudgetCap

__all__ = ["BudgetTrigger"]

#: Shortest wait between two checks (the dataset and checkpoint triggers wait at least 0.1 s too): a
#: ``poke_interval`` of 0 or less must not re-read the ledger in a tight loop in the shared triggerer.
MIN_POKE_INTERVAL = 0.1


class BudgetTrigger(BaseTrigger):
    """Re-check usage and open claims (budget ledger) against the cap (with Variable overrides)
    every ``poke_interval`` seconds; fire ``{"status": "allowed", "reason"}`` once a request of
    ``request_gpu_seconds`` fits (cap raised, period reset, claims settled). It only reads: the
    resumed gate claims atomically and defers again if another gate took the room first. It has no
    deadline: a budget stop is a pause, not a failure."""

    def __init__(
        self,
        dag_id: str,
        run_id: str,
        cap: dict[str, Any],
        ledger: str | None,
        poke_interval: float = 30.0,
        request_gpu_seconds: float = 0.0,
    ) -> None:
        super().__init__()
        self.dag_id = dag_id
        self.run_id = run_id
        self.cap = cap
        self.ledger = ledger
        self.poke_interval = float(poke_interval)
        self.request_gpu_seconds = float(request_gpu_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "cap": self.cap,
                "ledger": self.ledger,
                "poke_interval": self.poke_interval,
                "request_gpu_seconds": self.request_gpu_seconds,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        cap = BudgetCap(**self.cap)
        while True:
            try:
                # In a thread of its own: a ledger read can block (the file ledger's lock, a SQL
                # database that does not answer). asgiref's default sync_to_async ran it in the one
                # thread the triggerer's thread-sensitive calls share (ExternalTaskSensor's and
                # human-in-the-loop triggers, other gates), so one slow read held all of those.
                decision = await asyncio.to_thread(
                    budget_check.check_budget,
                    cap,
                    self.dag_id,
                    self.run_id,
                    self.ledger,
                    request_gpu_seconds=self.request_gpu_seconds,
                )
            except Exception as err:
                self.log.warning("budget check failed (%s); retrying", err)
            else:
                if decision.allowed:
                    yield TriggerEvent({"status": "allowed", "reason": decision.reason})
                    return
                self.log.info("GPU budget still reached: %s", decision.reason)
            await asyncio.sleep(max(MIN_POKE_INTERVAL, self.poke_interval))  # 0 or less: no hot loop
