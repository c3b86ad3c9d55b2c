"""Reservation through the pool size (decide_pools): the agreed mechanism, hand cases and properties."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.policy.admission import (
    PendingTask,
    ReadyTask,
    RunningTask,
    admission_order,
    stock_admission,
)
from airflow_gpu_dag.core.policy.objective import ReservationGate, key_weight
from airflow_gpu_dag.core.policy.reservation import (
    DecisionWindow,
    PoolDecision,
    decide_pool,
    decide_pools,
    shadow_time,
)


def ready(key: str, slots: int, priority: int, duration: float = 10.0, order: int = 0) -> ReadyTask:
    return ReadyTask(key, "gpu", slots, priority, duration, (order,))


def run(key: str, slots: int, end: float | None) -> RunningTask:
    return RunningTask(key, "gpu", slots, end)


@st.composite
def pool_states(draw: st.DrawFn) -> tuple[int, list[RunningTask], list[ReadyTask]]:
    capacity = draw(st.integers(1, 16))
    running: list[RunningTask] = []
    used = 0
    for i in range(draw(st.integers(0, 8))):
        slots = draw(st.integers(1, capacity))
        if used + slots > capacity:
            break
        used += slots
        running.append(run(f"r{i}", slots, draw(st.floats(0.5, 100.0))))
    waiting = [
        ready(
            f"q{i}",
            draw(st.integers(1, capacity + 2)),
            draw(st.integers(0, 9)),
            draw(st.floats(0.5, 150.0)),
            i,
        )
        for i in range(draw(st.integers(0, 10)))
    ]
    return capacity, running, waiting


@st.composite
def pending_tasks(draw: st.DrawFn, capacity: int) -> list[PendingTask]:
    return [
        PendingTask(
            f"p{i}",
            "gpu",
            draw(st.integers(1, capacity)),
            draw(st.integers(0, 9)),
            draw(st.floats(0.5, 150.0)),
            (100 + i,),
            ready_at=draw(st.floats(0.0, 120.0)),
        )
        for i in range(draw(st.integers(0, 3)))
    ]


def _start_of(
    head_slots: int, capacity: int, running: list[tuple[float, int]], not_before: float = 0.0
) -> float:
    """When ``head_slots`` are free (not before ``not_before``) given (end, slots) of everything holding
    slots (from t=0)."""
    free = capacity - sum(s for _e, s in running)
    if free >= head_slots:
        return not_before
    for end, slots in sorted(running):
        free += slots
        if free >= head_slots:
            return max(end, not_before)
    raise AssertionError("never fits")


def _between_ticks(
    size: int, running: list[RunningTask], ended: set[str], waiting: list[ReadyTask]
) -> list[str]:
    """What Airflow starts after the tasks in ``ended`` finished, before the next decision (the pending
    task is not scheduled yet, so only ``waiting`` competes)."""
    used = sum(r.slots for r in running if r.key not in ended)
    return [x.key for x in stock_admission(waiting, {"gpu": size - used}, {"gpu": size})]


def _as_simulated(decision: PoolDecision) -> tuple[object, ...]:
    """What the simulator reads of a decision (the pool size, the head) and what Airflow then starts."""
    return decision.pool_size, decision.reserved_for, decision.admitted, decision.backfill_tasks


def test_head_task_fits_pool_is_capacity() -> None:
    d = decide_pools(0.0, {"gpu": 8}, [run("r", 4, 50)], [ready("w", 4, 10), ready("s", 1, 1)])["gpu"]
    assert d.pool_size == 8 and d.reserved_for is None and d.backfill_slots == 0


def test_no_ready_task_pool_is_capacity() -> None:
    d = decide_pools(0.0, {"gpu": 8}, [run("r", 4, 50)], [])["gpu"]
    assert (d.pool_size, d.reserved_for, d.shadow_time) == (8, None, None)


def test_reservation_without_backfill_blocks_everything() -> None:
    running = [run("r1", 3, 100.0), run("r2", 2, 40.0)]
    waiting = [ready("wide", 8, 100), ready("s1", 1, 1), ready("s2", 1, 1)]
    d = decide_pools(0.0, {"gpu": 8}, running, waiting, backfill=False)["gpu"]
    assert d.reserved_for == "wide" and d.reserved_slots == 8
    assert d.pool_size == 0  # C - w
    assert d.shadow_time == 100.0
    open_slots = d.pool_size - 5
    assert stock_admission(waiting, {"gpu": open_slots}) == []
    assert "wide" in d.reason


def test_safe_backfill_lets_short_tasks_through_only() -> None:
    # 3 free now; wide (8) needs everything; the running tasks end at 100 -> shadow 100.
    running = [run("r1", 5, 100.0)]
    waiting = [
        ready("wide", 8, 100),
        ready("long", 1, 50, duration=500.0, order=1),
        ready("short_a", 1, 10, duration=30.0, order=2),
        ready("short_b", 1, 10, duration=90.0, order=3),
    ]
    d = decide_pools(0.0, {"gpu": 8}, running, waiting)["gpu"]
    assert d.reserved_for == "wide" and d.shadow_time == 100.0
    open_slots = d.pool_size - 5
    admitted = [x.key for x in stock_admission(waiting, {"gpu": open_slots})]
    # greedy with 3 open slots would pick "long" (higher priority), which ends after the shadow time:
    # the largest safe open count is 0 -> nothing. With "long" absent, both short tasks fit.
    assert admitted == []
    d2 = decide_pools(0.0, {"gpu": 8}, running, [w for w in waiting if w.key != "long"])["gpu"]
    admitted2 = [x.key for x in stock_admission(waiting[:1] + waiting[2:], {"gpu": d2.pool_size - 5})]
    assert admitted2 == ["short_a", "short_b"]
    assert d2.backfill_slots == 8 - 3 + 2 and d2.pool_size == 5 + 2  # trimmed to what is admitted


def test_extra_slots_at_shadow_time_may_run_long_work() -> None:
    # wide needs 4; 2 free; r1 (4 slots) ends at 50 -> at the shadow time 6 are free: 2 extra.
    running = [run("r1", 4, 50.0), run("r2", 2, 1000.0)]
    waiting = [ready("wide", 4, 100), ready("long1", 1, 5, 900.0, 1), ready("long2", 1, 5, 900.0, 2)]
    d = decide_pools(0.0, {"gpu": 8}, running, waiting)["gpu"]
    assert d.shadow_time == 50.0
    admitted = stock_admission(waiting, {"gpu": d.pool_size - 6})
    assert [x.key for x in admitted] == ["long1", "long2"]


def test_strict_backfill_never_runs_past_the_shadow_time() -> None:
    # the same state: strict backfill keeps the 2 spare slots for the tasks planned after wide
    running = [run("r1", 4, 50.0), run("r2", 2, 1000.0)]
    waiting = [ready("wide", 4, 100), ready("long1", 1, 5, 900.0, 1), ready("short", 1, 4, 40.0, 2)]
    d = decide_pools(0.0, {"gpu": 8}, running, waiting, strict_backfill=True)["gpu"]
    assert d.shadow_time == 50.0
    admitted = stock_admission(waiting, {"gpu": d.pool_size - 6})
    assert [x.key for x in admitted] == [] and d.pool_size == 8 - 4  # long1 first in greedy order: unsafe
    rest = [w for w in waiting if w.key != "long1"]
    d2 = decide_pools(0.0, {"gpu": 8}, running, rest, strict_backfill=True)["gpu"]
    assert [x.key for x in stock_admission(rest, {"gpu": d2.pool_size - 6})] == ["short"]


def test_unknown_end_means_no_backfill() -> None:
    d = decide_pools(0.0, {"gpu": 8}, [run("r", 6, None)], [ready("wide", 8, 9), ready("s", 1, 1, 1.0)])[
        "gpu"
    ]
    assert d.shadow_time is None and d.backfill_slots == 0 and d.pool_size == 0


def test_task_wider_than_capacity_is_not_reserved_for() -> None:
    d = decide_pools(0.0, {"gpu": 4}, [], [ready("huge", 8, 100), ready("s", 1, 1)])["gpu"]
    assert d.reserved_for is None and d.pool_size == 4


def test_shadow_time_counts_all_tasks_ending_then() -> None:
    when, extra = shadow_time(0.0, 0, 2, [run("a", 1, 10.0), run("b", 1, 10.0), run("c", 1, 10.0)])
    assert (when, extra) == (10.0, 1)
    assert shadow_time(5.0, 0, 1, [run("late", 1, 1.0)]) == (5.0, 0)  # overdue: ends "now"


def test_29474_stream_of_small_tasks_cannot_starve_wide_task() -> None:
    """A stream of 1-slot tasks keeps arriving; stock admission never starts the 8-slot task,
    reservation starts it as soon as the slots it waits for drain."""
    capacity = 8

    def play(reserve: bool) -> float | None:
        now = 0.0
        running: list[RunningTask] = [RunningTask(f"init{i}", "gpu", 1, float(i + 1)) for i in range(8)]
        waiting = [ready("wide", 8, 100, duration=10.0)]
        serial = 0
        for _step in range(200):
            # two fresh 1-slot tasks (lower priority, 5 s) arrive every second
            for _ in range(2):
                waiting.append(ready(f"s{serial}", 1, 1, duration=5.0, order=serial))
                serial += 1
            running = [r for r in running if r.expected_end is None or r.expected_end > now]
            used = sum(r.slots for r in running)
            size = capacity
            if reserve:
                size = decide_pools(now, {"gpu": capacity}, running, waiting)["gpu"].pool_size
            for task in stock_admission(waiting, {"gpu": size - used}, {"gpu": size}):
                if task.key == "wide":
                    return now
                waiting.remove(task)
                running.append(RunningTask(task.key, "gpu", task.slots, now + task.duration))
            now += 1.0
        return None

    assert play(reserve=False) is None  # starved for all 200 s
    started = play(reserve=True)
    assert started is not None and started <= 8.0  # the initial tasks drain by t=8


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_pool_never_oversubscribed_and_backfill_never_delays_head(data: st.DataObject) -> None:
    capacity, running, waiting = data.draw(pool_states())
    pending = data.draw(pending_tasks(capacity))
    strict = data.draw(st.booleans())
    d = decide_pools(0.0, {"gpu": capacity}, running, waiting, pending=pending, strict_backfill=strict)["gpu"]
    used = sum(r.slots for r in running)
    assert 0 <= d.pool_size <= capacity
    admitted = stock_admission(waiting, {"gpu": d.pool_size - used}, {"gpu": d.pool_size})
    assert used + sum(x.slots for x in admitted) <= capacity
    if d.reserved_for is None:
        return
    # Airflow starts exactly the tasks ahead of W and the backfill, never W's competitors
    assert [x.key for x in admitted] == [*d.admitted, *d.backfill_tasks]
    head = next(x for x in [*waiting, *pending] if x.key == d.reserved_for)
    assert head not in admitted and d.lookahead is isinstance(head, PendingTask)
    ahead = [x for x in waiting if x.key in d.admitted]
    assert all(admission_order(x) < admission_order(head) for x in ahead)
    assert all(admission_order(x) > admission_order(head) for x in admitted if x.key in d.backfill_tasks)
    held = [(r.expected_end or 0.0, r.slots) for r in running] + [(x.duration, x.slots) for x in ahead]
    ready_at = head.ready_at if isinstance(head, PendingTask) else 0.0
    alone = _start_of(head.slots, capacity, held, ready_at or 0.0)
    backfilled = [(x.duration, x.slots) for x in admitted if x.key in d.backfill_tasks]
    with_backfill = _start_of(head.slots, capacity, held + backfilled, ready_at or 0.0)
    assert d.shadow_time == alone
    assert with_backfill <= alone  # the model's start of W is not delayed by what b lets through


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_the_shared_lazy_walk_decides_what_the_whole_list_pass_decides(data: st.DataObject) -> None:
    """decide_pools (the one walk, shared with the simulator, reading the waiting tasks lazily) equals the
    earlier whole-list implementation kept in tests/unit/reservation_reference.py, field for field."""
    from tests.unit.reservation_reference import reference_decide_pools

    capacity, running, waiting = data.draw(pool_states())
    pending = data.draw(pending_tasks(capacity))
    if data.draw(st.booleans()):  # upstream tasks waiting in the same pool (PendingTask.after)
        after = tuple(x.key for x in waiting[: data.draw(st.integers(0, 2))])
        pending = [PendingTask(**{**p.__dict__, "after": after}) for p in pending]
    options: dict[str, Any] = {
        "backfill": data.draw(st.booleans()),
        "strict_backfill": data.draw(st.booleans()),
        "next_decision": data.draw(st.one_of(st.none(), st.floats(0.0, 200.0))),
    }
    now = data.draw(st.sampled_from([0.0, 5.0]))
    ours = decide_pools(now, {"gpu": capacity}, running, waiting, pending=pending, **options)
    reference = reference_decide_pools(now, {"gpu": capacity}, running, waiting, pending=pending, **options)
    assert ours == reference


def test_lookahead_holds_slots_for_a_task_about_to_be_ready() -> None:
    """A planned-early task whose upstream ends in 20 s: ready work that would still run then waits;
    work that ends before it does not."""
    running = [run("upstream", 2, 20.0)]
    soon = PendingTask("soon", "gpu", 6, 100, 60.0, (0,), ready_at=20.0)
    waiting = [ready("short", 2, 50, duration=10.0, order=1), ready("long", 2, 40, duration=300.0, order=2)]
    d = decide_pools(0.0, {"gpu": 6}, running, waiting, pending=[soon])["gpu"]
    assert d.reserved_for == "soon" and d.lookahead and d.shadow_time == 20.0
    admitted = [x.key for x in stock_admission(waiting, {"gpu": d.pool_size - 2})]
    assert admitted == ["short"]
    # without the lookahead both start, and "soon" waits until the long task ends at 300 s
    plain = decide_pools(0.0, {"gpu": 6}, running, waiting)["gpu"]
    assert plain.pool_size == 6 and plain.reserved_for is None and plain.admitted == ("short", "long")


def test_overran_upstream_means_no_lookahead() -> None:
    """The upstream task was expected to end at 20 and is still running at 30: when the pending task
    turns ready is unknown, so nothing is held for it (it is reserved for once ready)."""
    late = PendingTask("late", "gpu", 4, 100, 60.0, (0,), ready_at=20.0)
    d = decide_pools(30.0, {"gpu": 6}, [run("upstream", 2, 20.0)], [ready("a", 2, 1)], pending=[late])["gpu"]
    assert d.reserved_for is None and d.admitted == ("a",)


def test_unknown_ready_time_is_ignored() -> None:
    unknown = PendingTask("p", "gpu", 4, 100, 60.0, (0,), ready_at=None)
    d = decide_pools(0.0, {"gpu": 4}, [], [ready("a", 1, 1)], pending=[unknown])["gpu"]
    assert d.pool_size == 4 and d.reserved_for is None and d.admitted == ("a",)


@settings(max_examples=300, deadline=None)
@given(pool_states())
def test_simulator_cut_of_the_ready_list_decides_the_same(state: tuple) -> None:
    """The simulator hands decide_pools only the part of the ready list that can matter: the tasks
    ahead of the head, the head, and backfill_candidates() of the rest."""
    from airflow_gpu_dag.core.policy.reservation import backfill_candidates

    capacity, running, waiting = state
    full = decide_pools(0.0, {"gpu": capacity}, running, waiting)["gpu"]
    if full.reserved_for is None:
        return
    ordered = sorted(waiting, key=admission_order)
    ahead = [x for x in ordered if x.key in full.admitted]
    head = next(x for x in ordered if x.key == full.reserved_for)
    after = [x for x in ordered[ordered.index(head) + 1 :] if x.slots <= capacity]
    free = capacity - sum(r.slots for r in running) - sum(x.slots for x in ahead)
    cut = [*ahead, head, *backfill_candidates(after, free)]
    part = decide_pools(0.0, {"gpu": capacity}, running, cut)["gpu"]
    assert (part.pool_size, part.reserved_for, part.admitted, part.backfill_tasks) == (
        full.pool_size,
        full.reserved_for,
        full.admitted,
        full.backfill_tasks,
    )


def test_no_reservation_for_a_one_slot_head() -> None:
    """A 1-slot head gets the next freed slot from Airflow itself; a shrunken pool would idle it."""
    running = [RunningTask(f"r{i}", "gpu", 1, expected_end=10.0 + i) for i in range(4)]
    ready = [ReadyTask("head", "gpu", 1, priority=100, duration=5.0), ReadyTask("low", "gpu", 1, 1, 5.0)]
    decision = decide_pools(0.0, {"gpu": 4}, running, ready)["gpu"]
    assert decision.pool_size == 4
    assert decision.reserved_for is None


def test_pending_head_with_nothing_else_waiting_keeps_the_pool_open() -> None:
    """Nothing could take the slots: the pool stays at C and the task starts the moment it is ready,
    not at the next controller tick."""
    soon = PendingTask("soon", "gpu", 4, 100, 60.0, (0,), ready_at=20.0)
    d = decide_pools(0.0, {"gpu": 4}, [run("upstream", 1, 20.0)], [], pending=[soon])["gpu"]
    assert d.reserved_for == "soon" and d.pool_size == 4 and "nothing else waiting" in d.reason


def test_a_tie_is_not_a_plan() -> None:
    """A pending task holds back only ready work of lower priority; equal priorities (e.g. the
    ``downstream`` rule's ties) are not an order to enforce."""
    soon = PendingTask("soon", "gpu", 2, 5, 60.0, (0,), ready_at=20.0)
    same = [ready("a", 2, 5, duration=100.0, order=1)]
    d = decide_pools(0.0, {"gpu": 4}, [run("upstream", 1, 20.0)], same, pending=[soon])["gpu"]
    assert d.reserved_for is None and d.admitted == ("a",)
    lower = [ready("a", 2, 4, duration=100.0, order=1)]
    d = decide_pools(0.0, {"gpu": 4}, [run("upstream", 1, 20.0)], lower, pending=[soon])["gpu"]
    assert d.reserved_for == "soon" and d.admitted == () and d.pool_size == 1


def test_pending_task_behind_an_upstream_started_now() -> None:
    """ "train" waits for "init", which waits in the pool and is started by this decision: "train" is
    expected ready when "init" ends, and the slots it needs then are kept."""
    init = ready("init", 1, 9, duration=10.0, order=0)
    train = PendingTask("train", "gpu", 4, 8, 100.0, (1,), ready_at=0.0, after=("init",))
    filler = ready("filler", 2, 1, duration=50.0, order=2)
    d = decide_pools(0.0, {"gpu": 4}, [], [init, filler], pending=[train])["gpu"]
    assert d.admitted == ("init",) and d.reserved_for == "train" and d.shadow_time == 10.0
    assert d.pool_size == 1  # "filler" would run past 10 s
    # an upstream that does not start now: "train" is not about to be ready, nothing is held back
    blocked = PendingTask("train", "gpu", 4, 8, 100.0, (1,), ready_at=0.0, after=("elsewhere",))
    d = decide_pools(0.0, {"gpu": 4}, [], [init, filler], pending=[blocked])["gpu"]
    assert d.reserved_for is None and d.admitted == ("init", "filler")


def test_slots_freed_before_a_pending_task_is_ready_are_held_when_they_would_delay_it() -> None:
    """ "prep" (1 slot) ends at 5 and makes "wide" (4 slots) ready; three 1-slot tasks run until 8. A
    600-s task would take prep's slot between two ticks and hold it past 8: the pool is C - w = 0."""
    running = [run("prep", 1, 5.0), *(run(f"s{i}", 1, 8.0) for i in range(3))]
    wide = PendingTask("wide", "gpu", 4, 100, 60.0, (0,), ready_at=5.0)
    long = [ready("long", 1, 1, duration=600.0, order=1)]
    d = decide_pools(0.0, {"gpu": 4}, running, long, pending=[wide], next_decision=2.0)["gpu"]
    assert d.reserved_for == "wide" and d.shadow_time == 8.0 and d.pool_size == 0
    assert _between_ticks(d.pool_size, running, {"prep"}, long) == []
    # the same pool sized to what runs (4) would hand prep's slot to "long"
    assert _between_ticks(4, running, {"prep"}, long) == ["long"]


def test_slots_freed_before_a_pending_task_is_ready_stay_open_when_harmless() -> None:
    running = [run("prep", 1, 5.0), *(run(f"s{i}", 1, 8.0) for i in range(3))]
    wide = PendingTask("wide", "gpu", 4, 100, 60.0, (0,), ready_at=5.0)
    # work that ends by the shadow time (8) may take the slot: pool = what runs
    short = [ready("short", 1, 1, duration=2.0, order=1)]
    assert (
        decide_pools(0.0, {"gpu": 4}, running, short, pending=[wide], next_decision=2.0)["gpu"].pool_size == 4
    )
    # the next decision is far away (60-s tick): what the slot idles until then costs more than a 30-s
    # task delays "wide" past it, so the slot stays open
    medium = [ready("medium", 1, 1, duration=30.0, order=1)]
    far = decide_pools(0.0, {"gpu": 4}, running, medium, pending=[wide], next_decision=60.0)["gpu"]
    near = decide_pools(0.0, {"gpu": 4}, running, medium, pending=[wide], next_decision=2.0)["gpu"]
    assert (far.pool_size, near.pool_size) == (4, 0)
    # enough slots free by the time "wide" is ready: it takes them first (Airflow admits by priority)
    narrow = PendingTask("narrow", "gpu", 1, 100, 60.0, (0,), ready_at=5.0)
    long = [ready("long", 1, 1, duration=600.0, order=1)]
    d = decide_pools(0.0, {"gpu": 4}, running, long, pending=[narrow], next_decision=2.0)["gpu"]
    assert d.reserved_for == "narrow" and d.pool_size == 4


def test_work_of_unknown_length_is_never_backfilled_as_if_it_ended_in_time() -> None:
    """A NaN estimate made `now + duration > shadow` false: with strict backfill the task was admitted as
    "work that ends before the reserved task can start". Its end is unknown: it may run past it."""
    running = [run("r1", 4, 50.0), run("r2", 2, 1000.0)]
    waiting = [ready("wide", 4, 100), ready("unknown", 1, 5, float("nan"), 1)]
    d = decide_pools(0.0, {"gpu": 8}, running, waiting, strict_backfill=True)["gpu"]
    assert d.backfill_tasks == () and stock_admission(waiting, {"gpu": d.pool_size - 6}) == []
    known = [ready("wide", 4, 100), ready("known", 1, 5, 40.0, 1)]
    d = decide_pools(0.0, {"gpu": 8}, running, known, strict_backfill=True)["gpu"]
    assert d.backfill_tasks == ("known",)  # a task known to end in time still is


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_a_decision_holds_inside_its_window_and_explain_changes_only_the_words(data: st.DataObject) -> None:
    """decide_pool's DecisionWindow (how the simulator skips ticks): at any later ``now`` before
    ``until``, with the next decision no later than ``next_until``, the same running and waiting tasks
    get the same pool size, head and backfill; running tasks past their expected end, pending tasks,
    keys that pass the gate's ``overdue`` included. ``explain=False`` decides the same, without words."""
    capacity, running, waiting = data.draw(pool_states())
    now = data.draw(st.sampled_from([0.0, 30.0, 60.0]))  # running tasks end in 0.5-100: some have overrun
    tasks: list[ReadyTask] = [*waiting, *data.draw(pending_tasks(capacity))]
    gate = None
    if data.draw(st.booleans()):  # weights that are keys: the gate weighs the head against other runs
        epoch = -1000.0
        keyed = {t.key: key_weight(epoch + 10.0 * t.priority, epoch) for t in tasks}
        tasks = [dataclasses.replace(t, priority=keyed[t.key], run=t.key[-1]) for t in tasks]
        overdue = data.draw(st.floats(1.0, 90.0))
        gate = ReservationGate(gap=data.draw(st.sampled_from([0.0, 20.0])), overdue=overdue, epoch=epoch)
    tasks.sort(key=admission_order)
    interval = data.draw(st.sampled_from([None, 2.0, 60.0]))
    options: dict[str, Any] = {
        "backfill": data.draw(st.booleans()),
        "strict_backfill": data.draw(st.booleans()),
        "gate": gate,
    }

    def decide(at: float, **more: Any) -> PoolDecision:
        following = None if interval is None else at + interval
        return decide_pool(at, "gpu", capacity, running, tasks, next_decision=following, **options, **more)

    window = DecisionWindow()
    first = decide(now, window=window)
    quiet = decide(now, explain=False)
    assert quiet == dataclasses.replace(first, reason="") and quiet.why is None
    for fraction in (0.3, 0.999):
        later = now + fraction * (min(window.until, now + 500.0) - now)
        if now < later < window.until and (interval is None or later + interval <= window.next_until):
            assert _as_simulated(decide(later)) == _as_simulated(first), (later, window.until)


def test_a_window_ends_before_the_first_running_task_ends_or_at_now_for_one_past_its_end() -> None:
    window = DecisionWindow()
    window.before_ends(100.0, [RunningTask("a", "gpu", 1, 250.0), RunningTask("b", "gpu", 1, None)])
    assert window.until == 250.0  # a task with no expected end bounds nothing
    window.before_ends(100.0, [RunningTask("c", "gpu", 1, 180.0), RunningTask("d", "gpu", 1, float("nan"))])
    assert window.until == 180.0
    window.before_ends(100.0, [RunningTask("e", "gpu", 2, 90.0)])  # past its end: ends "now", which moves
    assert window.until == 100.0
    window.before_ends(100.0, [RunningTask("f", "gpu", 1, 400.0)])  # never widens
    assert window.until == 100.0 and window.next_until == math.inf


EPOCH = 0.0


NOW = 1000.0


def _task(key: str, slots: int, at: float, duration: float, order: int, since: float) -> ReadyTask:
    return ReadyTask(key, "gpu", slots, key_weight(at, EPOCH), duration, (order,), run=key, since=since)


def test_a_task_wider_than_the_pool_does_not_override_the_reservation_gate() -> None:
    """An 8-GPU task kept waiting in a pool now of 4 (a host lost, ``too_large_action = keep``, a fallback
    rung) has waited past ``overdue``: before, as 'starving' it forced a reservation the gate refuses and
    closed the pool to 0, although Airflow can never run it there."""
    gate = ReservationGate(gap=3600.0, overdue=100.0, epoch=EPOCH)
    too_wide = _task("x", 8, 0.0, 50.0, 0, since=0.0)
    wide = _task("w", 4, 1000.0, 50.0, 1, since=990.0)
    small = _task("b", 1, 1010.0, 10.0, 2, since=990.0)
    running = [RunningTask("r", "gpu", 2, NOW + 100.0)]
    without = decide_pools(NOW, {"gpu": 4}, running, [wide, small], gate=gate)["gpu"]
    assert without.reserved_for is None and without.pool_size == 4
    decision = decide_pools(NOW, {"gpu": 4}, running, [too_wide, wide, small], gate=gate)["gpu"]
    assert (decision.reserved_for, decision.pool_size) == (None, 4), decision.reason


def test_a_task_wider_than_the_pool_does_not_stop_the_backfill() -> None:
    """With every wide head reserved for (gap 0), a short task that ends before the wide one could
    start is backfilled; before, the unrunnable 'starving' task stopped every backfill behind it."""
    gate = ReservationGate(gap=0.0, overdue=100.0, epoch=EPOCH)
    too_wide = _task("x", 8, 0.0, 50.0, 0, since=0.0)
    wide = _task("w", 4, 10.0, 50.0, 1, since=990.0)
    small = _task("b", 1, 20.0, 10.0, 2, since=990.0)
    running = [RunningTask("r", "gpu", 2, NOW + 100.0)]
    decision = decide_pools(NOW, {"gpu": 4}, running, [too_wide, wide, small], gate=gate)["gpu"]
    assert decision.reserved_for == "w"
    assert decision.backfill_tasks == ("b",) and decision.pool_size == 3, decision.reason
    # the same when a caller hands decide_pool that task as the starving one
    alone = decide_pool(NOW, "gpu", 4, running, [too_wide, wide, small], gate=gate, starving=too_wide)
    assert alone.backfill_tasks == ("b",) and alone.pool_size == 3, alone.reason


@given(pool_states(), st.floats(0.0, 50.0))
def test_the_shadow_time_of_a_decision_counts_the_tasks_it_starts_as_running(
    state: tuple, now: float
) -> None:
    # decide_pool reads the ends of the running tasks and of those it starts now as (end, slots) pairs,
    # without a RunningTask for each: the shadow time is what shadow_time() finds over all of them
    capacity, running, waiting = state
    decision = decide_pool(now, "gpu", capacity, running, sorted(waiting, key=admission_order))
    if decision.reserved_for is None:
        return
    starting = {t.key: t for t in waiting if t.key in decision.admitted}
    holding = [*running, *(run(k, t.slots, now + t.duration) for k, t in starting.items())]
    free = capacity - sum(r.slots for r in running) - sum(t.slots for t in starting.values())
    assert decision.shadow_time == shadow_time(now, free, decision.reserved_slots, holding)[0]


@given(
    st.tuples(
        st.text(max_size=3),
        st.integers(-2, 16),
        st.integers(-2, 16),
        st.none() | st.text(max_size=3),
        st.integers(0, 16),
        st.integers(0, 16),
        st.none() | st.floats(allow_nan=False),
        st.text(max_size=5),
        st.integers(0, 16),
        st.lists(st.text(max_size=2), max_size=3).map(tuple),
        st.lists(st.text(max_size=2), max_size=3).map(tuple),
        st.booleans(),
    )
)
def test_a_decision_built_without_the_dataclass_init_is_the_same_decision(values: tuple[Any, ...]) -> None:
    # decide_pool builds its PoolDecision without the frozen dataclass's __init__ (reservation._decision):
    # the same fields, equal, the same hash and repr, and as immutable
    from airflow_gpu_dag.core.policy import reservation

    why = reservation.Reason("idle", "gpu", 8, 0.0)
    fast = reservation._decision(*values, why)
    built = PoolDecision(*values, why=why)
    assert fast == built and hash(fast) == hash(built) and repr(fast) == repr(built)
    assert vars(fast) == vars(built)
    assert [f.name for f in dataclasses.fields(PoolDecision)] == list(vars(fast))
    try:
        fast.pool_size = 0  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a decision must stay immutable")
    at_capacity = PoolDecision.at_capacity(values[0], values[1], values[8], values[10], why)
    expected = PoolDecision(
        values[0],
        values[1],
        values[1],
        None,
        0,
        0,
        None,
        at_capacity.reason,
        values[8],
        (),
        values[10],
        why=why,
    )
    assert vars(at_capacity) == vars(expected)


def _docs_example(*extra: ReadyTask) -> PoolDecision:
    """docs/watermarks.md ("Reservation"): ``train_a`` holds 5 of 8 GPUs until t=100; ``train_big`` (8 GPUs)
    waits ahead of two short evaluations."""
    waiting = [
        ReadyTask("train_big", "gpu", 8, 900, 3600.0),
        ReadyTask("eval_1", "gpu", 1, 10, 30.0),
        ReadyTask("eval_2", "gpu", 1, 10, 90.0),
        *extra,
    ]
    return decide_pools(0.0, {"gpu": 8}, [RunningTask("train_a", "gpu", 5, 100.0)], waiting)["gpu"]


def test_the_documented_example_backfills_the_work_that_ends_before_the_wide_task_can_start() -> None:
    d = _docs_example()
    assert (d.pool_size, d.reserved_for, d.reserved_slots, d.backfill_slots, d.shadow_time) == (
        7,
        "train_big",
        8,
        7,
        100.0,
    )
    assert d.backfill_tasks == ("eval_1", "eval_2") and d.admitted == () and d.used == 5
    assert "train_big" in d.reason and d.why is not None and d.why.code == "reserving"


def test_the_documented_example_closes_the_pool_when_greedy_admission_would_pick_long_work() -> None:
    """With ``eval_late`` (priority 50, 500 s) any open slot goes to it first and it would still run at
    t=100: no backfill is safe, the pool is 0 and Airflow starts nothing."""
    d = _docs_example(ReadyTask("eval_late", "gpu", 1, 50, 500.0))
    assert (d.pool_size, d.reserved_for, d.backfill_tasks, d.backfill_slots) == (0, "train_big", (), 0)


def test_the_documented_lookahead_example_reserves_for_the_pending_task() -> None:
    d = decide_pools(
        0.0,
        {"gpu": 8},
        [RunningTask("prep", "gpu", 1, 20.0)],
        [ReadyTask("eval_1", "gpu", 1, 10, 15.0), ReadyTask("eval_long", "gpu", 4, 5, 500.0)],
        pending=[PendingTask("finetune", "gpu", 4, 900, 3600.0, ready_at=20.0)],
    )["gpu"]
    assert (d.reserved_for, d.lookahead, d.shadow_time, d.backfill_tasks, d.pool_size) == (
        "finetune",
        True,
        20.0,
        ("eval_1",),
        2,
    )


def test_the_shadow_time_is_now_when_enough_slots_are_free() -> None:
    assert shadow_time(42.0, 5, 3, [run("r", 4, 100.0)]) == (42.0, 2)


def test_the_shadow_time_ends_overdue_tasks_now_never_ends_unknown_ones_and_counts_ties() -> None:
    running = [run("overdue", 2, 5.0), run("b", 2, 30.0), run("tie", 1, 30.0), run("unknown", 3, None)]
    # free 1 + overdue 2 (at now=10) is 3 < 4; at 30, b and tie end together: 6 free, 2 beyond the 4
    assert shadow_time(10.0, 1, 4, running) == (30.0, 2)


def test_the_shadow_time_is_unknown_when_only_tasks_of_unknown_end_hold_the_slots() -> None:
    assert shadow_time(0.0, 1, 4, [run("a", 3, None), run("b", 4, None)]) == (None, 0)
    assert shadow_time(0.0, 0, 4, []) == (None, 0)


def test_backfill_candidates_keep_what_fits_up_to_the_free_th_one_slot_task() -> None:
    from airflow_gpu_dag.core.policy.reservation import backfill_candidates

    after = [ready(f"t{i}", s, 1, order=i) for i, s in enumerate([1, 4, 3, 2, 1, 1, 1, 2])]
    assert [t.key for t in backfill_candidates(after, 3)] == ["t0", "t2", "t3", "t4", "t5"]
    assert backfill_candidates(after, 0) == [] and backfill_candidates(after, -2) == []
    assert backfill_candidates(iter(after), 3) == backfill_candidates(after, 3)


def test_a_decision_window_only_ever_narrows() -> None:
    window = DecisionWindow()
    assert (window.until, window.next_until) == (math.inf, math.inf)
    window.before(500.0)
    window.before(900.0)
    assert window.until == 500.0
    window.near(400.0)  # a rounded threshold: stops a little earlier than 400
    assert 399.99 < window.until < 400.0
    window.close(100.0)
    window.before(300.0)
    assert window.until == 100.0 and window.next_until == math.inf


def test_a_generator_of_waiting_tasks_is_read_only_as_far_as_the_decision_needs() -> None:
    """``waiting`` may be a generator over a long queue: here an endless stream of 1-slot tasks behind a
    wide head, with 2 slots free. The decision reads the head and a few more, never the whole stream."""
    read = 0

    def endless() -> Iterator[ReadyTask]:
        nonlocal read
        read += 1
        yield ready("wide", 8, 100, 50.0, 0)
        for i in itertools.count(1):
            read += 1
            yield ready(f"s{i}", 1, 1, 5.0, i)

    d = decide_pool(0.0, "gpu", 8, [run("r", 6, 50.0)], endless())
    assert d.reserved_for == "wide" and d.backfill_tasks == ("s1", "s2") and d.pool_size == 8
    assert read <= 4


def test_a_capacity_dropped_below_what_runs_closes_the_pool_and_never_goes_negative() -> None:
    """The watermark fell to 4 while 8 slots are held (running tasks are never preempted)."""
    d = decide_pools(0.0, {"gpu": 4}, [run("r", 8, 50.0)], [ready("w", 4, 9), ready("s", 1, 1, order=1)])[
        "gpu"
    ]
    assert (d.pool_size, d.reserved_for, d.used, d.shadow_time) == (0, "w", 8, 50.0)


def test_a_negative_or_fractional_capacity_is_clamped_and_truncated() -> None:
    waiting = [ready("w", 2, 9)]
    negative = decide_pools(0.0, {"gpu": -3}, [], waiting)["gpu"]
    assert (negative.capacity, negative.pool_size, negative.reserved_for) == (0, 0, None)
    fractional = decide_pools(0.0, {"gpu": 2.7}, [], waiting)["gpu"]  # type: ignore[dict-item]
    assert (fractional.capacity, fractional.pool_size, fractional.admitted) == (2, 2, ("w",))


def test_tasks_of_unmanaged_pools_are_ignored_and_an_empty_pool_gets_its_capacity() -> None:
    elsewhere = [RunningTask("x", "tpu", 5, 100.0)]
    d = decide_pools(0.0, {"gpu": 8}, elsewhere, [ReadyTask("y", "tpu", 8, 9, 10.0)])["gpu"]
    assert (d.pool_size, d.used, d.reserved_for, d.why is not None and d.why.code) == (8, 0, None, "idle")
    assert decide_pools(0.0, {}, elsewhere, [ReadyTask("y", "tpu", 8, 9, 10.0)]) == {}


@pytest.mark.parametrize(
    ("waiting", "pending", "code"),
    [
        ([], [], "idle"),
        ([ready("huge", 9, 1)], [], "too-wide"),
        ([ready("a", 2, 1)], [], "fits"),
        ([], [PendingTask("late", "gpu", 4, 9, 1.0, (0,), ready_at=-5.0)], "not-ready"),
    ],
)
def test_a_pool_with_nothing_to_reserve_for_says_why_at_capacity(
    waiting: list[ReadyTask], pending: list[PendingTask], code: str
) -> None:
    d = decide_pools(0.0, {"gpu": 8}, [], waiting, pending=pending)["gpu"]
    assert (d.pool_size, d.reserved_for, d.why is not None and d.why.code) == (8, None, code)
    assert d.reason


def test_a_starving_task_lets_only_work_ahead_of_it_backfill() -> None:
    running = [run("r", 4, 100.0)]
    waiting = [ready("wide", 8, 100, 50.0, 0), ready("a", 1, 50, 10.0, 1)]
    waiting += [ready("starve", 1, 40, 10.0, 2), ready("b", 1, 30, 10.0, 3)]
    free = decide_pool(0.0, "gpu", 8, running, waiting)
    assert free.backfill_tasks == ("a", "starve", "b")
    bounded = decide_pool(0.0, "gpu", 8, running, waiting, starving=waiting[2])
    assert (bounded.backfill_tasks, bounded.pool_size, bounded.reserved_for) == (("a",), 5, "wide")
    first = decide_pool(0.0, "gpu", 8, running, waiting, starving=waiting[1])
    assert (first.backfill_tasks, first.pool_size) == ((), 0)  # min(used, C - w)


def test_decide_pools_sorts_the_ready_tasks_itself() -> None:
    waiting = [ready("s1", 1, 1, 5.0, 1), ready("wide", 8, 100, 50.0, 0), ready("s2", 1, 1, 500.0, 2)]
    running = [run("r", 4, 100.0)]
    assert (
        decide_pools(0.0, {"gpu": 8}, running, waiting)["gpu"]
        == decide_pools(0.0, {"gpu": 8}, running, sorted(waiting, key=admission_order))["gpu"]
    )


def test_two_decisions_that_set_a_pool_alike_are_equal_whatever_their_reason() -> None:
    quiet = PoolDecision.at_capacity("gpu", 8, 2, ("a",))
    assert quiet.reason == "" and quiet.why is None and quiet.pool_size == 8
    explained = decide_pools(0.0, {"gpu": 8}, [run("r", 2, 10.0)], [ready("a", 1, 1)])["gpu"]
    assert explained.why is not None and explained.reason
    assert explained == dataclasses.replace(quiet, reason=explained.reason)


def test_a_pending_task_whose_ready_time_is_nan_is_ignored_like_an_unknown_one() -> None:
    """An upstream task's NaN estimate (the simulator's ``estimates``, a learned duration) makes the
    expected ready time NaN: unknown, as for ``ready_at=None`` or an overrun, so nothing is held for it.
    Instead it is reserved for, and the ready 1-slot task stays out of 3 idle slots."""
    running = [run("up", 1, 10.0)]
    waiting = [ready("small", 1, 2, duration=200.0, order=1)]

    def decide(ready_at: float | None) -> PoolDecision:
        pending = [PendingTask("after_up", "gpu", 4, 3, 10.0, (0,), ready_at=ready_at)]
        return decide_pools(0.0, {"gpu": 4}, running, waiting, pending=pending)["gpu"]

    assert (decide(None).pool_size, decide(None).reserved_for) == (4, None)
    assert (decide(math.nan).pool_size, decide(math.nan).reserved_for) == (4, None)
