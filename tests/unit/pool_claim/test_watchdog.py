"""The controller fails open: claims with an expiry in the pool description, release on a clean stop,
the scheduler's watchdog for a controller that died, and the start-up checks (another controller's
pools, pools that cannot be created)."""

from __future__ import annotations

import time

import pytest

from airflow_gpu_dag.pool_claim import watchdog
from airflow_gpu_dag.pool_claim.state import parse_pool_state
from tests.unit.watermark.conftest import (
    NOW,
    FakeRest,
    claim_controller,
    reserving,
)


class FakeJob:
    """What Airflow passes to ``on_starting``: a ``Job`` whose type is set a moment later."""

    def __init__(self) -> None:
        self.job_type: str | None = None


FakeJob.__name__ = "Job"


def test_a_controller_that_dies_before_its_first_tick_leaves_a_closed_pool_that_says_so() -> None:
    """Its capacity was never measured: nobody can open it, but the watchdog drops the lapsed claim
    (the pool is free for any controller) and the description says what happened and the fix."""
    rest, clock = FakeRest(), {"t": NOW}
    claim_controller(rest, clock).preflight()  # then killed
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
    other = claim_controller(rest, clock, lease={"lock_file": None, "variable": "lease_b"}, holder="b")
    rest.pools["gpu"]["description"] = found.new_description
    clock["t"] = NOW + 60
    assert other.preflight().created == [] and other.tick() and rest.pools["gpu"]["slots"] == 4


# -- the watchdog --------------------------------------------------------------------------------------------
def test_the_watchdog_opens_pools_whose_claim_lapsed() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = claim_controller(rest, clock)
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
    claim_controller(rest, clock, holder="me2").tick()
    assert rest.pools["gpu"]["slots"] == 0


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
