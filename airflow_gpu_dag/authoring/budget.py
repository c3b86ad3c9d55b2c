"""Budget gates: insert a gate before a GPU task that defers while a GPU-hour cap is reached.

    from airflow_gpu_dag.authoring import budget_gate

    budget_gate(train, gpu_hours_per_run=40, gpu_hours_per_pool_day=200, pool="gpu_a100")

inserts ``train__budget`` between ``train`` and its upstream tasks (edge label ``budget``); see
:class:`airflow_gpu_dag.operators.budget.BudgetGateOperator` for what the gate does, and
:mod:`airflow_gpu_dag.budget.check` for raising a cap at run time.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_dag.authoring._wiring import insert_before
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.sensors._common import RESUME_RACE_RETRIES, RESUME_RACE_RETRY_DELAY

__all__ = ["budget_gate"]


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
