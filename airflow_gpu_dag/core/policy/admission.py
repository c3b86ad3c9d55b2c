"""Airflow's pool admission rule, as a pure function.

The scheduler (``SchedulerJobRunner._executable_task_instances_to_queued`` in Airflow 3.3) takes the
task instances in SCHEDULED state ordered by ``(-priority_weight, logical_date, map_index)`` and, per
pool, with ``open = slots - running - queued``:

* skips every task of a pool whose open slots are <= 0 (a "starved" pool);
* skips a task whose ``pool_slots`` exceed the pool's total slots (it can never run; Airflow only
  logs a warning);
* skips a task whose ``pool_slots`` exceed the open slots, and goes on with lower-priority tasks
  that do fit: greedy backfilling with no reservation, so a wide task can wait forever behind a
  stream of 1-slot tasks (apache/airflow#29474).

:func:`stock_admission` reproduces that rule; the simulator and the reservation controller use it to
predict what the real scheduler will do with a given pool size. Simplification: Airflow also caps the
tasks looked at per loop (``max_tis_per_query``) and applies DAG / executor concurrency limits; they are
assumed not to bind here (set them above the pool sizes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["PendingTask", "ReadyTask", "RunningTask", "admission_order", "stock_admission"]


@dataclass(frozen=True)
class ReadyTask:
    """A task instance in SCHEDULED state waiting for slots of its pool.

    ``key`` is unique (e.g. ``"dag_id/run_id/task_id/map_index"``); ``priority`` is the task's
    ``priority_weight``; ``duration`` the estimated run time in seconds; ``order`` the tie-break after
    ``-priority``, like Airflow's ``(logical_date, map_index)`` (any tuple of comparable values);
    ``run`` (keyword only) identifies its DAG run (``"dag_id/run_id"``; empty: unknown);
    ``falls_back`` (keyword only): a fallback rung whose ladder moves on when it cannot start
    (:func:`airflow_gpu_dag.core.model.ladders.can_fall_back`); ``since`` (keyword only): when it turned
    ready (SCHEDULED), same clock as the controller's ``now``; None: unknown.
    """

    key: str
    pool: str
    slots: int
    priority: int
    duration: float
    order: tuple = ()
    run: str = field(default="", kw_only=True)
    falls_back: bool = field(default=False, kw_only=True)
    since: float | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class PendingTask(ReadyTask):
    """A task instance not yet SCHEDULED whose upstream tasks have all started or wait in its pool
    (lookahead of the reservation controller; Airflow's admission never sees it).

    ``ready_at``: when the upstream tasks that have started are expected to have ended (same clock as
    the controller's ``now``; ``now`` or earlier when none has started); None means unknown, and the
    task is ignored. ``after``: keys of upstream tasks that are waiting (SCHEDULED) in the same pool;
    the task counts only when the controller starts all of them now, and is then expected ready when
    the last of them ends too.
    """

    ready_at: float | None = None
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunningTask:
    """A task instance holding ``slots`` of ``pool`` (running or queued).

    ``expected_end`` is on the same clock as the controller's ``now`` (seconds); None when unknown.
    """

    key: str
    pool: str
    slots: int
    expected_end: float | None


def admission_order(task: ReadyTask) -> tuple:
    """Sort key of Airflow's candidate query: highest priority first, then ``order``, then key."""
    return (-task.priority, task.order, task.key)


def stock_admission(
    ready: Sequence[ReadyTask] | Iterable[ReadyTask],
    open_slots: Mapping[str, int],
    pool_totals: Mapping[str, int] | None = None,
    *,
    presorted: bool = False,
) -> list[ReadyTask]:
    """Return the tasks Airflow's scheduler queues now, in the order it queues them.

    :param ready: task instances in SCHEDULED state (any order unless ``presorted``).
    :param open_slots: open slots per pool (``slots - running - queued``; may be negative). A pool
        missing from the mapping is unlimited.
    :param pool_totals: total slots per pool; a task needing more than its pool's total is never
        admitted. When omitted, only ``open_slots`` limits admission.
    :param presorted: ``ready`` is already in :func:`admission_order` (skips the sort).
    """
    candidates = list(ready) if presorted else sorted(ready, key=admission_order)
    remaining = dict(open_slots)
    admitted: list[ReadyTask] = []
    for task in candidates:
        if pool_totals is not None and task.pool in pool_totals and task.slots > pool_totals[task.pool]:
            continue  # wider than its pool: never admitted, whatever the open slots say
        if task.pool not in remaining:
            admitted.append(task)  # unlimited pool
            continue
        available = remaining[task.pool]
        if available <= 0 or task.slots > available:
            continue
        remaining[task.pool] = available - task.slots
        admitted.append(task)
    return admitted
