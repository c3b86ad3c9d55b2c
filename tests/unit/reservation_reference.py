"""The reservation decision as it was written before the walk was shared with the simulator (a
straightforward pass over the whole sorted list of waiting tasks), kept as the test oracle of
:func:`airflow_gpu_dag.core.policy.reservation.decide_pools`: ``test_reservation.py`` checks that the
shared walk, which reads the waiting tasks lazily and stops as soon as the decision is known, decides
exactly what this does."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask, RunningTask, admission_order
from airflow_gpu_dag.core.policy.reservation import PoolDecision, shadow_time

__all__ = ["reference_decide_pools"]


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


def _is_safe(now: float, shadow: float, extra: int, picked: Sequence[ReadyTask], strict: bool) -> bool:
    """Backfill is safe when the picked tasks that run past the shadow time hold at most ``extra`` slots
    (none with ``strict``)."""
    past_shadow = sum(t.slots for t in picked if now + t.duration > shadow)
    return past_shadow == 0 if strict else past_shadow <= extra


def _leak_delays(
    now: float,
    running: Sequence[RunningTask],
    ready_at: float,
    shadow: float | None,
    extra: int,
    others: Sequence[ReadyTask],
    used: int,
    closed_below: int,
    wide: int,
    strict: bool,
    next_decision: float | None,
) -> bool:
    """Would the slots that free before a pending ``W`` is ready, if left open, go to ready work that
    delays ``W``? With the pool at ``used`` they reopen as running tasks end; Airflow's greedy admission
    hands them to ``others`` (the ready tasks after ``W``). Only the slots a pool of
    ``closed_below = C - w`` would keep closed count; the pick is judged as a backfill from the first
    of those ends. Closed, they idle until the next decision admits ``W``: so the pick delays ``W`` only
    when it runs past both the shadow time and ``next_decision`` (None: the next event)."""
    freed = [
        (max(now, r.expected_end), r.slots)
        for r in running
        if r.expected_end is not None and max(now, r.expected_end) <= ready_at
    ]
    freed_slots = sum(s for _end, s in freed)
    slots = min(max(0, used - closed_below), freed_slots)
    if shadow is None or slots <= 0 or freed_slots >= wide:
        return False  # nothing to hold, or W fits what frees by then (the first to take it when ready)
    takers = _greedy_pick(others, slots)
    horizon = shadow if next_decision is None else max(shadow, next_decision)
    return bool(takers) and not _is_safe(min(end for end, _s in freed), horizon, extra, takers, strict)


def _decide_one(
    now: float,
    pool: str,
    capacity: int,
    running: Sequence[RunningTask],
    ready: Sequence[ReadyTask],
    backfill: bool,
    pending: Sequence[PendingTask] = (),
    strict_backfill: bool = False,
    next_decision: float | None = None,
) -> PoolDecision:
    used = sum(r.slots for r in running)
    free = capacity - used
    waiting = sorted([*ready, *(p for p in pending if p.ready_at is not None)], key=admission_order)
    # walk the waiting tasks in Airflow's order: start those that fit until the first that cannot start
    admit: list[ReadyTask] = []
    ends: dict[str, float] = {}
    remaining = free
    head: ReadyTask | None = None
    head_ready = now
    for index, task in enumerate(waiting):
        if task.slots > capacity:
            continue  # can never run here; Airflow skips it too
        if isinstance(task, PendingTask):
            if any(key not in ends for key in task.after):
                continue  # an upstream task does not start now: not ready before the next decision
            following = next((t for t in waiting[index + 1 :] if not isinstance(t, PendingTask)), None)
            if following is not None and following.priority >= task.priority:
                continue  # a tie is not a plan: ready work of the same priority is not held back
            expected = max([now if task.ready_at is None else task.ready_at, *(ends[k] for k in task.after)])
            if expected <= now:
                continue  # its upstream tasks overran their estimates: when it turns ready is unknown
            head = task
            head_ready = expected
            break
        if task.slots > remaining:
            head = task
            break
        admit.append(task)
        ends[task.key] = now + task.duration
        remaining -= task.slots
    admitted = tuple(t.key for t in admit)
    if head is None:
        if not waiting:
            why = "no task waiting"
        elif admit:
            why = f"{len(admit)} waiting task(s) start, nothing to reserve for"
        elif any(not isinstance(t, PendingTask) for t in waiting):
            why = f"no waiting task fits capacity {capacity}"
        else:
            why = "no task ready, none to reserve for yet"
        return PoolDecision(
            pool, capacity, capacity, None, 0, 0, None, f"{why}; pool = capacity", used, (), admitted
        )
    wide = head.slots
    is_pending = isinstance(head, PendingTask)
    if not is_pending and wide == 1:
        # Airflow hands the next freed slot to the highest-priority task anyway: a 1-slot task cannot
        # be starved, and shrinking the pool would only keep that slot idle until the next tick.
        reason = f"{head.key} (1 slot) takes the next free slot; pool = capacity"
        return PoolDecision(pool, capacity, capacity, None, 0, 0, None, reason, used, (), admitted)

    # the tasks started now hold their slots for their expected duration
    holding = [*running, *(RunningTask(t.key, pool, t.slots, now + t.duration) for t in admit)]
    shadow, extra = shadow_time(now, remaining, wide, holding)
    if shadow is not None and is_pending:
        shadow = max(shadow, head_ready)  # not before it is expected ready
    backfill_open = 0
    picked: list[ReadyTask] = []
    position = waiting.index(head)
    if backfill and shadow is not None and remaining > 0:
        others = [t for t in waiting[position + 1 :] if not isinstance(t, PendingTask)]
        for open_slots in range(remaining, 0, -1):
            candidate = _greedy_pick(others, open_slots)
            if _is_safe(now, shadow, extra, candidate, strict_backfill):
                # the same tasks are admitted with exactly their slots open; a tighter pool leaves
                # nothing for a task that becomes ready before the next controller tick
                backfill_open, picked = sum(t.slots for t in candidate), candidate
                break
    started = free - remaining
    left = [
        t
        for t in waiting[position + 1 :]
        if not isinstance(t, PendingTask) and t.slots <= capacity and t not in picked
    ]
    if is_pending and not left:
        # nothing else waits that could take W's slots: keep them open, W starts the moment it is
        # ready instead of at the next tick
        size = capacity
    elif started == 0 and backfill_open == 0 and not is_pending:
        # nothing starts: C - w stays closed whatever ends before the next tick, unless W fits then
        size = capacity - wide
    elif (
        started == 0
        and backfill_open == 0
        and (
            not backfill
            or _leak_delays(
                now,
                running,
                head_ready,
                shadow,
                extra,
                left,
                used,
                capacity - wide,
                wide,
                strict_backfill,
                next_decision,
            )
        )
    ):
        # nothing starts, and the slots that free before W is scheduled would go to ready work that
        # delays it (Airflow hands free slots to what is scheduled): min(used, C - w) reopens them only
        # beyond the w that W needs, until the next tick admits it
        size = min(used, capacity - wide)
    else:
        size = used + started + backfill_open
    size = max(0, min(capacity, size))
    when = "unknown" if shadow is None else f"+{shadow - now:g}s"
    what = "expected ready and its slots free" if is_pending else "slots expected free"
    reason = (
        f"reserving {wide} slots for {head.key}: {max(free, 0)} of {capacity} free"
        + (f", {started} starting first" if started else "")
        + f", {what} at {when}; backfill {backfill_open} slot(s) for work that cannot delay it"
        + ("; nothing else waiting: pool = capacity" if is_pending and not left else "")
    )
    return PoolDecision(
        pool,
        capacity,
        size,
        head.key,
        wide,
        max(0, size - (capacity - wide)),
        shadow,
        reason,
        used,
        tuple(t.key for t in picked),
        admitted,
        is_pending,
    )


def reference_decide_pools(
    now: float,
    capacity: Mapping[str, int],
    running: Sequence[RunningTask],
    ready: Sequence[ReadyTask],
    backfill: bool = True,
    pending: Sequence[PendingTask] = (),
    strict_backfill: bool = False,
    next_decision: float | None = None,
) -> dict[str, PoolDecision]:
    """Decide the size of every pool in ``capacity`` (pool -> live capacity ``C``).

    ``running`` are the task instances holding slots (running or queued), ``ready`` those in SCHEDULED
    state, ``pending`` (lookahead) those not scheduled yet whose upstream tasks have all started, with
    their expected ready time. Tasks of pools not in ``capacity`` are ignored. With ``backfill=False``
    a reservation lets nothing through but the tasks ahead of ``W``. ``next_decision``: when the
    controller decides next (``now + interval``; None: at the next event), against which slots left
    open between two decisions are weighed. The returned pool sizes are never negative and never
    above ``C``.
    """
    running_by_pool: dict[str, list[RunningTask]] = defaultdict(list)
    for r in running:
        running_by_pool[r.pool].append(r)
    ready_by_pool: dict[str, list[ReadyTask]] = defaultdict(list)
    for t in ready:
        ready_by_pool[t.pool].append(t)
    pending_by_pool: dict[str, list[PendingTask]] = defaultdict(list)
    for p in pending:
        pending_by_pool[p.pool].append(p)
    decisions: dict[str, PoolDecision] = {}
    for pool, cap in capacity.items():
        cap = max(0, int(cap))
        decisions[pool] = _decide_one(
            now,
            pool,
            cap,
            running_by_pool.get(pool, []),
            ready_by_pool.get(pool, []),
            backfill,
            pending_by_pool.get(pool, []),
            strict_backfill,
            next_decision,
        )
    return decisions
