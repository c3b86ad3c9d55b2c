"""The controller's reasons as data: a code per decision, the same sentence as before, kept in the pool's
state (bounded, parseable by every reader), counted by the metrics, and read back per task."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask, RunningTask, admission_order
from airflow_gpu_dag.core.policy.objective import ReservationGate, key_weight
from airflow_gpu_dag.core.policy.reasons import (
    CODES,
    HOLDING_CODES,
    MAX_KEY,
    MAX_LISTED,
    TASK_CODES,
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


# -- Reason built directly: every code, every clause of the sentence ---------------------------------------
def _held(code: str = "reserving", **kw: Any) -> Reason:
    fields: dict[str, Any] = {"task": "wide", "slots": 4, "free": 1, "until": 160.0, **kw}
    return Reason(code, "gpu", 4, 100.0, **fields)


def test_slots_are_held_exactly_under_the_holding_codes() -> None:
    for code in CODES:
        assert Reason(code, "gpu", 4, 0.0).holds == (code in HOLDING_CODES)
    assert {"reserving", "overdue", "starving"} == HOLDING_CODES


def test_the_docs_table_lists_every_code_and_no_other() -> None:
    """``CODES``: "docs/watermarks.md lists the same"."""
    text = (Path(__file__).parents[4] / "docs" / "watermarks.md").read_text(encoding="utf-8")
    table = text.split("### Reasons as data", 1)[1].split("The state stays bounded", 1)[0]
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.MULTILINE))
    assert documented == set(CODES)


def test_every_sentence_starts_as_the_docs_table_says() -> None:
    starts = {
        "idle": "no task waiting",
        "fits": "3 waiting task(s) start",
        "too-wide": "no waiting task fits capacity 4",
        "not-ready": "no task ready",
        "next-slot": "wide (1 slot) takes the next free slot",
        "not-urgent-enough": "wide (4 slots) is not urgent enough",
        "reserving": "reserving 4 slots for wide",
        "overdue": "reserving 4 slots for wide",
        "starving": "reserving 4 slots for wide",
    }
    assert set(starts) == set(CODES)
    for code, start in starts.items():
        assert render(_held(code, admitted_count=3)).startswith(start), code


def test_the_reserving_sentence_has_each_optional_clause_only_when_it_applies() -> None:
    plain = render(_held())
    assert plain == (
        "reserving 4 slots for wide: 1 of 4 free, slots expected free at +60s; backfill 0 slot(s) for work "
        "that cannot delay it"
    )
    full = render(_held(starting=2, lookahead=True, nothing_else=True, backfill_slots=1))
    assert ", 2 starting first, expected ready and its slots free at +60s; backfill 1 slot(s)" in full
    assert full.endswith("; nothing else waiting: pool = capacity")
    assert "at unknown;" in render(_held(until=None))


def test_the_overdue_and_starving_sentences_end_with_their_clause() -> None:
    assert render(_held("overdue", past_key=32400.4)).endswith("; 32400s past its key: overdue")
    starving = render(_held("starving", starving="old", waited=29000.0))
    assert starving.endswith("; old starving (29000s waited): nothing behind it backfilled")


def test_a_not_urgent_reason_with_its_numbers_missing_reads_them_as_zero() -> None:
    """A reason read back from an edited description may lack the gate's figures: render still works."""
    text = render(Reason("not-urgent-enough", "gpu", 8, 0.0, task="wide", slots=4, competitor="eval"))
    assert text == (
        "wide (4 slots) is not urgent enough to hold slots for: its key is 0s before eval's (gap 0s) and "
        "0s past (overdue after 0s); pool = capacity"
    )


# -- the JSON form: bounded, defaults left out ---------------------------------------------------------------
def test_a_default_reason_writes_only_its_code_pool_capacity_and_time() -> None:
    assert reason_to_json(Reason("idle", "gpu", 4, 12.5)) == {
        "code": "idle",
        "pool": "gpu",
        "capacity": 4,
        "at": 12.5,
    }
    assert reason_to_json(Reason("idle", "gpu", 0, 0.0)) == {
        "code": "idle",
        "pool": "gpu",
        "capacity": 0,
        "at": 0.0,
    }


def test_a_full_reason_round_trips_through_json_text() -> None:
    why = _held(
        "starving",
        starting=1,
        admitted=("a", "b"),
        admitted_count=2,
        backfill_slots=1,
        backfill=("c",),
        backfill_count=1,
        lookahead=True,
        nothing_else=True,
        competitor="eval",
        key_gap=-30.5,
        gap=14400.0,
        past_key=10.0,
        overdue_after=28800.0,
        starving="old",
        waited=29000.0,
        from_ready=True,
    )
    assert reason_from_json(json.loads(json.dumps(reason_to_json(why), allow_nan=False))) == why


@pytest.mark.parametrize(("length", "kept"), [(MAX_KEY - 1, True), (MAX_KEY, True), (MAX_KEY + 1, False)])
def test_task_keys_are_cut_to_max_key_characters_with_an_ellipsis(length: int, kept: bool) -> None:
    key = "é" * length  # characters, not bytes
    data = reason_to_json(_held(task=key, admitted=(key,), admitted_count=1, competitor=key, starving=key))
    for value in (data["task"], data["admitted"][0], data["competitor"], data["starving"]):
        assert len(value) == min(length, MAX_KEY)
        assert (value == key) is kept
        assert kept or value.endswith("…")


def test_a_long_pool_name_is_cut_too() -> None:
    assert len(reason_to_json(Reason("idle", "p" * 1000, 4, 0.0))["pool"]) == MAX_KEY


def test_the_lists_keep_the_first_keys_and_the_whole_counts() -> None:
    keys = tuple(f"t{i}" for i in range(MAX_LISTED + 5))
    why = _held(admitted=keys, admitted_count=len(keys), backfill=keys, backfill_count=len(keys))
    data = reason_to_json(why)
    assert data["admitted"] == list(keys[:MAX_LISTED]) == data["backfill"]
    assert data["admitted_count"] == data["backfill_count"] == MAX_LISTED + 5
    back = reason_from_json(data)
    assert back is not None and back.admitted == keys[:MAX_LISTED] and back.admitted_count == MAX_LISTED + 5


def test_a_gap_of_zero_reads_back_to_the_same_sentence() -> None:
    """Two tasks with the same key give ``key_gap=0.0``, which the JSON form leaves out."""
    why = Reason(
        "not-urgent-enough",
        "gpu",
        8,
        0.0,
        task="w",
        slots=4,
        competitor="c",
        key_gap=0.0,
        gap=60.0,
        past_key=0.0,
    )
    back = reason_from_json(reason_to_json(why))
    assert back is not None and render(back) == render(why)


# -- reading it back: never raises, odd fields read as absent ---------------------------------------------
def test_fields_of_the_wrong_json_type_read_as_absent() -> None:
    back = reason_from_json(
        {
            "code": "reserving",
            "pool": "gpu",
            "slots": 4.0,  # a float where an int belongs
            "free": True,
            "until": "160",
            "key_gap": math.nan,
            "gap": math.inf,
            "lookahead": "true",  # only JSON true is true
            "nothing_else": 1,
            "task": 7,
            "backfill": "abc",  # not a list
        }
    )
    assert back is not None
    assert (back.slots, back.free, back.until, back.key_gap, back.gap) == (0, 0, None, None, None)
    assert (back.lookahead, back.nothing_else, back.task, back.backfill) == (False, False, None, ())


def test_a_list_longer_than_max_listed_is_cut_when_read() -> None:
    back = reason_from_json({"code": "fits", "pool": "gpu", "admitted": [f"t{i}" for i in range(100)]})
    assert back is not None and len(back.admitted) == MAX_LISTED


def test_any_mapping_is_read_and_a_pool_that_is_not_text_is_no_reason() -> None:
    assert reason_from_json(MappingProxyType({"code": "idle", "pool": "gpu", "capacity": 2})) == Reason(
        "idle", "gpu", 2, 0.0
    )
    assert reason_from_json({"code": "idle", "pool": 4}) is None
    assert reason_from_json({"code": "IDLE", "pool": "gpu"}) is None


@pytest.mark.parametrize("code", [["idle"], {"idle": 1}])
def test_a_code_of_the_wrong_json_type_reads_as_no_reason(code: object) -> None:
    """The description is text anyone can edit: ``"code": ["idle"]`` must read as no reason, not crash
    the controller, ``explain`` and the Critical path page (``parse_pool_state`` passes it on)."""
    assert reason_from_json({"code": code, "pool": "gpu"}) is None


def test_a_time_too_large_for_a_float_reads_as_absent() -> None:
    data = json.loads('{"code": "reserving", "pool": "gpu", "until": 1' + "0" * 400 + "}")
    back = reason_from_json(data)
    assert back is not None and back.until is None


# -- for_task ---------------------------------------------------------------------------------------------
def test_for_task_names_the_starving_task_and_the_task_slots_are_held_for() -> None:
    why = _held("starving", starving="old", waited=29000.0, backfill=("never",))
    reason = for_task(why, "old")
    assert (reason.task, reason.code, reason.decision) == ("old", "starving", why)
    assert (
        reason.text
        == "starving: it has waited 29000s, so nothing behind it is let through and slots are held for wide"
    )
    assert for_task(why, "wide").code == "reserved"


def test_for_task_checks_the_admitted_tasks_first() -> None:
    why = _held(admitted=("wide",), admitted_count=1)
    assert for_task(why, "wide").code == "starting"


def test_for_task_counts_from_the_decision_time_by_default_and_says_when_it_is_unknown() -> None:
    assert for_task(_held(), "wide").text.endswith("its slots expected free at +60s")
    assert for_task(_held(lookahead=True), "wide").text.endswith("expected ready and its slots free at +60s")
    assert for_task(_held(until=None), "other").text.endswith("(expected at an unknown time)")


def test_for_task_says_why_a_not_urgent_head_waits() -> None:
    why = Reason(
        "not-urgent-enough",
        "gpu",
        8,
        0.0,
        task="wide",
        slots=4,
        competitor="eval",
        key_gap=3600.0,
        gap=14400.0,
    )
    reason = for_task(why, "wide")
    assert reason.code == "not-urgent-enough"
    assert reason.text == (
        "not urgent enough to hold slots for: its key is 3600s before eval's (gap 14400s); it waits for "
        "slots to free"
    )
    assert for_task(why, "other").code == "waiting-for-slots"


def test_every_code_for_task_gives_is_documented() -> None:
    why = _held(admitted=("a",), backfill=("b",), starving="s")
    codes = {for_task(why, t).code for t in ("a", "b", "s", "wide", "x")}
    codes |= {for_task(Reason(c, "gpu", 4, 0.0, task="h"), "h").code for c in CODES}
    assert codes <= set(TASK_CODES)


def test_a_reservation_time_already_past_is_not_shown_as_a_countdown() -> None:
    """``explain`` asks with its own ``now``; a decision that changed only in its times is not rewritten,
    so its ``until`` may lie in the past by then."""
    for task in ("wide", "other"):
        text = for_task(_held(until=160.0), task, now=200.0).text
        assert "+-" not in text
