"""Resource edges and affinity: tasks sharing a GPU group through an Airflow pool.

    exclusive([train_a, train_b], pool="gpu_node1", pool_size=8)      # one at a time, each 8 slots
    share({sweep_1: 0.5, sweep_2: 0.25, sweep_3: 0.25}, pool="gpu_node1", pool_size=8)  # 4/2/2 GPUs
    pin_to_queue(preprocess, "host-gpu01")                             # run where the data lives
    data_affinity(train, "/mnt/gpu01/corpus", {"/mnt/gpu01": "host-gpu01"})

A pool slot is one GPU. Mutual exclusion gives every task the whole pool (``pool_slots ==
pool_size``) so no two run together; proportional sharing gives each task its fraction of the pool.
The pool must exist with ``pool_size`` slots (``airflow pools set gpu_node1 8 "GPUs of node1"``).
Resource relations are not graph edges: Airflow shows them as the task's pool.
Affinity uses the executor queue (LocalExecutor ignores it; Celery workers listen on queues with
``airflow celery worker -q host-gpu01``); pods use node affinity (operators/kubernetes.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["data_affinity", "exclusive", "pin_to_queue", "share"]


def _check_pool(pool: str, pool_size: int, helper: str) -> None:
    if not pool or not isinstance(pool, str):
        raise ValueError(f"{helper}(): pool={pool!r} must be the name of an Airflow pool.")
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise ValueError(f"{helper}(): pool_size={pool_size!r} must be the pool's slot count (>= 1).")


def exclusive(tasks: Iterable[Any], *, pool: str, pool_size: int) -> None:
    """Mutual exclusion: every task takes all ``pool_size`` slots of ``pool``."""
    _check_pool(pool, pool_size, "exclusive")
    for task in tasks:
        task.pool = pool
        task.pool_slots = pool_size


def share(shares: Mapping[Any, float], *, pool: str, pool_size: int) -> dict[str, int]:
    """Proportional sharing: task -> fraction of the pool (0 < f <= 1, sum <= 1 to run together).

    Each task gets ``max(1, floor(f * pool_size))`` slots. Returns task_id -> slots.
    """
    _check_pool(pool, pool_size, "share")
    total = 0.0
    slots: dict[str, int] = {}
    for task, fraction in shares.items():
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(
                f"task {task.task_id!r}: share {fraction!r} must be a fraction of the pool in (0, 1]."
            )
        total += fraction
        task.pool = pool
        task.pool_slots = max(1, math.floor(fraction * pool_size + 1e-9))
        slots[task.task_id] = task.pool_slots
    if total > 1 + 1e-9:
        raise ValueError(
            f"share(): fractions sum to {total:g} > 1 for pool {pool!r}; they cannot all run at once. "
            "Lower them or use exclusive()."
        )
    return slots


def pin_to_queue(task: Any, queue: str) -> Any:
    """Run ``task`` on the workers listening on ``queue`` (a host or zone); returns the task."""
    if not queue or not isinstance(queue, str):
        raise ValueError(f"task {task.task_id!r}: queue={queue!r} must be a non-empty queue name.")
    task.queue = queue
    return task


def data_affinity(task: Any, path: str, locations: Mapping[str, str]) -> str:
    """Pin ``task`` to the queue of the longest location prefix containing ``path``; returns it.

    :raises ValueError: no location holds ``path`` (lists the known ones).
    """
    best = ""
    for prefix in locations:
        base = prefix.rstrip("/")
        if (path == base or path.startswith(base + "/")) and len(base) > len(best):
            best = prefix
    if not best:
        known = ", ".join(sorted(locations)) or "none"
        raise ValueError(
            f"task {task.task_id!r}: no location holds {path!r} (known: {known}); add it to locations."
        )
    pin_to_queue(task, locations[best])
    return locations[best]
