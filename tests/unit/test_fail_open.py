"""The controller fails open: claims with an expiry in the pool description, release on a clean stop,
the scheduler's watchdog for a controller that died, and the start-up checks (another controller's
pools, pools that cannot be created)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.pool_claim import watchdog
from airflow_gpu_dag.pool_claim.state import (
    PoolState,
    comparable,
    human_part,
    needs_write,
    parse_pool_state,
    with_state,
)
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController, build_controller
from airflow_gpu_dag.watermark.lifecycle import CREATED_DESCRIPTION, PreflightError
from tests.unit.test_watermark_controller import NOW, FakeRest, Source, ti

INTERVAL = 10.0


def make(
    rest: FakeRest,
    clock: dict[str, float],
    gpus: int = 4,
    holder: str = "me",
    lease: dict[str, Any] | None = None,
    **pool: Any,
) -> WatermarkController:
    config = parse_config(
        {
            "interval": INTERVAL,
            "pools": {"gpu": {"source": 0, "backfill": False, **pool}},
            "lease": lease or {"lock_file": None, "variable": None},
        }
    )
    return WatermarkController(
        config,
        rest,  # type: ignore[arg-type]
        {"gpu": Source(gpus)},  # type: ignore[dict-item]
        default_duration=60.0,
        clock=lambda: clock["t"],
        holder=holder,
    )


def reserving(rest: FakeRest) -> None:
    """A 4-slot task waits behind a running 1-slot task: with no backfill the pool is held at 0."""
    rest.tis = [ti("hold", "running", started=NOW - 10, duration=100), ti("wide", "scheduled", slots=4)]


def state(rest: FakeRest) -> PoolState:
    found = parse_pool_state(rest.pools["gpu"]["description"])
    assert found is not None, rest.pools["gpu"]
    return found


# -- the claim -------------------------------------------------------------------------------------------
def test_every_write_carries_a_claim_that_lapses_after_fail_open_after_intervals() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = make(rest, clock)
    reserving(rest)
    controller.tick()
    assert rest.pools["gpu"]["slots"] == 0
    claim = state(rest)
    assert claim.capacity == 4 and claim.holder == "me" and claim.lease == controller.group
    assert claim.expires == NOW + 3 * INTERVAL  # fail_open_after: 3 (the default)
    assert claim.claimed(NOW + 29) and not claim.claimed(NOW + 30)


def test_a_countdown_alone_does_not_rewrite_the_pool_but_the_claim_is_renewed_in_time() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = make(rest, clock, source_timeout="1s")  # renewed with 1.5 intervals + 1 s left
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
    assert state(rest).expires == clock["t"] + 3 * INTERVAL
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


# -- clean stop ------------------------------------------------------------------------------------------
def test_a_clean_stop_writes_the_pool_back_to_its_capacity_and_drops_the_claim() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = make(rest, clock)
    reserving(rest)
    controller.run(threading.Event(), max_ticks=1)
    assert rest.writes == [("gpu", 0), ("gpu", 4)]
    released = state(rest)
    assert released.capacity == 4 and released.expires is None and released.holder is None
    description = rest.pools["gpu"]["description"]
    assert "released at" in description and "controller me stopped (the pool had 0 slots)" in description
    # the critical-path page reads no reservation from a released pool
    from airflow_gpu_dag.plugins.critical_path_page.data import parse_pool_description

    assert parse_pool_description(description) == (4, 0, None)
    assert controller.released == ["gpu"] and not controller.active


def test_losing_the_lease_releases_only_the_pools_it_wrote_last() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    lease = {"lock_file": None, "variable": "lease", "ttl": 30}
    config = parse_config(
        {"interval": INTERVAL, "pools": {"gpu": {"source": 0, "backfill": False}}, "lease": lease}
    )
    one = build_controller(config, rest, "one", {"gpu": Source(4)}, clock=lambda: clock["t"])  # type: ignore[arg-type]
    reserving(rest)
    assert one.tick() and rest.pools["gpu"]["slots"] == 0
    # an operator hands the lease to another controller, which has not written the pool yet
    rest.variables["lease"] = json.dumps({"holder": "two", "expires": NOW + 1000})
    assert one.tick() == [] and not one.active
    assert rest.pools["gpu"]["slots"] == 4 and state(rest).expires is None  # failed open by "one"
    # had another controller written the pool first, it is left alone: see
    # test_watermark_controller.py::test_two_controllers_with_a_lease_do_not_fight


def test_dry_run_writes_nothing() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    config = parse_config({"interval": INTERVAL, "pools": {"gpu": {"source": 0, "backfill": False}}})
    controller = build_controller(
        config, rest, "me", {"gpu": Source(4)}, clock=lambda: clock["t"], dry_run=True
    )  # type: ignore[arg-type]
    reserving(rest)
    assert controller.leader_lock is None
    report = controller.preflight()
    assert report.missing == ["gpu"] and report.created == []
    (outcome,) = controller.tick()
    assert outcome.size == 0 and outcome.would_write and not outcome.written
    controller.shutdown()
    assert rest.writes == [] and rest.variables == {} and rest.pools == {}


# -- start-up checks ---------------------------------------------------------------------------------------
def test_a_pool_managed_by_another_controller_group_is_refused_and_nothing_is_written() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    other = make(rest, clock, lease={"lock_file": None, "variable": "lease_a"})
    other.tick()
    writes = list(rest.writes)
    mine = make(rest, clock, lease={"lock_file": None, "variable": "lease_b"}, holder="b")
    with pytest.raises(PreflightError) as err:
        mine.preflight()
    message = str(err.value)
    assert "'gpu'" in message and "variable:lease_a" in message and "variable:lease_b" in message
    assert "same lease" in message and "Nothing was written" in message
    assert rest.writes == writes and rest.variables == {}
    # a standby of the same group is fine, and so is the other group's pool once its claim lapsed
    make(rest, clock, lease={"lock_file": None, "variable": "lease_a"}, holder="a2").preflight()
    clock["t"] += 3 * INTERVAL + 1
    assert mine.preflight().taken_over == ["gpu"]


class NoCreate(FakeRest):
    """Pools can be read but not created (a user without the permission), except ``allowed``."""

    def __init__(self, allowed: set[str]) -> None:
        super().__init__()
        self.allowed = allowed
        self.deleted: list[str] = []

    def set_pool(self, name: str, slots: int, description: str, include_deferred: bool = False) -> Any:
        if name not in self.pools and name not in self.allowed:
            raise RestError(f"POST /api/v2/pools: HTTP 403 forbidden ({name})", 403)
        return super().set_pool(name, slots, description, include_deferred)

    def request(self, method: str, path: str, **_: Any) -> None:
        assert method == "DELETE"
        name = path.rsplit("/", 1)[-1]
        self.deleted.append(name)
        self.pools.pop(name, None)


def test_a_pool_that_cannot_be_created_is_a_clear_error_and_leaves_nothing_behind() -> None:
    rest = NoCreate(allowed={"gpu_a"})
    config = parse_config({"pools": {"gpu_a": {"source": 2}, "gpu_b": {"source": 2}}})
    controller = build_controller(config, rest, "me", {"gpu_a": Source(2), "gpu_b": Source(2)})  # type: ignore[arg-type]
    with pytest.raises(PreflightError) as err:
        controller.preflight()
    message = str(err.value)
    assert "'gpu_b' does not exist and cannot be created" in message and "HTTP 403" in message
    assert "airflow pools set gpu_b" in message and "deleted again" in message
    assert rest.deleted == ["gpu_a"] and rest.pools == {} and rest.variables == {}


def test_missing_pools_are_created_closed_and_claimed_until_the_first_tick() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = make(rest, clock)
    assert controller.preflight().created == ["gpu"]
    assert rest.pools["gpu"]["slots"] == 0
    assert human_part(rest.pools["gpu"]["description"]) == CREATED_DESCRIPTION
    created = state(rest)
    assert (created.lease, created.holder, created.capacity) == (controller.group, "me", None)
    assert created.expires == NOW + 3 * INTERVAL
    # another group's controller starting meanwhile is refused: two would fight over the new pool
    other = make(rest, clock, lease={"lock_file": None, "variable": "lease_b"}, holder="b")
    with pytest.raises(PreflightError, match="managed by another watermark controller"):
        other.preflight()
    controller.tick()
    assert rest.pools["gpu"]["slots"] == 4 and state(rest).capacity == 4


def test_a_controller_that_dies_before_its_first_tick_leaves_a_closed_pool_that_says_so() -> None:
    """Its capacity was never measured: nobody can open it, but the watchdog drops the lapsed claim
    (the pool is free for any controller) and the description says what happened and the fix."""
    rest, clock = FakeRest(), {"t": NOW}
    make(rest, clock).preflight()  # then killed
    pool = rest.pools["gpu"]
    rows = [("gpu", pool["slots"], pool["description"])]
    assert watchdog.expired_pools(rows, NOW + 29) == []
    (found,) = watchdog.expired_pools(rows, NOW + 30)
    assert found.unsized and (found.slots, found.capacity) == (0, 0)
    assert (
        "capacity unknown" in found.new_description and "stopped before it measured" in found.new_description
    )
    assert "airflow pools set gpu <GPUs>" in found.new_description
    after = parse_pool_state(found.new_description)
    assert after is not None and after.expires is None and after.capacity is None
    assert watchdog.expired_pools([("gpu", 0, found.new_description)], NOW + 60) == []  # said once
    # a controller of another group may start now
    other = make(rest, clock, lease={"lock_file": None, "variable": "lease_b"}, holder="b")
    rest.pools["gpu"]["description"] = found.new_description
    clock["t"] = NOW + 60
    assert other.preflight().created == [] and other.tick() and rest.pools["gpu"]["slots"] == 4


def test_a_clean_stop_before_the_first_tick_drops_the_claim_of_the_pool_it_created() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = make(rest, clock)
    controller.preflight()
    rest.ti_error = RestError("GET /api/v2/dags/~/dagRuns/~/taskInstances: HTTP 503", 503)
    (outcome,) = controller.tick()  # the first tick cannot size it: nothing written
    assert not outcome.written and rest.writes == [("gpu", 0)] and state(rest).holder == "me"
    controller.shutdown("stopped by SIGTERM")
    assert controller.released == [] and rest.pools["gpu"]["slots"] == 0
    after = state(rest)
    assert after.expires is None and after.holder is None
    assert (
        "released at" in rest.pools["gpu"]["description"]
        and "stopped by SIGTERM" in rest.pools["gpu"]["description"]
    )


# -- the watchdog --------------------------------------------------------------------------------------------
def test_the_watchdog_opens_pools_whose_claim_lapsed() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = make(rest, clock)
    reserving(rest)
    controller.tick()  # then the controller is killed: no release
    pool = rest.pools["gpu"]
    rows = [
        ("gpu", pool["slots"], pool["description"]),
        ("other", 3, "not ours"),
        ("open", 4, pool["description"]),
    ]
    assert watchdog.expired_pools(rows, NOW + 29) == []
    (restore,) = watchdog.expired_pools(rows, NOW + 30)  # "open" is at its capacity already
    assert (restore.pool, restore.slots, restore.capacity) == ("gpu", 0, 4)
    after = parse_pool_state(restore.new_description)
    assert after is not None and after.expires is None and after.capacity == 4 and after.last_good == 4
    assert "failed open by the scheduler's watchdog" in restore.new_description
    # the restarted controller reads the state back and holds the reservation again
    rest.pools["gpu"].update(slots=4, description=restore.new_description)
    clock["t"] += 31
    make(rest, clock, holder="me2").tick()
    assert rest.pools["gpu"]["slots"] == 0


class FakeJob:
    """What Airflow passes to ``on_starting``: a ``Job`` whose type is set a moment later."""

    def __init__(self) -> None:
        self.job_type: str | None = None


FakeJob.__name__ = "Job"


@pytest.mark.parametrize(("job_type", "runs"), [("SchedulerJob", True), ("TriggererJob", False)])
def test_the_listener_starts_the_watchdog_in_the_scheduler_only(
    monkeypatch: pytest.MonkeyPatch, job_type: str, runs: bool
) -> None:
    calls: list[float] = []
    monkeypatch.setattr(watchdog, "restore_expired", lambda: calls.append(time.time()) or [])
    monkeypatch.setenv("AIRFLOW__GPU_DAG__WATERMARK_WATCHDOG_INTERVAL", "0.05")
    job = FakeJob()
    watchdog.on_starting(object())  # the task runner's marker: ignored
    assert "watchdog" not in watchdog._running
    watchdog.on_starting(job)
    thread = watchdog._running["watchdog"]
    try:
        job.job_type = job_type
        deadline = time.monotonic() + 30
        while runs and len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        if not runs:
            thread.join(30)
            assert not thread.is_alive()
        assert bool(calls) is runs
    finally:
        watchdog.before_stopping(job)
        thread.join(30)
    assert "watchdog" not in watchdog._running


def test_the_watchdog_is_off_with_interval_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__WATERMARK_WATCHDOG_INTERVAL", "0")
    watchdog.on_starting(FakeJob())
    assert "watchdog" not in watchdog._running


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
