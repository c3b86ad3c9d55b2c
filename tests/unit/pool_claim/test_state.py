"""Tests of ``airflow_gpu_dag.pool_claim.state``."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from airflow_gpu_dag.pool_claim import watchdog
from airflow_gpu_dag.pool_claim.state import (
    PoolState,
    comparable,
    human_part,
    needs_write,
    parse_pool_state,
    with_state,
)
from tests.unit.watermark.conftest import (
    INTERVAL,
    NOW,
    FakeRest,
    claim_controller,
    pool_state,
    reserving,
    ti,
)

FIXED_NOW = 1_800_000_000.0


HUGE = "1" + "0" * 400  # a JSON integer too large for a float


def test_a_state_with_a_huge_integer_never_raises_and_other_pools_still_fail_open() -> None:
    """``"expires": 1000…0`` (400 digits) raised OverflowError from parse_pool_state, which promises
    never to raise: the scheduler's watchdog then opened no pool at all, not even a lapsed one."""
    corrupt = f'gpu-dag watermark: pool 0 [gpu-dag-state {{"capacity": {HUGE}, "expires": {HUGE}}}]'
    found = parse_pool_state(corrupt)
    assert found is not None and found.capacity is None and found.expires is None
    lapsed = with_state("gpu-dag watermark: pool 0", PoolState(4, 0, 4, "variable:x", "h", FIXED_NOW - 1))
    (restore,) = watchdog.expired_pools([("bad", 0, corrupt), ("gpu", 0, lapsed)], FIXED_NOW)
    assert (restore.pool, restore.capacity) == ("gpu", 4)


def test_the_state_at_the_end_of_the_description_is_the_one_read() -> None:
    """A description a person edited so that it quotes an older description (with its lapsed claim)
    before the controller's live state: the first block was read, so the watchdog opened a pool whose
    controller still held it."""
    old = with_state("gpu-dag watermark: pool 4", PoolState(4, 0, 4, "variable:x", "h", FIXED_NOW - 600))
    live = with_state("gpu-dag watermark: pool 0", PoolState(4, 0, 4, "variable:x", "h", FIXED_NOW + 60))
    edited = f"note: was '{old}' | {live}"
    state = parse_pool_state(edited)
    assert state is not None and state.expires == FIXED_NOW + 60
    assert watchdog.expired_pools([("gpu", 0, edited)], FIXED_NOW) == []
    assert "gpu-dag-state" not in human_part(edited)


def test_a_long_run_of_whitespace_in_a_description_is_parsed_in_linear_time() -> None:
    """``\\s*`` at the start of the state pattern backtracked over every start position inside a run of
    whitespace: 40,000 spaces took ~12 s per parse (the controller parses each pool several times a
    tick, the watchdog every 10 s)."""
    state = with_state("", PoolState(4, 0, 4, "variable:x", "h", FIXED_NOW + 60))
    padded = "hand-written" + " " * 40_000 + "end"

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("parsing one description took over 15 s: quadratic again")

    previous = signal.signal(signal.SIGALRM, hung)  # a guard against a hang, not a speed figure
    signal.alarm(15)
    try:
        assert parse_pool_state(padded) is None
        assert parse_pool_state(padded + " " * 40_000 + state) == parse_pool_state(state)
        assert human_part(padded + "\n" * 10 + state) == padded
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- the claim -------------------------------------------------------------------------------------------
def test_every_write_carries_a_claim_that_lapses_after_fail_open_after_intervals() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = claim_controller(rest, clock)
    reserving(rest)
    controller.tick()
    assert rest.pools["gpu"]["slots"] == 0
    claim = pool_state(rest)
    assert claim.capacity == 4 and claim.holder == "me" and claim.lease == controller.group
    assert claim.expires == NOW + 3 * INTERVAL  # fail_open_after: 3 (the default)
    assert claim.claimed(NOW + 29) and not claim.claimed(NOW + 30)


def test_a_countdown_alone_does_not_rewrite_the_pool_but_the_claim_is_renewed_in_time() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = claim_controller(rest, clock, source_timeout="1s")  # renewed with 1.5 intervals + 1 s left
    reserving(rest)
    controller.tick()
    first = rest.pools["gpu"]["description"]
    assert "+90s" in first  # the slots are expected free when "hold" ends
    clock["t"] += INTERVAL
    controller.tick()  # the countdown is now +80s, the claim has 20s of 30 left: no write
    assert rest.writes == [("gpu", 0)] and rest.pools["gpu"]["description"] == first
    clock["t"] += INTERVAL
    controller.tick()  # 10s of the claim left (< 1.5 intervals): renewed
    assert rest.writes == [("gpu", 0), ("gpu", 0)]
    assert pool_state(rest).expires == clock["t"] + 3 * INTERVAL
    rest.tis.append(ti("wide2", "scheduled", slots=2, priority=5))
    clock["t"] += 1
    controller.tick()  # a real change is written at once
    assert len(rest.writes) == 3


def test_comparable_masks_countdowns_and_the_expiry_only() -> None:
    base = "gpu-dag watermark: pool 0 of capacity 4 | reserving 4 slots for d/r/w/-1: slots expected free"
    one = with_state(base + " at +12s", PoolState(4, 0, 4, "g", "h", 100.0))
    two = with_state(base + " at +1.5e+03s", PoolState(4, 0, 4, "g", "h", 200.0))
    assert comparable(one) == comparable(two)
    assert comparable(one) != comparable(with_state(base + " at +12s", PoolState(4, 1, 4, "g", "h", 100.0)))
    assert comparable(one) != comparable(one.replace("pool 0", "pool 1"))
    assert comparable("train_v2s ran 30s") == "train_v2s ran 30s"  # not a countdown (no sign)
    current = {"slots": 0, "description": one, "include_deferred": False}
    assert not needs_write(current, 0, two, False, now=50.0, interval=10.0)  # 50 s of the claim left
    assert needs_write(current, 0, two, False, now=90.0, interval=10.0)  # 10 s left: renew
    assert needs_write(current, 1, two, False, now=50.0, interval=10.0)
    assert needs_write(current, 0, two, True, now=50.0, interval=10.0)
    assert needs_write(None, 0, two, False, now=50.0, interval=10.0)


@pytest.mark.parametrize(
    "description",
    [
        None,
        "",
        "hand-written",
        "[gpu-dag-state not json]",
        "[gpu-dag-state [1, 2]]",
        '[gpu-dag-state {"capacity": "lots", "expires": "soon", "failures": -3, "lease": 7}]',
        '[gpu-dag-state {"capacity": NaN, "expires": Infinity, "last_good": true}]',
    ],
)
def test_unreadable_states_never_raise(description: Any) -> None:
    found = parse_pool_state(description)
    assert found is None or (found.capacity is None and found.expires is None and found.lease is None)
    assert watchdog.expired_pools([("gpu", 0, description)], NOW) == []


def test_a_claim_with_an_impossible_expiry_fails_open_and_is_described_without_raising() -> None:
    """``"expires": -1e20`` (a corrupt description) made the watchdog's message raise OverflowError, so
    no pool failed open at all; a claim of 1e13 s made another controller's start-up check raise."""
    from airflow_gpu_dag.pool_claim.state import PoolState, iso_time, with_state
    from airflow_gpu_dag.pool_claim.watchdog import expired_pools

    corrupt = with_state(
        "gpu-dag watermark: pool 0", PoolState(capacity=4, lease="variable:x", expires=-1e20)
    )
    (restore,) = expired_pools([("gpu", 0, corrupt)], 1_800_000_000.0)
    assert restore.capacity == 4 and "lapsed at epoch -1e+20" in restore.new_description
    assert iso_time(6e13) == "epoch 6e+13" and iso_time(1_800_000_000.0) == "2027-01-15T08:00:00Z"


def test_a_hand_edited_capacity_beyond_any_pool_is_unknown_not_written_back() -> None:
    # A description whose state says "capacity": 1e12 must not make the watchdog write 10**12 slots:
    # the UPDATE overflows Airflow's int column, and its one transaction then opens no pool at all.

    from airflow_gpu_dag.pool_claim.state import MAX_POOL_SLOTS, parse_pool_state
    from airflow_gpu_dag.pool_claim.watchdog import expired_pools

    def description(capacity: object) -> str:
        state = {
            "last_good": 4,
            "failures": 0,
            "capacity": capacity,
            "lease": "l",
            "holder": "h",
            "expires": 10.0,
        }
        return f"gpu-dag watermark: pool 0 of capacity 4 | x [gpu-dag-state {json.dumps(state)}]"

    assert parse_pool_state(description(1e12)).capacity is None
    assert parse_pool_state(description(MAX_POOL_SLOTS)).capacity == MAX_POOL_SLOTS
    (huge,) = expired_pools([("gpu", 0, description(1e12))], now=100.0)
    assert huge.unsized and huge.capacity == 0  # kept at its size, said so: not opened to 10**12
    (fine,) = expired_pools([("gpu", 0, description(4))], now=100.0)
    assert fine.capacity == 4 and not fine.unsized


def test_a_claim_is_live_only_between_now_and_the_longest_window_ahead() -> None:
    """``claimed`` and ``lapsed`` are each other's opposite for a claim; a state without one is neither."""
    from airflow_gpu_dag.pool_claim.state import CLOCK_SKEW, MAX_CLAIM, PoolState

    for expires, live in [
        (NOW, False),
        (NOW + 1, True),
        (NOW + MAX_CLAIM + CLOCK_SKEW, True),
        (NOW + MAX_CLAIM + CLOCK_SKEW + 1, False),
        (1e300, False),
    ]:
        state = PoolState(capacity=4, expires=expires)
        assert (state.claimed(NOW), state.lapsed(NOW)) == (live, not live), expires
    assert not PoolState(capacity=4).claimed(NOW) and not PoolState(capacity=4).lapsed(NOW)


@pytest.mark.parametrize(
    "why", ['{"code": ["idle"], "pool": "gpu"}', '{"code": "idle", "pool": "gpu", "at": 1' + "0" * 400 + "}"]
)
def test_a_decision_of_the_wrong_json_types_reads_without_raising(why: str) -> None:
    """A hand-edited ``why`` must not crash the controller, ``explain`` or the page that read the pool."""
    from airflow_gpu_dag.pool_claim.state import parse_pool_state

    state = parse_pool_state(f'gpu-dag watermark: x [gpu-dag-state {{"capacity":4,"why":{why}}}]')
    assert state is not None and state.capacity == 4
