"""Resource edges: tasks sharing a GPU group through an Airflow pool, exclusively or in proportion.

    exclusive([train_a, train_b], pool="gpu_node1", pool_size=8)      # one at a time, each the whole node
    share({sweep_1: 0.5, sweep_2: 0.25, sweep_3: 0.25}, pool="gpu_node1", pool_size=8)  # 4/2/2 GPUs

A pool slot is one GPU. Mutual exclusion gives every task the whole pool (``pool_slots ==
pool_size``) so no two run together; proportional sharing gives each task its fraction of the pool.
The pool must exist with ``pool_size`` slots (``airflow pools set gpu_node1 8 "GPUs of node1"``): with
fewer, exclusive tasks would run at the same time. So ``pool_size`` is checked against the pool's size
wherever that is known (``[gpu_dag] pools``, ``lint --pool``, the static inventory's GPU pools) and
against the other claims on the pool in the DAG; ``airflow gpu-dag lint`` also compares the claims of
every DAG it reads (:class:`PoolClaim`, left on each task).

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
from dataclasses import dataclass
from typing import Any

from airflow_gpu_dag.airflow.mapped import is_mapped
from airflow_gpu_dag.authoring._wiring import as_operator, where_of
from airflow_gpu_dag.authoring.affinity import data_affinity, pin_to_queue
from airflow_gpu_dag.core.model.pools import pool_name_problem
from airflow_gpu_dag.executor_config import HINTS_KEY, gpu_hints, read_hints
from airflow_gpu_dag.gpu.inventory import parse_time_pool_sizes
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError, resolve_gpu_task
from airflow_gpu_dag.settings import pool_capacities

__all__ = [
    "PoolClaim",
    "configured_pool_size",
    "data_affinity",
    "exclusive",
    "pin_to_queue",
    "pool_claim",
    "share",
]


@dataclass(frozen=True)
class PoolClaim:
    """What ``exclusive()`` or ``share()`` said about a pool: that it has ``pool_size`` slots. Kept on each
    task it changed (:func:`pool_claim`; a Python attribute, for ``airflow gpu-dag lint`` and later
    calls in the same DAG file: it is not serialized)."""

    helper: str
    pool: str
    pool_size: int


_CLAIM = "_gpu_dag_pool_claim"


def pool_claim(task: Any) -> PoolClaim | None:
    """The :class:`PoolClaim` ``exclusive()`` / ``share()`` left on ``task``, or None."""
    claim = getattr(task, _CLAIM, None)
    return claim if isinstance(claim, PoolClaim) else None


def configured_pool_size(pool: str) -> tuple[int, str] | None:
    """``(slots, where that size is configured)`` of ``pool``: ``[gpu_dag] pools`` (which ``lint --pool``
    sets while lint imports DAG files), else the GPU pools of the static inventory (``gpu_default``,
    ``gpu_<type>``, as the cross-DAG weights count them); None when unknown."""
    pools = pool_capacities()
    if pools and pool in pools:
        return pools[pool], "[gpu_dag] pools, or lint --pool"
    inventory = parse_time_pool_sizes()
    if inventory and pool in inventory:
        return inventory[pool], "the static inventory, [gpu_dag] inventory"
    return None


def _check_pool(pool: str, pool_size: int, helper: str) -> None:
    if not pool or not isinstance(pool, str):
        raise ValueError(f"{helper}(): pool={pool!r} must be the name of an Airflow pool.")
    if problem := pool_name_problem(pool):
        raise ValueError(f"{helper}(): {problem}. Fix: use a shorter pool name.")
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise ValueError(f"{helper}(): pool_size={pool_size!r} must be the pool's slot count (>= 1).")


def _check_claim(tasks: list[Any], helper: str, pool: str, pool_size: int) -> None:
    """Refuse a ``pool_size`` other than the pool's configured size, or than another call's claim on
    the same pool in the tasks' DAG, before any task is changed.

    :raises ValueError: naming the DAG, the pool, both sizes and the fix.
    """
    dags = {id(t.dag): t.dag for t in tasks if t.has_dag()}
    where = ", ".join(f"DAG {dag.dag_id!r}" for dag in dags.values()) or f"task {tasks[0].task_id!r}"
    call = f"{helper}(pool={pool!r}, pool_size={pool_size})"
    known = configured_pool_size(pool)
    if known is not None and known[0] != pool_size:
        size, source = known
        raise ValueError(
            f"{where}: {call} but pool {pool!r} has {size} slots ({source}). pool_size must be the pool's "
            "size: exclusive() holds every slot only then (with fewer, the tasks it keeps apart run at the "
            "same time; with more, none can run), and share() divides that size. "
            f"Fix: pool_size={size}, or correct the pool's size in {source.split(',')[0]}."
        )
    claimed = {t.task_id for t in tasks}
    for dag in dags.values():
        for other in dag.task_dict.values():
            claim = pool_claim(other)
            if claim and claim.pool == pool and claim.pool_size != pool_size and other.task_id not in claimed:
                raise ValueError(
                    f"DAG {dag.dag_id!r}: {call} but {claim.helper}() gave task {other.task_id!r} "
                    f"pool_size={claim.pool_size} for the same pool; one pool has one size. "
                    f"Fix: give every call on {pool!r} the pool's size (airflow pools get {pool})."
                )


def _claim(task: Any, helper: str, pool: str, pool_size: int) -> None:
    setattr(task, _CLAIM, PoolClaim(helper, pool, pool_size))


def _reject_mapped(task: Any, helper: str) -> None:
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
        # start-up: importing the helpers must not load the Kubernetes client (pod_spec does)
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

    :raises ValueError: fewer than two distinct tasks (a task cannot exclude itself), a bad pool, a
        ``pool_size`` other than the pool's known size (or another claim's in the DAG), or a GPU request
        the hosts cannot hold; the message names the DAG, the task or pool, and the fix.
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
    _check_claim(operators, "exclusive", pool, pool_size)
    for task in operators:
        _set_gpus(task, pool_size, pool, "exclusive")
        _claim(task, "exclusive", pool, pool_size)
    return {t.task_id: t.pool_slots for t in operators}


def share(
    shares: Mapping[Any, float] | Iterable[tuple[Any, float]], *, pool: str, pool_size: int
) -> dict[str, int]:
    """Proportional sharing: task -> fraction of the pool (0 < f <= 1, sum <= 1 to run together).

    ``shares`` is a mapping, or ``(task, fraction)`` pairs (an ``@task`` call's result is not
    hashable). Each task gets ``max(1, floor(f * pool_size))`` slots (a GPU task: that many GPUs).
    Returns task_id -> slots.

    :raises ValueError: a fraction outside (0, 1], fractions summing over 1, slots (after the
        rounding up to one slot each) more than the pool has, or a ``pool_size`` other than the pool's
        known size (as :func:`exclusive`).
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
    _check_claim([task for task, _ in planned], "share", pool, pool_size)
    for task, slots in planned:
        _set_gpus(task, slots, pool, "share")
        _claim(task, "share", pool, pool_size)
    return {task.task_id: task.pool_slots for task, _ in planned}
