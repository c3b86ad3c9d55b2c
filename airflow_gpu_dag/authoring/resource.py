"""Resource edges: tasks sharing a GPU group through an Airflow pool, exclusively or in proportion.

    exclusive([train_a, train_b], pool="gpu_node1", pool_size=8)      # one at a time, each the whole node
    share({sweep_1: 0.5, sweep_2: 0.25, sweep_3: 0.25}, pool="gpu_node1", pool_size=8)  # 4/2/2 GPUs

A pool slot is one GPU. Mutual exclusion gives every task the whole pool (``pool_slots ==
pool_size``) so no two run together; proportional sharing gives each task its fraction of the pool.
The pool must exist with ``pool_size`` slots (``airflow pools set gpu_node1 8 "GPUs of node1"``).

On a GPU task (``GpuBashOperator``, ``GpuPythonOperator``, ``@task.gpu``, ``GpuKubernetesPodOperator``,
or any task with ``gpu_hints(gpus=...)``) the slots *are* its GPUs: the helpers set its GPU request
to the same number (an exclusive task holds every GPU of the group, a shared one its share), so the
pool keeps counting GPUs, the lease (or the pod's ``nvidia.com/gpu``) gets exactly that many devices,
and the request is checked against the host and the pool sizes like any GPU declaration.
Resource relations are not graph edges: Airflow shows them as the task's pool.

Affinity (queue, pool and node affinity together) is in :mod:`airflow_gpu_dag.authoring.affinity`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_gpu_dag.authoring._wiring import as_operator, where_of
from airflow_gpu_dag.authoring.affinity import data_affinity, pin_to_queue
from airflow_gpu_dag.executor_config import HINTS_KEY, read_hints

__all__ = ["data_affinity", "exclusive", "pin_to_queue", "share"]


def _check_pool(pool: str, pool_size: int, helper: str) -> None:
    if not pool or not isinstance(pool, str):
        raise ValueError(f"{helper}(): pool={pool!r} must be the name of an Airflow pool.")
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise ValueError(f"{helper}(): pool_size={pool_size!r} must be the pool's slot count (>= 1).")


def _reject_mapped(task: Any, helper: str) -> None:
    from airflow_gpu_dag.airflow.mapped import is_mapped

    if not hasattr(task, "pool_slots") or is_mapped(task):
        raise ValueError(
            f"{where_of(task) if hasattr(task, 'has_dag') else repr(task)}: {helper}() takes plain tasks, "
            "not mapped ones (.expand()); give the mapped task its pool and GPUs in .partial()."
        )


def _set_gpus(task: Any, gpus: int, pool: str, helper: str) -> None:
    """Give a GPU task ``gpus`` GPUs in ``pool``; a task without GPU hints only gets pool and slots."""
    hints = read_hints(getattr(task, "executor_config", None))
    if "gpus" not in hints:
        task.pool = pool
        task.pool_slots = gpus
        return
    where = where_of(task)
    if hasattr(task, "container_resources") and hasattr(task, "gpus"):  # a GPU pod: no local lease
        from airflow_gpu_dag.executor_config import gpu_hints
        from airflow_gpu_dag.kubernetes.pod_spec import GPU_RESOURCE, merge_resources

        resources = task.container_resources
        for values in (getattr(resources, "requests", None), getattr(resources, "limits", None)):
            if isinstance(values, dict):
                values.pop(GPU_RESOURCE, None)
        task.container_resources = merge_resources(resources, gpus)
        task.gpus = gpus
        task.executor_config = gpu_hints(gpus=gpus, executor_config=task.executor_config)
        task.pool = pool
        task.pool_slots = gpus
        return
    from airflow_gpu_dag.operators.gpu_spec import GpuTaskError, resolve_gpu_task

    dag = task.dag if task.has_dag() else None
    try:
        spec = resolve_gpu_task(
            task.task_id,
            gpus=gpus,
            gpu_memory=hints.get("gpu_memory_mib"),
            gpu_type=hints.get("gpu_type"),
            pool=pool,
            executor_config=task.executor_config,
            dag_id=getattr(dag, "dag_id", None),
        )
    except GpuTaskError as err:
        raise ValueError(
            f"{err}\n{where}: {helper}(pool={pool!r}) gives it {gpus} GPU(s) (one pool slot is one GPU). "
            "Fix: make pool_size the GPUs of one host, or lower the share."
        ) from None
    task.pool = spec.pool
    task.pool_slots = spec.pool_slots
    config = dict(task.executor_config or {})
    config[HINTS_KEY] = spec.executor_config[HINTS_KEY]
    task.executor_config = config
    if hasattr(task, "gpu_request"):
        task.gpu_request = spec.request


def exclusive(tasks: Iterable[Any], *, pool: str, pool_size: int) -> dict[str, int]:
    """Mutual exclusion: every task takes all ``pool_size`` slots of ``pool`` (a GPU task: all
    ``pool_size`` GPUs). Returns task_id -> slots.

    :raises ValueError: fewer than two distinct tasks (a task cannot exclude itself), a bad pool, or
        a GPU request the hosts cannot hold; the message names the DAG, the task and the fix.
    """
    _check_pool(pool, pool_size, "exclusive")
    operators = [as_operator(t) for t in tasks]
    seen: set[str] = set()
    for task in operators:
        _reject_mapped(task, "exclusive")
        if task.task_id in seen:
            raise ValueError(
                f"{where_of(task)}: exclusive() lists it twice; a task cannot exclude itself. Fix: list each "
                "task once."
            )
        seen.add(task.task_id)
    if len(operators) < 2:
        names = ", ".join(repr(t.task_id) for t in operators) or "none"
        raise ValueError(
            f"exclusive(pool={pool!r}) got {len(operators)} task(s) ({names}); mutual exclusion needs at "
            "least two different tasks. Fix: pass every task that must not run at the same time as another."
        )
    for task in operators:
        _set_gpus(task, pool_size, pool, "exclusive")
    return {t.task_id: t.pool_slots for t in operators}


def share(
    shares: Mapping[Any, float] | Iterable[tuple[Any, float]], *, pool: str, pool_size: int
) -> dict[str, int]:
    """Proportional sharing: task -> fraction of the pool (0 < f <= 1, sum <= 1 to run together).

    ``shares`` is a mapping, or ``(task, fraction)`` pairs (an ``@task`` call's result is not
    hashable). Each task gets ``max(1, floor(f * pool_size))`` slots (a GPU task: that many GPUs).
    Returns task_id -> slots.

    :raises ValueError: a fraction outside (0, 1], fractions summing over 1, or slots (after the
        rounding up to one slot each) more than the pool has.
    """
    _check_pool(pool, pool_size, "share")
    total = 0.0
    planned: list[tuple[Any, int]] = []
    pairs = shares.items() if isinstance(shares, Mapping) else shares
    for key, fraction in pairs:
        task = as_operator(key)
        _reject_mapped(task, "share")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(
                f"{where_of(task)}: share {fraction!r} must be a fraction of the pool in (0, 1]. "
                "Fix: e.g. 0.5."
            )
        if any(t.task_id == task.task_id for t, _ in planned):
            raise ValueError(f"{where_of(task)}: share() lists it twice. Fix: list each task once.")
        total += fraction
        planned.append((task, max(1, math.floor(fraction * pool_size + 1e-9))))
    if total > 1 + 1e-9:
        raise ValueError(
            f"share(): fractions sum to {total:g} > 1 for pool {pool!r}; they cannot all run at once. "
            "Lower them or use exclusive()."
        )
    slots_in_all = sum(slots for _, slots in planned)
    if slots_in_all > pool_size:  # small fractions round up to one slot each
        raise ValueError(
            f"share(): {len(planned)} tasks need {slots_in_all} slots of pool {pool!r} ({pool_size} in all): "
            "each gets at least one slot, so they cannot all run at once although the fractions sum to "
            f"{total:g}. Fix: a larger pool, fewer tasks in the share, or exclusive()."
        )
    for task, slots in planned:
        _set_gpus(task, slots, pool, "share")
    return {task.task_id: task.pool_slots for task, _ in planned}
