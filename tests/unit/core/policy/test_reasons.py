"""The controller's reasons as data: a code per decision, the same sentence as before, kept in the pool's
state (bounded, parseable by every reader), counted by the metrics, and read back per task."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask, RunningTask, admission_order
from airflow_gpu_dag.core.policy.objective import ReservationGate, key_weight
from airflow_gpu_dag.core.policy.reasons import (
    CODES,
    MAX_LISTED,
    Reason,
    for_task,
    reason_from_json,
    reason_to_json,
    render,
)
from airflow_gpu_dag.core.policy.reservation import decide_pool, decide_pools
from airflow_gpu_dag.pool_claim.state import PoolState, comparable, needs_write, parse_pool_state, with_state
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController, describe
from airflow_gpu_dag.watermark.sources import PoolCapacity
from tests.unit.watermark.conftest import (
    NOW,
    FakeRest,
    Source,
    ti,
)

HOUR = 3600.0


def ready(key: str, slots: int, priority: int, duration: float = 10.0, **kw: Any) -> ReadyTask:
    return ReadyTask(key, "gpu", slots, priority, duration, (0,), **kw)


def decide(running: list[RunningTask], waiting: list[ReadyTask], capacity: int = 4, **kw: Any) -> Any:
    return decide_pools(100.0, {"gpu": capacity}, running, waiting, **kw)["gpu"]


@st.composite
def gated_pools(draw: st.DrawFn) -> tuple[Any, ...]:
    now = 1_800_000_000.0
    capacity = draw(st.integers(1, 6))
    running = [
        RunningTask(f"r{i}", "gpu", draw(st.integers(1, capacity)), now + draw(st.floats(1, 5 * HOUR)))
        for i in range(draw(st.integers(0, 2)))
    ]
    waiting = []
    for i in range(draw(st.integers(1, 5))):
        key_at = now - draw(st.floats(-5 * HOUR, 12 * HOUR))
        weight = draw(st.sampled_from([key_weight(key_at), draw(st.integers(1, 100))]))
        since = draw(st.one_of(st.none(), st.floats(now - 12 * HOUR, now)))
        run = draw(st.sampled_from(["a", "b", ""]))
        waiting.append(
            ReadyTask(
                f"t{i}",
                "gpu",
                draw(st.integers(1, capacity)),
                weight,
                draw(st.floats(1, HOUR)),
                (i,),
                run=run,
                since=since,
            )
        )
    return now, capacity, running, waiting


# -- one code per case, and the sentence of docs/watermarks.md unchanged ------------------------------------
def test_each_case_of_the_walk_has_its_code_and_its_sentence() -> None:
    cases = [
        (decide([], []), "idle", "no task waiting; pool = capacity"),
        (
            decide([], [ready("a", 1, 5), ready("b", 2, 4)]),
            "fits",
            "2 waiting task(s) start, nothing to reserve for; pool = capacity",
        ),
        (decide([], [ready("huge", 8, 5)]), "too-wide", "no waiting task fits capacity 4; pool = capacity"),
        (
            decide([], [], pending=[PendingTask("p", "gpu", 2, 9, 10.0, (0,), ready_at=50.0)]),
            "not-ready",
            "no task ready, none to reserve for yet; pool = capacity",
        ),
        (
            decide([RunningTask("r", "gpu", 4, 150.0)], [ready("one", 1, 5)]),
            "next-slot",
            "one (1 slot) takes the next free slot; pool = capacity",
        ),
        (
            decide([RunningTask("r", "gpu", 3, 150.0)], [ready("wide", 4, 9), ready("s", 1, 1, 20.0)]),
            "reserving",
            "reserving 4 slots for wide: 1 of 4 free, slots expected free at +50s; backfill 1 slot(s) for "
            "work that cannot delay it",
        ),
    ]
    for decision, code, sentence in cases:
        assert decision.why is not None and decision.why.code == code, decision
        assert decision.reason == sentence == render(decision.why)
        assert code in CODES


def test_the_reserving_reason_names_the_tasks_and_the_times() -> None:
    d = decide(
        [RunningTask("r", "gpu", 2, 160.0)],
        [ready("first", 1, 10), ready("wide", 4, 9), ready("short", 1, 2, 30.0), ready("long", 1, 1, 500.0)],
    )
    why = d.why
    assert why is not None
    assert (why.code, why.task, why.slots, why.free, why.starting) == ("reserving", "wide", 4, 2, 1)
    assert why.admitted == ("first",) and why.backfill == ("short",) and why.backfill_slots == 1
    assert why.at == 100.0 and why.until == d.shadow_time == 160.0
    assert d.reason.startswith(
        "reserving 4 slots for wide: 2 of 4 free, 1 starting first, slots expected free"
    )


def test_gate_cases_have_their_codes_and_the_gates_words() -> None:
    gate = ReservationGate(gap=4 * HOUR, overdue=8 * HOUR)
    now = 1_800_000_000.0
    busy = [RunningTask("busy", "gpu", 6, now + HOUR)]
    wide = ready("wide", 4, key_weight(now - HOUR), 600.0)
    close = ready("eval", 1, key_weight(now), 600.0)
    d = decide_pools(now, {"gpu": 8}, busy, [wide, close], gate=gate)["gpu"]
    assert d.why is not None
    assert d.why.code == "not-urgent-enough" and d.why.competitor == "eval" and d.why.key_gap == HOUR
    assert not gate.holds_for(now, wide, close) and d.reason == render(d.why)
    assert d.reason == (
        "wide (4 slots) is not urgent enough to hold slots for: its key is 3600s before eval's (gap 14400s) "
        "and 3600s past (overdue after 28800s); pool = capacity"
    )
    old = ready("wide", 4, key_weight(now - 9 * HOUR), 600.0)
    d = decide_pools(now, {"gpu": 8}, busy, [old, close], gate=gate)["gpu"]
    assert d.why is not None and d.why.code == "overdue"
    assert d.reason.endswith("; 32400s past its key: overdue")
    # fair's gate: no hold for a head past its key, the words say when it will be held for
    ready_gate = ReservationGate(gap=4 * HOUR, overdue=8 * HOUR, past_key_holds=False)
    near = ready("eval", 1, key_weight(now - 8.5 * HOUR), 600.0)  # half an hour after old's key
    assert decide_pools(now, {"gpu": 8}, busy, [old, near], gate=gate)["gpu"].reserved_for == "wide"
    d = decide_pools(now, {"gpu": 8}, busy, [old, near], gate=ready_gate)["gpu"]
    assert d.why is not None and d.why.code == "not-urgent-enough" and d.why.from_ready
    assert not ready_gate.holds_for(now, old, near) and d.reason == render(d.why)
    assert "and held for once it has waited 28800s since it turned ready; pool = capacity" in d.reason
    back = reason_from_json(json.loads(json.dumps(reason_to_json(d.why))))
    assert back is not None and render(back) == d.reason


@settings(max_examples=300, deadline=None)
@given(gated_pools())
def test_with_the_gate_the_reason_carries_the_gates_verdict(state: Any) -> None:
    """Each gated decision's reason is the gate's verdict (ReservationGate.verdict) on its head: the
    same code and figures, slots held exactly when the gate holds for it, and the sentence is the
    reservation's, with the starving or overdue clause, or the gate's refusal."""
    now, capacity, running, waiting = state
    gate = ReservationGate(gap=4 * HOUR, overdue=8 * HOUR, past_key_holds=len(waiting) % 2 == 0)
    ordered = sorted(waiting, key=admission_order)
    starving = gate.starving(now, [t for t in waiting if t.slots <= capacity])
    d = decide_pool(now, "gpu", capacity, running, ordered, gate=gate, starving=starving)
    why = d.why
    assert why is not None and render(why) == d.reason
    if why.task is None or why.code == "next-slot":
        return
    head = next(t for t in ordered if t.key == why.task)
    competitor = next(
        (
            t
            for t in ordered[ordered.index(head) + 1 :]
            if not t.run or (t.run != head.run and t.slots <= capacity)
        ),
        None,
    )
    verdict = gate.verdict(now, head, competitor, starving)
    assert {name: getattr(why, name) for name in verdict} == verdict
    assert gate.holds_for(now, head, competitor, starving) == why.holds
    if why.holds:
        assert d.reason.startswith(f"reserving {head.slots} slots for {head.key}")
        assert ("starving (" in d.reason) == (why.code == "starving")
        assert d.reason.endswith("past its key: overdue") == (why.code == "overdue")
    else:
        assert d.reason.startswith(f"{head.key} ({head.slots} slots) is not urgent enough to hold slots")
        assert d.reserved_for is None
    back = reason_from_json(json.loads(json.dumps(reason_to_json(why))))
    assert back is not None and render(back) == d.reason


# -- kept in the pool's state ------------------------------------------------------------------------------
def test_the_description_carries_the_decision_as_data_and_old_readers_still_parse_it() -> None:
    d = decide([RunningTask("r", "gpu", 3, 150.0)], [ready("d/r/wide/-1", 4, 9), ready("s", 1, 1, 20.0)])
    text = describe(PoolCapacity(4, "ok", "static 4", 0, 4), d, d.pool_size, ("g", "h", 500.0), 10.0)
    assert "| reserving 4 slots for d/r/wide/-1: 1 of 4 free" in text
    state = parse_pool_state(text)
    assert state is not None and state.why == d.why and state.interval == 10.0
    assert (state.capacity, state.lease, state.holder, state.expires) == (4, "g", "h", 500.0)
    # the Critical path page's reader of the words is unchanged
    from airflow_gpu_dag.plugins.critical_path_page.data import parse_pool_description

    assert parse_pool_description(text) == (4, 4, "d/r/wide/-1")
    # a released pool carries no decision (nobody decides for it)
    assert state.unclaimed().why is None and state.unclaimed().interval is None


def test_keys_with_closing_brackets_do_not_end_the_state_early() -> None:
    why = Reason("reserving", "gpu", 4, 1.0, task="d/manual__x}]y/t/-1", slots=4, admitted=("a}]", "b"))
    text = with_state("gpu-dag watermark: pool 0 of capacity 4", PoolState(4, 0, 4, why=why))
    assert text.count("}]") == 1 and parse_pool_state(text).why == why  # type: ignore[union-attr]


def test_the_state_stays_bounded_with_a_long_queue() -> None:
    long_key = "d" * 250 + "/" + "r" * 250 + "/" + "t" * 250 + "/-1"
    waiting = [ready(f"{long_key}{i}", 1, 100, 5.0) for i in range(400)]
    d = decide([], waiting, capacity=400)
    assert d.why is not None and d.why.code == "fits" and d.why.admitted_count == 400
    text = describe(PoolCapacity(400, "ok", "static", 0, 400), d, 400, ("g", "h", 9.0), 60.0)
    assert len(text) < 8000
    state = parse_pool_state(text)
    assert state is not None and state.why is not None and len(state.why.admitted) == MAX_LISTED
    assert state.why.admitted_count == 400 and render(state.why) == d.reason


def test_garbage_reasons_read_as_absent() -> None:
    bads: tuple[object, ...] = (None, [], {"code": "nonsense", "pool": "gpu"}, {"code": "idle"}, "x")
    for bad in bads:
        assert reason_from_json(bad) is None
    odd = reason_from_json({"code": "idle", "pool": "gpu", "capacity": "4", "at": True, "admitted": [1, "a"]})
    assert odd is not None and odd.capacity == 0 and odd.at == 0.0 and odd.admitted == ("a",)
    text = 'x [gpu-dag-state {"capacity":4,"why":{"code":"reserving","pool":"gpu","until":"soon"}}]'
    state = parse_pool_state(text)
    assert state is not None and state.capacity == 4 and state.why is not None and state.why.until is None


def test_a_decision_whose_only_change_is_its_time_is_not_rewritten() -> None:
    running = [RunningTask("r", "gpu", 3, 150.0)]
    waiting = [ready("wide", 4, 9)]
    first = decide_pools(100.0, {"gpu": 4}, running, waiting)["gpu"]
    later = decide_pools(104.0, {"gpu": 4}, running, waiting)["gpu"]
    assert first.why is not None and later.why is not None and first.why != later.why
    assert first.why.code == later.why.code == "reserving"
    cap = PoolCapacity(4, "ok", "static", 0, 4)
    old = describe(cap, first, first.pool_size, ("g", "h", 1000.0), 10.0)
    new = describe(cap, later, later.pool_size, ("g", "h", 1004.0), 10.0)
    assert comparable(old) == comparable(new)
    pool = {"slots": first.pool_size, "description": old, "include_deferred": False}
    assert not needs_write(pool, later.pool_size, new, False, 104.0, 10.0)
    # another task reserved for: rewritten
    other = decide_pools(104.0, {"gpu": 4}, running, [ready("other", 4, 9)])["gpu"]
    assert needs_write(
        pool, other.pool_size, describe(cap, other, 0, ("g", "h", 1004.0), 10.0), False, 104, 10
    )


def test_the_controller_writes_the_reason_and_counts_it_by_code(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(metrics, "_send", lambda kind, name, value, tags, per=None: sent.append((name, tags)))
    rest = FakeRest()
    rest.tis = [
        ti("hold", "running", slots=3, started=NOW - 10, duration=100),
        ti("wide", "scheduled", slots=4),
    ]
    config = parse_config(
        {"interval": 5, "pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}}
    )
    ctl = WatermarkController(config, rest, {"gpu": Source(4)}, default_duration=60.0, clock=lambda: NOW)  # type: ignore[arg-type]
    ctl.tick()
    state = parse_pool_state(rest.pools["gpu"]["description"])
    assert state is not None and state.why is not None and state.interval == 5.0
    assert (state.why.code, state.why.task, state.why.until) == ("reserving", "d/r/wide/-1", NOW + 90)
    assert ("gpu_dag.watermark.decisions", {"pool": "gpu", "code": "reserving"}) in sent
    rest.tis = []
    ctl.tick()
    assert ("gpu_dag.watermark.decisions", {"pool": "gpu", "code": "idle"}) in sent


# -- what a decision means for one task ---------------------------------------------------------------------
def test_for_task_says_what_the_decision_means_for_each_waiting_task() -> None:
    d = decide(
        [RunningTask("r", "gpu", 2, 160.0)],
        [ready("first", 1, 10), ready("wide", 4, 9), ready("short", 1, 2, 30.0), ready("long", 1, 1, 500.0)],
    )
    why = d.why
    codes = {key: for_task(why, key).code for key in ("first", "wide", "short", "long")}
    assert codes == {
        "first": "starting",
        "wide": "reserved",
        "short": "backfill",
        "long": "waiting-for-reservation",
    }
    assert for_task(why, "wide", now=130.0).text.endswith("its slots expected free at +30s")
    assert "held for wide" in for_task(why, "long").text
    free = decide([RunningTask("r", "gpu", 4, 150.0)], [ready("one", 1, 5), ready("two", 1, 4)])
    assert for_task(free.why, "one").code == "next-slot"
    assert for_task(free.why, "two").code == "waiting-for-slots"
