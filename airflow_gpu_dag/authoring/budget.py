"""Budget gates: insert a gate before a GPU task that defers while a GPU-hour cap is reached.

    from airflow_gpu_dag.authoring import budget_gate

    budget_gate(train, gpu_hours_per_run=40, gpu_hours_per_pool_day=200, pool="gpu_a100")

inserts ``train__budget`` between ``train`` and its upstream tasks (edge label ``budget``); see
:class:`airflow_gpu_dag.operators.budget.BudgetGateOperator` for what the gate does, and
:mod:`airflow_gpu_dag.budget.check` for raising a cap at run time.

The gate claims ``train``'s expected GPU-seconds (its GPUs x its duration estimate, the default
estimate when it declares none) before letting it start, and ``train`` settles the claim when a try
ends (callbacks added here: :class:`~airflow_gpu_dag.budget.charge.SettleBudgetClaim`).
"""

from __future__ import annotations

import sys
from typing import Any

from airflow_gpu_dag.airflow.mapped import is_mapped
from airflow_gpu_dag.authoring._wiring import as_operator, check_gatable, insert_before, where_of
from airflow_gpu_dag.budget.charge import SettleBudgetClaim
from airflow_gpu_dag.core.model.pools import is_gpu_pool
from airflow_gpu_dag.core.model.resources import EstimateError, parse_duration
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.operators.gpu_lease import GpuLeaseMixin
from airflow_gpu_dag.settings import default_duration_seconds

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
    deferrable: bool | None = None,
) -> BudgetGateOperator:
    """Insert a :class:`BudgetGateOperator` before ``task`` (it takes over ``task``'s upstream edges).

    ``pool`` defaults to ``task.pool`` (the GPU pool whose daily usage is capped). The gate itself
    runs in the default pool, so waiting for budget never holds a GPU slot. ``deferrable``: the gate
    waits in the triggerer; default ``[operators] default_deferrable`` (else it checks from a worker).

    :raises ValueError: a cap <= 0, a pool cap without a pool, or a task expected to use more than a
        cap; the message names the DAG, the task and the fix.
    """
    task = as_operator(task)
    dag = task.dag if task.has_dag() else None
    if dag is None:
        raise ValueError(f"task {task.task_id!r}: add it to a DAG before calling budget_gate().")
    where = where_of(task)
    if is_mapped(task):  # also a task inside a mapped task group
        # One gate before a mapped task claims one instance's GPU-hours and lets every instance run.
        raise ValueError(
            f"{where}: budget_gate() cannot gate a mapped task: its gate runs once, before the number "
            "of instances is known, so it would claim one instance's GPU-hours and let all of them "
            "run. Fix: gate a task that is not mapped (e.g. one that runs the trials), or cap the "
            "pool per day with a gate on another GPU task of the pool."
        )
    if pool is not None and gpu_hours_per_pool_day is not None and pool != task.pool:
        # Usage is charged to the pool the task runs in (leases, pods, the settle callback).
        raise ValueError(
            f"{where}: budget_gate(pool={pool!r}) caps pool {pool!r}, but the task runs in pool "
            f"{task.pool!r}, where its GPU-hours are charged: the cap would never see them. Fix: "
            f"set the task's pool={pool!r}, or drop pool= (the task's own pool is capped)."
        )
    check_gatable(task)  # a teardown: refused before anything is added
    gpus, gpu_seconds = expected_gpu_seconds(task, where)
    gate_id = task_id or f"{task.label}__budget"  # label: the id inside its task group
    group_prefix = task.task_id[: -len(task.label)] if task.task_id.endswith(task.label) else ""
    # the gate's own checks, before it is added to the DAG: a refused call leaves the DAG as it was
    BudgetGateOperator.checked_arguments(
        f"DAG {dag.dag_id!r}, task {group_prefix + gate_id!r}",
        gpu_hours_per_run,
        gpu_hours_per_pool_day,
        task.pool or pool,
        gpu_seconds,
        poke_interval,
    )
    gate = BudgetGateOperator(
        task_id=gate_id,
        gpu_hours_per_run=gpu_hours_per_run,
        gpu_hours_per_pool_day=gpu_hours_per_pool_day,
        # the task's pool also for a per-run cap: its claim then counts against that pool's day
        # (where its usage is charged) for gates with a pool cap while it runs
        pool_to_cap=task.pool or pool,
        ledger=ledger,
        poke_interval=poke_interval,
        dag=dag,
        task_group=getattr(task, "task_group", None),
        execution_timeout=None,
        gated_task_id=task.task_id,
        claim_gpu_seconds=gpu_seconds,
        # not given: the DAG's default_args, else [operators] default_deferrable
        **({} if deferrable is None else {"deferrable": deferrable}),
    )
    gate.doc_md = "GPU-hour budget gate: defers while the budget is used up."
    insert_before(task, gate, label="budget")
    charged_by = _charged_by(task)
    settle = SettleBudgetClaim(ledger=ledger, gpus=gpus, pool=task.pool, charged_by=charged_by)
    keep = SettleBudgetClaim(ledger=ledger, gpus=gpus, pool=task.pool, close=False, charged_by=charged_by)
    for kind, callback in (
        ("on_success_callback", settle),
        ("on_failure_callback", settle),
        ("on_retry_callback", keep),  # the gate does not run again: the retry runs under its claim
        ("on_skipped_callback", settle),
    ):
        setattr(task, kind, [*list(getattr(task, kind, None) or []), callback])
    return gate


def _charged_by(task: Any) -> str | None:
    """``"lease"``/``"pod"`` when ``task`` charges its own GPU time (GPU operators, GPU pods)."""
    if isinstance(task, GpuLeaseMixin):
        return "lease"
    pods = sys.modules.get("airflow_gpu_dag.operators.kubernetes")  # not imported: not a GPU pod
    if pods is not None and isinstance(task, pods.GpuKubernetesPodOperator):
        return "pod"
    return None


def expected_gpu_seconds(task: Any, where: str | None = None) -> tuple[int, float]:
    """``(GPUs, GPUs x duration estimate)`` of a task from its hints (a GPU pool's slots when it
    declares no GPUs; the default estimate when it declares no duration).

    :raises ValueError: the hints declare a GPU count that is no whole number of GPUs >= 1 (``where``
        names the task); its claim could not be sized.
    """
    hints = read_hints(getattr(task, "executor_config", None))
    declared = hints.get("gpus")
    if isinstance(declared, str) and declared.strip().isascii() and declared.strip().isdigit():
        declared = int(declared.strip())  # a count written as text, as read before
    gpus = 0
    if declared is not None:
        whole = isinstance(declared, int | float) and not isinstance(declared, bool) and 1 <= declared < 2**31
        if not whole or not float(declared).is_integer():
            raise ValueError(
                f"{where or where_of(task)}: gpus={declared!r} is not a whole number of GPUs >= 1, so its "
                "budget claim cannot be sized. Fix: declare e.g. gpus=2 in its GPU hints."
            )
        gpus = int(declared)
    if not gpus and is_gpu_pool(getattr(task, "pool", None)):
        gpus = int(getattr(task, "pool_slots", 1) or 1)
    try:
        duration = (
            parse_duration(hints["duration_s"]) if "duration_s" in hints else default_duration_seconds()
        )
    except EstimateError:
        duration = default_duration_seconds()
    return gpus, gpus * duration
