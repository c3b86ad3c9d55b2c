"""Reservation for wide tasks through the pool size: the decision the watermark controller applies.

Airflow's admission is greedy (see :mod:`airflow_gpu_dag.core.policy.admission`): a task that needs
more slots than are open is skipped and smaller, lower-priority tasks take the slots, so an 8-GPU task
can wait forever behind a stream of 1-GPU tasks (apache/airflow#29474). The scheduler cannot be
patched, but a controller can set each pool's size. :func:`decide_pool` decides it for one pool of live
capacity ``C``: it walks the pool's waiting tasks in Airflow's order, admits those that fit, and for
``W``, the first task that cannot start now (ready, or *pending*: expected ready soon), sizes the pool
so that nothing takes the slots ``W`` waits for, except *safe backfill*: work that Airflow's greedy
admission would pick and that cannot delay ``W`` (EASY backfilling against ``W``'s shadow time). The
objective's :class:`~airflow_gpu_dag.core.policy.objective.ReservationGate` says whether ``W`` is
worth holding slots for, and which waiting task is starving. The rule case by case, with examples, is
in docs/watermarks.md ("Reservation").

Pure and deterministic: state in, pool decisions out. There is one walk, :func:`decide_pool`: the
controller calls it through :func:`decide_pools` (every waiting task, sorted), the simulator at each
controller tick with its waiting tasks read lazily in admission order, so it predicts what the
controller and the real scheduler do together. The walk reads the waiting tasks only as far as the
decision needs: up to ``W``, then the tasks that Airflow's greedy admission could hand the slots to
(:func:`backfill_candidates`) and whether anything else waits.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask, RunningTask, admission_order
from airflow_gpu_dag.core.policy.objective import ReservationGate, key_of_weight
from airflow_gpu_dag.core.policy.reasons import Reason, render

__all__ = [
    "DecisionWindow",
    "PoolDecision",
    "ReadyTail",
    "backfill_candidates",
    "decide_pool",
    "decide_pools",
    "shadow_time",
]


@dataclass(frozen=True)
class PoolDecision:
    """What the controller sets one pool to, and why.

    ``capacity`` is the watermark ``C``; ``pool_size`` the slots to write to the Airflow pool;
    ``reserved_for`` the key of ``W`` while a reservation is active, ``reserved_slots`` its ``w``;
    ``backfill_slots`` is ``b = pool_size - (C - w)`` (at least 0): the slots opened beyond ``C - w``;
    ``shadow_time`` when ``W`` is expected to be able to start (None when no reservation or unknown);
    ``reason`` one human-readable line (goes into the pool description). ``used`` is the slots held by
    running/queued tasks, ``admitted`` the keys of the tasks ahead of ``W`` that start now,
    ``backfill_tasks`` the keys the backfill was sized for (what Airflow's admission is predicted to let
    through after them); ``lookahead`` is True when ``W`` is a pending task. ``why`` is the decision
    as data (:class:`~airflow_gpu_dag.core.policy.reasons.Reason`: a code, the tasks, the times), which
    ``reason`` renders; two decisions that set the same pool alike compare equal whatever their ``why``.
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
    admitted: tuple[str, ...] = ()
    lookahead: bool = False
    why: Reason | None = field(default=None, compare=False)

    @classmethod
    def at_capacity(
        cls, pool: str, capacity: int, used: int, admitted: tuple[str, ...], why: Reason | None = None
    ) -> PoolDecision:
        """The pool open at its capacity, nothing reserved: ``why`` rendered as the reason (None: no
        reason, the simulator's decisions)."""
        reason = "" if why is None else render(why)
        return _decision(pool, capacity, capacity, None, 0, 0, None, reason, used, (), admitted, False, why)


def _decision(
    pool: str,
    capacity: int,
    pool_size: int,
    reserved_for: str | None,
    reserved_slots: int,
    backfill_slots: int,
    shadow: float | None,
    reason: str,
    used: int,
    backfill_tasks: tuple[str, ...],
    admitted: tuple[str, ...],
    lookahead: bool,
    why: Reason | None,
) -> PoolDecision:
    """``PoolDecision(...)`` of these fields (all of them, in order), built without the frozen
    dataclass's ``__init__``, which sets each of its 13 fields through ``object.__setattr__``: that
    was a twentieth of a simulated decision, which the simulator makes about twice per task. Equal to
    the dataclass built the ordinary way, and as immutable."""
    decision = object.__new__(PoolDecision)
    # a dict display of the fields in order (the keys are constants: one step, no zip over a tuple)
    decision.__dict__.update(
        {
            "pool": pool,
            "capacity": capacity,
            "pool_size": pool_size,
            "reserved_for": reserved_for,
            "reserved_slots": reserved_slots,
            "backfill_slots": backfill_slots,
            "shadow_time": shadow,
            "reason": reason,
            "used": used,
            "backfill_tasks": backfill_tasks,
            "admitted": admitted,
            "lookahead": lookahead,
            "why": why,
        }
    )
    return decision


class DecisionWindow:
    """How long a decision of :func:`decide_pool` stays what it is while its other inputs do not change:
    the simulator skips the controller ticks in it. The decision at any later ``now' < until`` whose
    ``next_decision`` is at most ``next_until``, from the same running, waiting and starving tasks, has
    the same pool size and the same reserved task. Filled in by :func:`decide_pool` from every
    comparison it makes against ``now`` or ``next_decision``; conservative: a comparison whose outcome
    may move with every tick (a task that has started now, one running past its expected end) closes
    the window at ``now``."""

    __slots__ = ("next_until", "until")

    def __init__(self) -> None:
        self.until = math.inf
        self.next_until = math.inf

    def before(self, when: float) -> None:
        """The decision compared ``when <= now`` and found it false: the same until ``now`` reaches it."""
        self.until = min(self.until, when)

    def near(self, when: float) -> None:
        """As :meth:`before`, for a threshold computed with rounding (``now - a >= b``): stops a little
        earlier."""
        self.until = min(self.until, when - 1e-6 * (1.0 + abs(when)))

    def close(self, now: float) -> None:
        """The decision may differ at any later ``now``."""
        self.until = min(self.until, now)

    def before_ends(self, now: float, running: Iterable[RunningTask]) -> None:
        """:meth:`close` for each running task past its expected end (it counts as ending now, which moves
        with now), :meth:`before` for each one expected to end later; a task with no expected end bounds
        nothing. One call for the whole list: the simulator makes it at every decision."""
        until = self.until
        for task in running:
            end = task.expected_end
            if end is not None:
                if end <= now:
                    end = now
                if end < until:
                    until = end
        self.until = until


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
    return _shadow(free, needed, ends)


def _shadow(free: int, needed: int, ends: Sequence[tuple[float, int]]) -> tuple[float | None, int]:
    """:func:`shadow_time` from the running tasks' ``(end, slots)`` pairs, sorted (``needed > free``)."""
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


def backfill_candidates(after_head: Iterable[ReadyTask], free: int) -> list[ReadyTask]:
    """The part of a pool's ready tasks after the head ``W`` (in admission order) that can be backfilled
    with ``free`` slots left once the tasks ahead of ``W`` start: only tasks that fit ``free``, up to the
    ``free``-th 1-slot one (Airflow's greedy admission with at most ``free`` open slots has stopped by
    then). A decision on this part equals the decision on all of them."""
    out: list[ReadyTask] = []
    ones = 0
    if free <= 0:
        return out
    for task in after_head:
        if task.slots <= free:
            out.append(task)
            if task.slots == 1:
                ones += 1
                if ones >= free:
                    break
    return out


class _Waiting:
    """A pool's waiting tasks in admission order, read lazily, with a look-ahead for the next ready one."""

    def __init__(self, tasks: Iterable[ReadyTask]) -> None:
        self._source = tasks
        self._tasks: Iterator[ReadyTask] = iter(tasks)
        self._buffer: deque[ReadyTask] = deque()
        self.seen = 0
        self.seen_ready = False

    def next(self) -> ReadyTask | None:
        task = self._buffer.popleft() if self._buffer else next(self._tasks, None)
        if task is not None:
            self.seen += 1
            self.seen_ready = self.seen_ready or not isinstance(task, PendingTask)
        return task

    def peek_ready(self, max_slots: int | None = None, other_run: str | None = None) -> ReadyTask | None:
        """The next ready (not pending) task, consuming nothing; with ``max_slots`` one holding at most
        that many slots, with ``other_run`` one of another run than that (an unknown run is another)."""

        def wanted(task: ReadyTask) -> bool:
            if isinstance(task, PendingTask) or (max_slots is not None and task.slots > max_slots):
                return False
            return not other_run or not task.run or task.run != other_run

        for task in self._buffer:
            if wanted(task):
                return task
        for task in self._tasks:
            self._buffer.append(task)
            if wanted(task):
                return task
        return None

    def ready_after(self, capacity: int, limit: int) -> tuple[list[ReadyTask], bool]:
        """Read on to the rest's ready tasks that fit ``capacity``: those :func:`backfill_candidates` picks
        with ``limit`` slots, and whether any other one waits (read no further than that tells)."""
        candidates: list[ReadyTask] = []
        more = False
        ones = 0
        full = limit <= 0
        while (task := self.next()) is not None:
            if isinstance(task, PendingTask) or task.slots > capacity:
                continue
            if full or task.slots > limit:
                more = True
                if full:
                    break
                continue
            candidates.append(task)
            if task.slots == 1:
                ones += 1
                full = ones >= limit
        return candidates, more

    def tail(self, head: ReadyTask, capacity: int, limit: int) -> ReadyTail:
        """The ready tasks after ``head`` that fit ``capacity``, for picks of at most ``limit`` open slots:
        the source's own index when it has one (:class:`ReadyTail`), else read on (:meth:`ready_after`)."""
        indexed = getattr(self._source, "ready_tail", None)
        if indexed is not None:
            tail: ReadyTail = indexed(head, capacity)  # (an annotation, not typing.cast: no call)
            return tail
        return _ListTail(*self.ready_after(capacity, limit))


class ReadyTail(Protocol):
    """The ready tasks of a pool after its head ``W`` that fit its capacity, in admission order, as the
    backfill reads them. A caller of :func:`decide_pool` that keeps its waiting tasks indexed may offer
    one through a ``ready_tail(head, capacity)`` method of its ``waiting`` argument, so that a decision
    does not read every waiting task; :class:`_ListTail` reads them from the queue."""

    def pick(self, open_slots: int, skip: Sequence[ReadyTask] = ()) -> list[ReadyTask]:
        """What Airflow's greedy admission takes from them (without ``skip``) with ``open_slots`` open."""
        ...

    def rest(self, picked: Sequence[ReadyTask]) -> bool:
        """Whether any of them is not in ``picked``."""
        ...


class _ListTail:
    """:class:`ReadyTail` from :meth:`_Waiting.ready_after`: the candidates :func:`backfill_candidates`
    keeps for ``limit`` slots (a greedy pick of at most ``limit`` slots takes nothing else) and whether
    another one waits."""

    def __init__(self, candidates: list[ReadyTask], more: bool) -> None:
        self.candidates = candidates
        self.more = more

    def pick(self, open_slots: int, skip: Sequence[ReadyTask] = ()) -> list[ReadyTask]:
        tasks = [t for t in self.candidates if t not in skip] if skip else self.candidates
        return _greedy_pick(tasks, open_slots)

    def rest(self, picked: Sequence[ReadyTask]) -> bool:
        return self.more or any(t not in picked for t in self.candidates)


class _Walk:
    """The walk over a pool's waiting tasks up to the head ``W``: ``admitted`` start now (``ends``: their
    expected ends), ``remaining`` slots are free after them; ``head_ready``: when ``W`` is expected ready."""

    __slots__ = ("admitted", "ends", "head", "head_ready", "remaining")

    def __init__(self, remaining: int, head_ready: float) -> None:
        self.admitted: list[ReadyTask] = []
        self.ends: dict[str, float] = {}
        self.remaining = remaining
        self.head: ReadyTask | None = None
        self.head_ready = head_ready


def _walk(now: float, capacity: int, free: int, waiting: _Waiting) -> _Walk:
    """Walk the waiting tasks in Airflow's order: start those that fit until the first that cannot start
    now (``W``). A pending task is ``W`` only when every upstream waiting here starts now, no ready task
    of the same or a higher priority follows it (a tie is not a plan) and its expected ready time is
    still ahead (an upstream that overran: when it turns ready is unknown)."""
    walk = _Walk(free, now)
    while (task := waiting.next()) is not None:
        if task.slots > capacity:
            continue  # can never run here; Airflow skips it too
        if isinstance(task, PendingTask):
            if any(key not in walk.ends for key in task.after):
                continue  # an upstream task does not start now: not ready before the next decision
            following = waiting.peek_ready()
            if following is not None and following.priority >= task.priority:
                continue  # a tie is not a plan: ready work of the same priority is not held back
            start = now if task.ready_at is None else task.ready_at
            expected = max([start, *(walk.ends[k] for k in task.after)])
            if not expected > now:  # NaN too: an unknown ready time is not reserved for
                continue  # its upstream tasks overran their estimates: when it turns ready is unknown
            walk.head, walk.head_ready = task, expected
            return walk
        if task.slots > walk.remaining:
            walk.head = task
            return walk
        walk.admitted.append(task)
        walk.ends[task.key] = now + task.duration
        walk.remaining -= task.slots
    return walk


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
    # `not <=`: a task whose end is unknown (a NaN estimate) may run past the shadow time
    past_shadow = sum(t.slots for t in picked if not now + t.duration <= shadow)
    return past_shadow == 0 if strict else past_shadow <= extra


def _leak_delays(
    now: float,
    running: Sequence[RunningTask],
    ready_at: float,
    shadow: float | None,
    extra: int,
    others: Callable[[int], list[ReadyTask]],
    used: int,
    closed_below: int,
    wide: int,
    strict: bool,
    next_decision: float | None,
) -> bool:
    """Would the slots that free before a pending ``W`` is ready, if left open, go to ready work that
    delays ``W``? With the pool at ``used`` they reopen as running tasks end; Airflow's greedy admission
    hands them to the ready tasks after ``W`` (``others(slots)``: its pick). Only the slots a pool of
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
    takers = others(slots)
    horizon = shadow if next_decision is None else max(shadow, next_decision)
    return bool(takers) and not _is_safe(min(end for end, _s in freed), horizon, extra, takers, strict)


def _no_head(pool: str, capacity: int, used: int, walk: _Walk, waiting: _Waiting, now: float) -> PoolDecision:
    if not waiting.seen:
        code = "idle"
    elif walk.admitted:
        code = "fits"
    elif waiting.seen_ready:
        code = "too-wide"
    else:
        code = "not-ready"
    admitted = tuple(t.key for t in walk.admitted)
    free = max(0, capacity - used)
    why = Reason(code, pool, capacity, now, free=free, admitted=admitted, admitted_count=len(admitted))
    return PoolDecision.at_capacity(pool, capacity, used, admitted, why)


def _backfill(
    now: float,
    shadow: float | None,
    extra: int,
    remaining: int,
    others: Callable[[int], list[ReadyTask]],
    strict: bool,
    starving: ReadyTask | None = None,
) -> list[ReadyTask]:
    """The largest safe backfill: what Airflow's greedy admission picks (``others(open_slots)``) with the
    most open slots (at most ``remaining``) for which no picked task delays ``W``; with a ``starving`` task,
    only picks of tasks ahead of it in admission order."""
    if shadow is None or remaining <= 0:
        return []
    limit = None if starving is None else admission_order(starving)
    open_slots = remaining
    while open_slots > 0:
        candidate = others(open_slots)
        if (limit is None or all(admission_order(t) < limit for t in candidate)) and _is_safe(
            now, shadow, extra, candidate, strict
        ):
            return candidate
        # with fewer open slots, down to the slots this pick holds, the greedy pick is the same: skip them
        open_slots = min(open_slots, sum(t.slots for t in candidate)) - 1
    return []


def _bound_window(
    window: DecisionWindow,
    now: float,
    head: ReadyTask,
    head_ready: float,
    running: Sequence[RunningTask],
    gate: ReservationGate | None,
) -> None:
    """What the rest of :func:`decide_pool` compares against ``now``: a pending head's expected ready time
    (:func:`_walk`), the running tasks' expected ends (:func:`shadow_time`, :func:`_leak_delays`: one
    past its end counts as ending now, which moves with now), and the head's key plus ``overdue``
    (:meth:`ReservationGate.holds_for`). A backfill only turns unsafe as ``now`` grows (:func:`_is_safe`)."""
    if isinstance(head, PendingTask):
        window.before(head_ready)
    window.before_ends(now, running)
    if gate is not None:
        key = key_of_weight(head.priority, gate.epoch)
        if gate.past_key_holds and key is not None and now - key < gate.overdue:  # once overdue, always
            window.near(key + gate.overdue)


def _bound_next_decision(
    window: DecisionWindow, now: float, shadow: float | None, next_decision: float | None
) -> None:
    """:func:`_leak_delays` weighs ``max(shadow, next_decision)``: the same while the next decision comes
    no later than the shadow time."""
    if next_decision is not None and shadow is not None:
        if next_decision > shadow:
            window.close(now)
        else:
            window.next_until = min(window.next_until, shadow)


def decide_pool(
    now: float,
    pool: str,
    capacity: int,
    running: Sequence[RunningTask],
    waiting: Iterable[ReadyTask],
    backfill: bool = True,
    strict_backfill: bool = False,
    next_decision: float | None = None,
    gate: ReservationGate | None = None,
    starving: ReadyTask | None = None,
    *,
    window: DecisionWindow | None = None,
    explain: bool = True,
) -> PoolDecision:
    """Decide one pool's size: the reservation walk (see the module docstring).

    ``running`` holds the pool's slots (running or queued tasks); ``waiting`` its ready and pending
    tasks **in admission order** (:func:`~airflow_gpu_dag.core.policy.admission.admission_order`; a pending
    task with an unknown ready time is left out by the caller). ``waiting`` is read lazily and only as
    far as the decision needs, so a caller may pass a generator over a long queue. ``gate``: hold
    slots for a wide head only when it passes (:class:`ReservationGate`; None: always). ``starving``:
    a waiting task of the pool that has waited too long (:meth:`ReservationGate.starving`, found by the
    caller over every waiting task): the head is then reserved for and only work ahead of it backfilled.
    ``window``: filled in with how long the decision holds (:class:`DecisionWindow`). ``explain=False``
    leaves ``reason`` empty and ``why`` None (the simulator reads only the pool size and the head).
    """
    if starving is not None and starving.slots > capacity:
        starving = None  # it can never run here (the walk skips it): it bounds no one's wait
    used = sum([r.slots for r in running])
    free = capacity - used
    queue = _Waiting(waiting)
    walk = _walk(now, capacity, free, queue)
    head, admit, remaining = walk.head, walk.admitted, walk.remaining
    if window is not None and admit:
        window.close(now)  # they start now: their expected ends move with now
    if head is None:
        if not explain:
            return PoolDecision.at_capacity(pool, capacity, used, tuple(t.key for t in walk.admitted))
        return _no_head(pool, capacity, used, walk, queue, now)
    admitted = tuple([t.key for t in admit])
    wide = head.slots
    is_pending = isinstance(head, PendingTask)
    if not is_pending and wide == 1:
        # Airflow hands the next freed slot to the highest-priority task anyway: a 1-slot task cannot
        # be starved, and shrinking the pool would only keep that slot idle until the next tick.
        if not explain:
            return PoolDecision.at_capacity(pool, capacity, used, admitted)
        starting, count = free - remaining, len(admit)
        why = Reason("next-slot", pool, capacity, now, head.key, 1, max(free, 0), starting, admitted, count)
        return PoolDecision.at_capacity(pool, capacity, used, admitted, why)
    if window is not None:
        _bound_window(window, now, head, walk.head_ready, running, gate)
    terms: dict[str, object] = {"code": "reserving"}
    if gate is not None:
        competitor = queue.peek_ready(capacity, other_run=head.run)
        terms = gate.verdict(now, head, competitor, starving)
        if terms["code"] == "not-urgent-enough":
            if not explain:
                return PoolDecision.at_capacity(pool, capacity, used, admitted)
            why = Reason(
                pool=pool,
                capacity=capacity,
                at=now,
                task=head.key,
                slots=wide,
                free=max(free, 0),
                starting=free - remaining,
                admitted=admitted,
                admitted_count=len(admit),
                **terms,  # type: ignore[arg-type]
            )
            return PoolDecision.at_capacity(pool, capacity, used, admitted, why)

    # the tasks started now hold their slots for their expected duration: shadow_time() over the
    # running tasks and them, from their (end, slots) pairs (no RunningTask built for each)
    if wide <= remaining:
        shadow, extra = shadow_time(now, remaining, wide, running)
    else:
        # (`end if end > now else now` is max(now, end), NaN included, without the call)
        ends = [
            (r.expected_end if r.expected_end > now else now, r.slots)
            for r in running
            if r.expected_end is not None and r.slots > 0
        ]
        ends += [(now + t.duration if now + t.duration > now else now, t.slots) for t in admit if t.slots > 0]
        ends.sort()
        shadow, extra = _shadow(remaining, wide, ends)
    if shadow is not None and is_pending:
        shadow = max(shadow, walk.head_ready)  # not before it is expected ready
    # a pending head: what would take the slots freed before it is ready is judged with up to C of them
    tail = queue.tail(head, capacity, capacity if is_pending else remaining)
    # starving: only work ahead of the starving task is backfilled, and with nothing starting the pool
    # closes to min(used, C - w) below: the wait bound
    starved = starving is not None
    picked = []
    if backfill:
        picked = _backfill(now, shadow, extra, remaining, tail.pick, strict_backfill, starving)
    backfill_open = sum([t.slots for t in picked])
    started = free - remaining
    if window is not None and (picked or (shadow == now and not is_pending)):
        window.close(now)  # a backfill starts now; a shadow time of now moves with now
    nothing_else = is_pending and not starved and not tail.rest(picked)
    if window is not None and started == 0 and backfill_open == 0 and is_pending:
        _bound_next_decision(window, now, shadow, next_decision)
    if nothing_else:
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
            or starved
            or _leak_delays(
                now,
                running,
                walk.head_ready,
                shadow,
                extra,
                lambda slots: tail.pick(slots, picked),
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
    backfill_keys = tuple([t.key for t in picked])
    decided: Reason | None = (
        Reason(
            pool=pool,
            capacity=capacity,
            at=now,
            task=head.key,
            slots=wide,
            free=max(free, 0),
            starting=started,
            admitted=admitted,
            admitted_count=len(admit),
            backfill_slots=backfill_open,
            backfill=backfill_keys,
            backfill_count=len(picked),
            until=shadow,
            lookahead=is_pending,
            nothing_else=nothing_else,
            **terms,  # type: ignore[arg-type]
        )
        if explain
        else None  # the simulator reads only the size and the head: no reason built
    )
    return _decision(
        pool,
        capacity,
        size,
        head.key,
        wide,
        max(0, size - (capacity - wide)),
        shadow,
        "" if decided is None else render(decided),
        used,
        backfill_keys,
        admitted,
        is_pending,
        decided,
    )


def _runnable(tasks: Sequence[ReadyTask], capacity: float) -> list[ReadyTask]:
    """The tasks that fit a pool of ``capacity``: only they can starve (Airflow never runs the others
    there; one kept waiting, a fallback rung or while the capacity is low, must not stop the backfill)."""
    return [t for t in tasks if t.slots <= max(0, int(capacity))]


def decide_pools(
    now: float,
    capacity: Mapping[str, int],
    running: Sequence[RunningTask],
    ready: Sequence[ReadyTask],
    backfill: bool = True,
    pending: Sequence[PendingTask] = (),
    strict_backfill: bool = False,
    next_decision: float | None = None,
    gate: ReservationGate | None = None,
) -> dict[str, PoolDecision]:
    """Decide the size of every pool in ``capacity`` (pool -> live capacity ``C``) with :func:`decide_pool`.

    ``running`` are the task instances holding slots (running or queued), ``ready`` those in SCHEDULED
    state, ``pending`` (lookahead) those not scheduled yet whose upstream tasks have all started, with
    their expected ready time (one whose ready time is unknown is ignored). Tasks of pools not in
    ``capacity`` are ignored. With ``backfill=False`` a reservation lets nothing through but the tasks
    ahead of ``W``. ``next_decision``: when the controller decides next (``now + interval``; None: at
    the next event), against which slots left open between two decisions are weighed. ``gate``: the
    objective's :class:`ReservationGate` (None: reserve for every wide head), which also finds a
    pool's starving task among its ready tasks. The returned pool sizes are never negative and never
    above ``C``.
    """
    running_by_pool: dict[str, list[RunningTask]] = defaultdict(list)
    for r in running:
        running_by_pool[r.pool].append(r)
    waiting_by_pool: dict[str, list[ReadyTask]] = defaultdict(list)
    for t in ready:
        waiting_by_pool[t.pool].append(t)
    for p in pending:
        if p.ready_at is not None and p.ready_at == p.ready_at:  # NaN: unknown, as None
            waiting_by_pool[p.pool].append(p)
    return {
        pool: decide_pool(
            now,
            pool,
            max(0, int(cap)),
            running_by_pool.get(pool, []),
            sorted(waiting_by_pool.get(pool, []), key=admission_order),
            backfill,
            strict_backfill,
            next_decision,
            gate,
            None if gate is None else gate.starving(now, _runnable(waiting_by_pool.get(pool, []), cap)),
        )
        for pool, cap in capacity.items()
    }
