"""Reservation for wide tasks through the pool size: the decision the watermark controller applies.

Airflow's admission is greedy (see :mod:`airflow_gpu_dag.core.admission`): a task that needs more slots
than are open is skipped and smaller, lower-priority tasks take the slots, so an 8-GPU task can wait
forever behind a stream of 1-GPU tasks (apache/airflow#29474). We cannot patch the scheduler, but a
controller can set each pool's size. For a GPU pool ``P`` with live capacity ``C`` (the watermark), let
``W`` be the highest-priority ready task of ``P`` (among those that fit ``C`` at all) and ``w`` its slots:

* ``W`` fits (``C - used >= w``): pool size ``C``; the scheduler admits ``W`` first.
* ``W`` needs one slot: pool size ``C``; the next freed slot goes to ``W`` first anyway.
* ``W`` does not fit: the reservation is active and the pool size is ``C - w + b``, so
  ``open = (C - used) - w + b``. With ``b = 0`` nothing can take the slots ``W`` is waiting for, however
  many scheduler loops run between two controller ticks. When running tasks drain so that
  ``C - used >= w``, the next tick sets the pool back to ``C`` and ``W`` starts.
* ``b`` is safe backfill (EASY backfilling): from the running tasks' expected ends, the *shadow time*
  is when ``w`` slots will be free, and ``extra`` the slots free then beyond ``w``. A backfill of
  ``k`` open slots lets through what Airflow's greedy admission would pick with ``k`` open slots; it is
  safe when every picked task ends by the shadow time, or the picked tasks that run past it use at most
  ``extra`` slots. The largest safe ``k`` is found, then trimmed to the slots of the tasks it admits
  (the same tasks are admitted, nothing is left open for a task that turns up before the next tick),
  and ``b = w - (C - used) + k`` (0 when ``k = 0``).

Pure and deterministic: state in, pool decisions out. The simulator calls the same function at each
controller tick, so it predicts what the controller and the real scheduler do together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_gpu_dag.core.admission import ReadyTask, RunningTask, admission_order

__all__ = ["PoolDecision", "decide_pools", "shadow_time"]


@dataclass(frozen=True)
class PoolDecision:
    """What the controller sets one pool to, and why.

    ``capacity`` is the watermark ``C``; ``pool_size`` the slots to write to the Airflow pool;
    ``reserved_for`` the key of ``W`` while a reservation is active, ``reserved_slots`` its ``w``;
    ``backfill_slots`` is ``b``; ``shadow_time`` when ``W``'s slots are expected to be free (None when
    no reservation or unknown); ``reason`` one human-readable line (goes into the pool description).
    ``used`` is the slots held by running/queued tasks, ``backfill_tasks`` the keys the backfill was
    sized for (what Airflow's admission is predicted to let through).
    """

    pool: str
    capacity: int
    pool_size: int
    reserved_for: str | None
    reserved_slots: int
    backfill_slots: int
    shadow_time: float | None
    reason: str
    used: int = 0
    backfill_tasks: tuple[str, ...] = ()


def shadow_time(
    now: float, free: int, needed: int, running: Sequence[RunningTask]
) -> tuple[float | None, int]:
    """When ``needed`` slots will be free, and how many slots beyond ``needed`` are free then.

    ``free`` is the pool's free slots now, ``running`` the tasks holding its other slots. A task whose
    expected end has passed is taken to end now; one with an unknown end never ends (so the shadow
    time may be unknown: ``(None, 0)``). When ``needed <= free`` the shadow time is ``now``.
    """
    if needed <= free:
        return now, free - needed
    ends = sorted(
        (max(now, r.expected_end), r.slots) for r in running if r.expected_end is not None and r.slots > 0
    )
    available = free
    for index, (end, slots) in enumerate(ends):
        available += slots
        if available >= needed:
            # everything else ending at the same instant is free then too
            for later_end, later_slots in ends[index + 1 :]:
                if later_end > end:
                    break
                available += later_slots
            return end, available - needed
    return None, 0


def _greedy_pick(candidates: Sequence[ReadyTask], open_slots: int) -> list[ReadyTask]:
    """Airflow's greedy admission within one pool with ``open_slots`` open (candidates presorted)."""
    picked: list[ReadyTask] = []
    remaining = open_slots
    for task in candidates:
        if remaining <= 0:
            break
        if task.slots <= remaining:
            picked.append(task)
            remaining -= task.slots
    return picked


def _is_safe(now: float, shadow: float, extra: int, picked: Sequence[ReadyTask]) -> bool:
    past_shadow = sum(t.slots for t in picked if now + t.duration > shadow)
    return past_shadow <= extra


def _decide_one(
    now: float,
    pool: str,
    capacity: int,
    running: Sequence[RunningTask],
    ready: Sequence[ReadyTask],
    backfill: bool,
) -> PoolDecision:
    used = sum(r.slots for r in running)
    free = capacity - used
    ordered = sorted(ready, key=admission_order)
    head = next((t for t in ordered if t.slots <= capacity), None)
    if head is None:
        why = "no task waiting" if not ordered else f"no waiting task fits capacity {capacity}"
        return PoolDecision(pool, capacity, capacity, None, 0, 0, None, f"{why}; pool = capacity", used)
    wide = head.slots
    if free >= wide:
        reason = f"{head.key} ({wide} slots) fits: {free} of {capacity} free; pool = capacity"
        return PoolDecision(pool, capacity, capacity, None, 0, 0, None, reason, used)
    if wide == 1:
        # Airflow hands the next freed slot to the highest-priority task anyway: a 1-slot task cannot
        # be starved, and shrinking the pool would only keep that slot idle until the next tick.
        reason = f"{head.key} (1 slot) takes the next free slot; pool = capacity"
        return PoolDecision(pool, capacity, capacity, None, 0, 0, None, reason, used)

    shadow, extra = shadow_time(now, free, wide, running)
    deficit = wide - free
    backfill_open = 0
    picked: list[ReadyTask] = []
    if backfill and shadow is not None and free > 0:
        others = [t for t in ordered if t is not head]
        for open_slots in range(free, 0, -1):
            candidate = _greedy_pick(others, open_slots)
            if _is_safe(now, shadow, extra, candidate):
                # the same tasks are admitted with exactly their slots open; a tighter pool leaves
                # nothing for a task that becomes ready before the next controller tick
                backfill_open, picked = sum(t.slots for t in candidate), candidate
                break
    b = deficit + backfill_open if backfill_open > 0 else 0
    size = capacity - wide + b
    when = "unknown" if shadow is None else f"+{shadow - now:g}s"
    reason = (
        f"reserving {wide} slots for {head.key}: {max(free, 0)} of {capacity} free, "
        f"slots expected free at {when}; backfill {backfill_open} slot(s) for work that cannot delay it"
    )
    return PoolDecision(
        pool,
        capacity,
        size,
        head.key,
        wide,
        b,
        shadow,
        reason,
        used,
        tuple(t.key for t in picked),
    )


def decide_pools(
    now: float,
    capacity: Mapping[str, int],
    running: Sequence[RunningTask],
    ready: Sequence[ReadyTask],
    backfill: bool = True,
) -> dict[str, PoolDecision]:
    """Decide the size of every pool in ``capacity`` (pool -> live capacity ``C``).

    ``running`` are the task instances holding slots (running or queued), ``ready`` those in SCHEDULED
    state. Tasks of pools not in ``capacity`` are ignored. With ``backfill=False`` a reservation lets
    nothing through (``b = 0``). The returned pool sizes are never negative and never above ``C``.
    """
    running_by_pool: dict[str, list[RunningTask]] = defaultdict(list)
    for r in running:
        running_by_pool[r.pool].append(r)
    ready_by_pool: dict[str, list[ReadyTask]] = defaultdict(list)
    for t in ready:
        ready_by_pool[t.pool].append(t)
    decisions: dict[str, PoolDecision] = {}
    for pool, cap in capacity.items():
        cap = max(0, int(cap))
        decisions[pool] = _decide_one(
            now, pool, cap, running_by_pool.get(pool, []), ready_by_pool.get(pool, []), backfill
        )
    return decisions
