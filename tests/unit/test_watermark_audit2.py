"""Audit of the watermark controller's helper modules: each test failed before its fix."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from airflow_gpu_dag.pool_claim import watchdog
from airflow_gpu_dag.pool_claim.state import PoolState, human_part, parse_pool_state, with_state
from airflow_gpu_dag.watermark.health import check_heartbeat_file
from airflow_gpu_dag.watermark.leader_lock import FileLeaderLock

NOW = 1_800_000_000.0
HUGE = "1" + "0" * 400  # a JSON integer too large for a float


def test_a_state_with_a_huge_integer_never_raises_and_other_pools_still_fail_open() -> None:
    """``"expires": 1000…0`` (400 digits) raised OverflowError from parse_pool_state, which promises
    never to raise: the scheduler's watchdog then opened no pool at all, not even a lapsed one."""
    corrupt = f'gpu-dag watermark: pool 0 [gpu-dag-state {{"capacity": {HUGE}, "expires": {HUGE}}}]'
    found = parse_pool_state(corrupt)
    assert found is not None and found.capacity is None and found.expires is None
    lapsed = with_state("gpu-dag watermark: pool 0", PoolState(4, 0, 4, "variable:x", "h", NOW - 1))
    (restore,) = watchdog.expired_pools([("bad", 0, corrupt), ("gpu", 0, lapsed)], NOW)
    assert (restore.pool, restore.capacity) == ("gpu", 4)


def test_the_state_at_the_end_of_the_description_is_the_one_read() -> None:
    """A description a person edited so that it quotes an older description (with its lapsed claim)
    before the controller's live state: the first block was read, so the watchdog opened a pool whose
    controller still held it."""
    old = with_state("gpu-dag watermark: pool 4", PoolState(4, 0, 4, "variable:x", "h", NOW - 600))
    live = with_state("gpu-dag watermark: pool 0", PoolState(4, 0, 4, "variable:x", "h", NOW + 60))
    edited = f"note: was '{old}' | {live}"
    state = parse_pool_state(edited)
    assert state is not None and state.expires == NOW + 60
    assert watchdog.expired_pools([("gpu", 0, edited)], NOW) == []
    assert "gpu-dag-state" not in human_part(edited)


def test_a_long_run_of_whitespace_in_a_description_is_parsed_in_linear_time() -> None:
    """``\\s*`` at the start of the state pattern backtracked over every start position inside a run of
    whitespace: 40,000 spaces took ~12 s per parse (the controller parses each pool several times a
    tick, the watchdog every 10 s)."""
    state = with_state("", PoolState(4, 0, 4, "variable:x", "h", NOW + 60))
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


def test_a_lock_file_removed_while_held_does_not_make_two_leaders(tmp_path: Path) -> None:
    """The lock file deleted while held (a /tmp cleaner, a person): a second controller created and
    locked a new file, and the first kept answering True from its orphaned handle: two leaders."""
    path = tmp_path / "wm.lock"
    first, second = FileLeaderLock(path), FileLeaderLock(path)
    assert first.acquire()
    os.unlink(path)
    assert second.acquire()  # a new file nobody held
    assert not first.acquire()  # the first stands by: the lock it holds is no longer the lock file
    assert not first.held
    second.release()
    assert first.acquire() and not second.acquire()
    os.unlink(path)
    assert first.acquire() and path.exists()  # nobody took it: the first takes the new file
    assert not second.acquire()
    first.release()


def test_a_heartbeat_with_a_huge_tick_is_reported_not_raised(tmp_path: Path) -> None:
    """``"last_tick": 1000…0`` made ``watermark-health`` die with OverflowError instead of one line."""
    path = tmp_path / "beat.json"
    path.write_text(f'{{"last_tick": {HUGE}, "interval": 60}}')
    fresh, message = check_heartbeat_file(path, now=NOW)
    assert not fresh and "last_tick" in message
    path.write_text(json.dumps({"last_tick": NOW - 1, "interval": 60}))
    assert check_heartbeat_file(path, now=NOW)[0]
