"""Charge finished GPU work to the budget ledger and close the claim its gate held.

* :class:`SettleBudgetClaim` is a task callback the ``budget_gate`` helper puts on the gated task
  (success, failure, retry, skip). When the task's try ends it forwards this host's lease usage to a
  shared ledger, charges the try if nothing did yet (GPUs x the try's run time; leases and pods
  charge themselves, so a GPU operator or pod that never got its GPUs is charged nothing), and
  closes the gate's claim, so from then on the actual usage counts instead of the estimate. After
  a try that will be retried (``close=False``) it charges the try but keeps the claim: the gate
  does not run again, so the retry runs under the claim it made.
* :func:`charge` records one finished lease, pod or task in the configured ledger, never raising
  (a ledger that cannot be written must not fail the GPU work that already ran).
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime
from typing import Any

from airflow_gpu_dag.budget.check import budget_ledger, forward_host_usage, shared_conn_id
from airflow_gpu_dag.budget.ledger import usage_ledger_path
from airflow_gpu_dag.core.model.budget import claim_id
from airflow_gpu_dag.gpu.usage import UsageRecord

__all__ = ["SettleBudgetClaim", "charge"]

log = logging.getLogger(__name__)


def charge(record: UsageRecord, ledger: str | None = None) -> bool:
    """Record ``record`` in the budget ledger (``ledger`` file, else the configured one); False and a
    logged error when it cannot be written."""
    try:
        book = budget_ledger(ledger)
        book.record(record)
    except Exception:
        log.exception(
            "budget: could not charge %s GPU-s of %s.%s", record.gpu_seconds, record.dag_id, record.task_id
        )
        return False
    log.info(
        "budget: charged %.0f GPU-seconds (%d GPU(s) x %.0f s) of %s.%s to %r",
        record.gpu_seconds,
        len(record.devices),
        record.end - record.start,
        record.dag_id,
        record.task_id,
        book,
    )
    return True


def _timestamp(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    return None


def _rendered(ledger: str | None, context: Any) -> str | None:
    """``ledger`` rendered like the gate's templated ``ledger`` field: a callback's arguments are not
    rendered, and an unrendered ``/budgets/{{ dag.dag_id }}.jsonl`` settled nothing in the file the
    gate claimed in (the claim counted until it expired) and charged a file of that literal name."""
    if not ledger or ("{{" not in ledger and "{%" not in ledger):
        return ledger
    holder = context.get("task") or context.get("dag")  # Airflow's template environment for them
    if holder is None or not hasattr(holder, "get_template_env"):
        return ledger
    return str(holder.get_template_env().from_string(ledger).render(**context))


class SettleBudgetClaim:
    """Task callback (see the module docstring); ``gpus`` and ``pool`` describe the gated task;
    ``close``: close the gate's claim (False on retry: the next try still needs it); ``charged_by``:
    ``"lease"`` or ``"pod"`` when the task charges its GPU time itself (GPU operators, GPU pods).

    A task that charges itself is not charged its run time in a ledger its own records reach: no
    record there means it held no GPU (it failed waiting for its lease, its pod never started), or
    its lease is still to be reclaimed (and charged then)."""

    def __init__(
        self,
        *,
        ledger: str | None,
        gpus: int,
        pool: str | None,
        close: bool = True,
        charged_by: str | None = None,
    ) -> None:
        self.ledger = ledger
        self.gpus = gpus
        self.pool = pool
        self.close = close
        self.charged_by = charged_by

    def __repr__(self) -> str:
        return f"SettleBudgetClaim(gpus={self.gpus}, pool={self.pool!r}, close={self.close})"

    def _charges_itself(self, ledger: str | None = None) -> bool:
        """True when the task's own lease or pod records reach the ledger this callback uses."""
        ledger = self.ledger if ledger is None else ledger
        if self.charged_by is None:
            return False
        if not ledger:
            return True
        # an explicit ledger file: leases are charged to the configured usage ledger, pods to the
        # configured ledger (the shared one when set)
        same_file = os.path.abspath(ledger) == os.path.abspath(usage_ledger_path())
        return same_file and (self.charged_by == "lease" or not shared_conn_id())

    def __call__(self, context: Any) -> None:
        ti = context.get("ti") or context.get("task_instance")
        if ti is None:
            return
        dag_id, run_id, task_id = str(ti.dag_id), str(ti.run_id), str(ti.task_id)
        map_index = ti.map_index if isinstance(getattr(ti, "map_index", None), int) else -1
        try_number = getattr(ti, "try_number", None)
        try:
            ledger = _rendered(self.ledger, context)
            book = budget_ledger(ledger)
            forward_host_usage(book)
            record = None
            if (
                self.gpus
                and not self._charges_itself(ledger)
                and not book.charged(dag_id, run_id, task_id, map_index, try_number)
            ):
                end = datetime.now(UTC).timestamp()
                start = _timestamp(getattr(ti, "start_date", None)) or end
                record = UsageRecord(
                    dag_id=dag_id,
                    run_id=run_id,
                    task_id=task_id,
                    try_number=try_number,
                    devices=tuple(range(self.gpus)),
                    start=min(start, end),
                    end=end,
                    map_index=map_index,
                    pool=self.pool,
                    outcome=str(getattr(ti, "state", None) or "ended"),
                    lease_id=f"task:{claim_id(dag_id, run_id, task_id, map_index)}|{try_number}",
                    host=socket.gethostname(),
                )
            if self.close:
                closed = book.settle(claim_id(dag_id, run_id, task_id, map_index), record)
            else:
                closed = False
                if record is not None:
                    book.record(record)
        except Exception:
            log.exception(
                "budget: could not settle the claim of %s.%s (it expires on its own)", dag_id, task_id
            )
            return
        log.info(
            "budget: %s claim of %s.%s%s",
            "kept the (its retry runs under it)" if not self.close else "closed the" if closed else "no open",
            dag_id,
            task_id,
            f"; charged {record.gpu_seconds:.0f} GPU-seconds of run time" if record is not None else "",
        )
