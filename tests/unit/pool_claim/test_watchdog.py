"""The controller fails open: claims with an expiry in the pool description, release on a clean stop,
the scheduler's watchdog for a controller that died, and the start-up checks (another controller's
pools, pools that cannot be created)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, update
from sqlalchemy.orm import Session

from airflow_gpu_dag.pool_claim import watchdog
from airflow_gpu_dag.pool_claim.state import MAX_CLAIM, PoolState, parse_pool_state, with_state
from tests.unit.watermark.conftest import (
    INTERVAL,
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


# -- what the watchdog writes ----------------------------------------------------------------------------
def _state(**fields: Any) -> PoolState:
    """A controller's state in a shrunk pool of 4 GPUs whose claim lapses at ``NOW + 30``."""
    base: dict[str, Any] = {
        "last_good": 4,
        "failures": 1,
        "capacity": 4,
        "lease": "variable:gpu_dag_watermark_lease",
        "holder": "gpu-1:812:3fa2c1d0",
        "expires": NOW + 30,
        "source": "abc123",
        "interval": 10.0,
    }
    return PoolState(**{**base, **fields})


def _shrunk(**fields: Any) -> str:
    """The description a controller holding ``gpu`` at 0 slots wrote (see :func:`_state`)."""
    return with_state("gpu-dag watermark: pool 0 of capacity 4 | reserving 4 slots", _state(**fields))


def test_the_failed_open_description_names_the_stopped_controller_and_drops_only_the_claim() -> None:
    """An operator reading the pool learns who stopped and when; a controller that comes back reads its
    fault ladder (last good, failures, source) back from the state, which no longer claims the pool."""
    text = watchdog.failed_open_description(_state(), NOW + 45)
    assert text.startswith(
        "gpu-dag watermark: pool 4 of capacity 4 | failed open by the scheduler's watchdog at "
        "2027-01-15T08:00:45Z: no watermark controller of variable:gpu_dag_watermark_lease "
        "(gpu-1:812:3fa2c1d0) renewed its claim, which lapsed at 2027-01-15T08:00:30Z ["
    )
    assert parse_pool_state(text) == PoolState(last_good=4, failures=1, capacity=4, source="abc123")


def test_a_failed_open_description_of_a_nameless_or_corrupt_claim_still_says_what_happened() -> None:
    """The state is free text anyone can edit: a claim without lease, holder or a date-like expiry
    must not make the watchdog fail on its message (it would then open no pool)."""
    nameless = watchdog.failed_open_description(_state(lease=None, holder=None, expires=None), NOW)
    assert "no watermark controller of ? (?) renewed its claim, which lapsed at ? [" in nameless
    corrupt = watchdog.failed_open_description(_state(expires=1e300), NOW)
    controller = "watermark controller of variable:gpu_dag_watermark_lease (gpu-1:812:3fa2c1d0)"
    assert f"claim of the {controller} " in corrupt
    assert "expires at epoch 1e+300, further ahead than any controller claims a pool (30 days)" in corrupt
    assert parse_pool_state(corrupt) == PoolState(last_good=4, failures=1, capacity=4, source="abc123")


# -- which pools it opens ------------------------------------------------------------------------------------
def test_a_claim_lapses_at_its_expiry_exactly() -> None:
    rows = [("gpu", 0, _shrunk())]
    assert watchdog.expired_pools(rows, NOW + 29.999) == []
    (restore,) = watchdog.expired_pools(rows, NOW + 30)
    assert (restore.pool, restore.slots, restore.capacity, restore.unsized) == ("gpu", 0, 4, False)
    assert restore.old_description == _shrunk()
    assert restore.new_description == watchdog.failed_open_description(_state(), NOW + 30)


@pytest.mark.parametrize("ahead_days", [31.5, 365, 1e6])
def test_a_claim_expiring_further_ahead_than_any_controller_writes_is_failed_open(ahead_days: float) -> None:
    """No controller claims a pool for longer than ``MAX_CLAIM`` (30 days): a claim that does was edited
    or corrupted, and taking it at its word would keep the pool shrunk for that long."""
    rows = [("gpu", 0, _shrunk(expires=NOW + ahead_days * 86400))]
    (restore,) = watchdog.expired_pools(rows, NOW)
    assert (restore.slots, restore.capacity) == (0, 4)
    assert "further ahead than any controller claims a pool" in restore.new_description


def test_a_claim_at_the_longest_window_stays_live_with_an_hour_of_clock_skew() -> None:
    """A controller with ``fail_open_after x interval`` = 30 days on a host whose clock runs ahead still
    holds its pool."""
    rows = [("gpu", 0, _shrunk(expires=NOW + MAX_CLAIM + 3000))]
    assert watchdog.expired_pools(rows, NOW) == []


def test_pools_without_a_lapsed_claim_or_with_an_unreadable_size_are_left_alone() -> None:
    """Only a lapsed claim is the watchdog's business; a size it cannot compare (not an int: a bool is
    no size either) is not guessed at."""
    lapsed = _shrunk()
    rows: list[tuple[Any, Any, Any]] = [
        ("live", 0, _shrunk(expires=NOW + 3600)),  # a controller is looking after it
        ("released", 0, with_state("released", _state().unclaimed())),  # no claim: a clean stop
        ("manual", 2, "a pool created by hand"),
        ("no_description", 1, None),
        ("torn_state", 0, 'gpu-dag watermark: pool 0 [gpu-dag-state {"capacity":4,'),
        ("bool", True, lapsed),
        ("text", "0", lapsed),
        ("float", 0.0, lapsed),
        ("missing", None, lapsed),
    ]
    assert watchdog.expired_pools(rows, NOW + 60) == []


@pytest.mark.parametrize("skew", [-120.0, 120.0])
def test_a_claim_lapses_by_the_schedulers_clock_so_clock_skew_moves_the_fail_open(skew: float) -> None:
    """The bound of docs/watermarks.md holds "plus the clock skew": a controller whose clock is ahead
    by ``skew`` seconds keeps its pool shut that much longer (behind: it is opened that much sooner)."""
    rest, controller_clock = FakeRest(), {"t": NOW + skew}
    controller = claim_controller(rest, controller_clock)
    reserving(rest)
    controller.tick()  # its last write; then it is killed
    pool = rest.pools["gpu"]
    rows = [("gpu", pool["slots"], pool["description"])]
    lapses = NOW + skew + 3 * INTERVAL  # fail_open_after (3) intervals after the write, by its clock
    assert watchdog.expired_pools(rows, lapses - 1) == []
    (restore,) = watchdog.expired_pools(rows, lapses)
    assert (restore.slots, restore.capacity) == (0, 4)


def test_a_lapsed_pool_above_its_capacity_is_not_shrunk_by_the_watchdog() -> None:
    """Failing open never takes slots away: an admin who enlarged the pool (GPUs added while no
    controller ran) keeps that size; only pools *below* their capacity are written back."""
    assert watchdog.expired_pools([("gpu", 8, _shrunk())], NOW + 60) == []


# -- writing to the metadata database --------------------------------------------------------------------
@pytest.fixture
def metadata_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The scheduler's metadata database, reduced to Airflow's pool table (SQLite in ``tmp_path``):
    ``create_session`` hands out sessions of it, committed on success as Airflow's are."""
    import airflow.utils.session as airflow_session
    from airflow.models.pool import Pool

    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")
    Pool.__table__.create(engine)

    @contextlib.contextmanager
    def create_session(scoped: bool = True) -> Iterator[Session]:
        with Session(engine) as session:
            try:
                yield session
                session.commit()
            except Exception:
                session.rollback()
                raise

    monkeypatch.setattr(airflow_session, "create_session", create_session)
    return engine


def _add_pools(engine: Engine, *pools: tuple[str, int, str | None]) -> None:
    from airflow.models.pool import Pool

    with Session(engine) as session, session.begin():
        session.add_all(
            Pool(pool=name, slots=slots, description=text, include_deferred=False)
            for name, slots, text in pools
        )


def _pools(engine: Engine) -> dict[str, tuple[int, str | None]]:
    from airflow.models.pool import Pool

    with Session(engine) as session:
        rows = session.execute(select(Pool.pool, Pool.slots, Pool.description)).all()
    return {name: (slots, text) for name, slots, text in rows}


@pytest.fixture
def fail_open_counts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The ``gpu_dag.watermark.fail_open`` counts sent, as ``(pool, by)``."""
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(watchdog.metrics, "watermark_fail_open", lambda pool, by: sent.append((pool, by)))
    return sent


def test_restore_expired_opens_lapsed_pools_in_the_database_and_says_so(
    metadata_db: Engine, fail_open_counts: list[tuple[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing hangs: a shut pool whose controller died is written back to its capacity, one it never
    measured loses its claim but keeps its size; both say so in the description and the scheduler's
    log, and only a pool that was opened is counted as failed open."""
    unmeasured = _shrunk(capacity=None, last_good=None)
    live = _shrunk(expires=NOW + 3600)
    _add_pools(
        metadata_db, ("gpu", 0, _shrunk()), ("new", 0, unmeasured), ("live", 0, live), ("manual", 3, "x")
    )
    with caplog.at_level(logging.WARNING, logger=watchdog.__name__):
        done = watchdog.restore_expired(NOW + 42)
    assert sorted((r.pool, r.slots, r.capacity, r.unsized) for r in done) == [
        ("gpu", 0, 4, False),
        ("new", 0, 0, True),
    ]
    pools = _pools(metadata_db)
    assert pools["gpu"] == (4, watchdog.failed_open_description(_state(), NOW + 42))
    assert pools["live"] == (0, live) and pools["manual"] == (3, "x")
    slots, text = pools["new"]
    assert slots == 0 and text is not None and "capacity unknown" in text
    assert parse_pool_state(text) == PoolState(failures=1, source="abc123")  # claim dropped
    assert fail_open_counts == [("gpu", "watchdog")]
    messages = [r.getMessage() for r in caplog.records]
    assert any("pool gpu failed open 0 -> 4 slots" in m and "lapsed 12s ago" in m for m in messages)
    assert any(
        "pool new stays at 0 slots" in m and "start the controller or size the pool by hand" in m
        for m in messages
    )


def test_a_second_check_finds_nothing_left_to_open(
    metadata_db: Engine, fail_open_counts: list[tuple[str, str]]
) -> None:
    """A pool is failed open once: the next check (or an HA scheduler's) writes nothing and counts
    nothing, and neither does one of a pool whose unmeasured claim was already dropped."""
    _add_pools(metadata_db, ("gpu", 0, _shrunk()), ("new", 0, _shrunk(capacity=None, last_good=None)))
    assert len(watchdog.restore_expired(NOW + 31)) == 2
    after = _pools(metadata_db)
    assert watchdog.restore_expired(NOW + 600) == []
    assert _pools(metadata_db) == after
    assert fail_open_counts == [("gpu", "watchdog")]


def test_a_controller_that_writes_between_the_watchdogs_read_and_write_wins(
    metadata_db: Engine, fail_open_counts: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write is a compare-and-swap on size and description: a controller that came back and renewed
    its claim after the watchdog read the pool is not undone (nor is another scheduler's write)."""
    from airflow.models.pool import Pool

    _add_pools(metadata_db, ("gpu", 0, _shrunk()))
    renewed = _shrunk(expires=NOW + 90)
    decide = watchdog.expired_pools

    def controller_writes_meanwhile(pools: Any, now: float) -> list[watchdog.Restore]:
        found = decide(pools, now)
        with Session(metadata_db) as session, session.begin():
            session.execute(update(Pool).where(Pool.pool == "gpu").values(description=renewed))
        return found

    monkeypatch.setattr(watchdog, "expired_pools", controller_writes_meanwhile)
    assert watchdog.restore_expired(NOW + 60) == []
    assert _pools(metadata_db)["gpu"] == (0, renewed)
    assert fail_open_counts == []


def test_restore_expired_reads_the_wall_clock_when_given_none(
    metadata_db: Engine, fail_open_counts: list[tuple[str, str]]
) -> None:
    now = time.time()
    _add_pools(metadata_db, ("old", 0, _shrunk(expires=now - 60)), ("fresh", 0, _shrunk(expires=now + 3600)))
    assert [r.pool for r in watchdog.restore_expired()] == ["old"]
    assert {name: slots for name, (slots, _) in _pools(metadata_db).items()} == {"old": 4, "fresh": 0}


# -- the thread and the listener --------------------------------------------------------------------------
class SteppingEvent:
    """A watchdog's stop event that does not sleep: each wait moves ``clock["t"]`` on by its timeout
    and calls ``on_wait`` (the world moving on meanwhile)."""

    def __init__(self, clock: dict[str, float], on_wait: Callable[[int], None] = lambda n: None) -> None:
        self.clock, self.on_wait, self.flag, self.waits = clock, on_wait, False, 0

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        self.flag = True

    def wait(self, timeout: float) -> bool:
        self.waits += 1
        self.clock["t"] += timeout
        self.on_wait(self.waits)
        return self.flag


def _restore(pool: str) -> watchdog.Restore:
    return watchdog.Restore(pool, 0, 4, _state(), _shrunk(), "opened")


def test_the_watchdog_survives_failed_checks_and_logs_once_per_outage(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A check that fails (database away) never ends the thread nor reaches the scheduler; the error
    is logged at the first failure of each outage, not at every interval."""
    dog = watchdog.PoolWatchdog(0.0)
    outcomes: list[Any] = [
        RuntimeError("db down 1"),
        RuntimeError("db down 2"),
        [_restore("a")],
        RuntimeError("db down 3"),
        [],
        [_restore("b")],
    ]

    def check() -> list[watchdog.Restore]:
        outcome = outcomes.pop(0)
        if not outcomes:
            dog.stop()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(watchdog, "restore_expired", check)
    with caplog.at_level(logging.INFO, logger=watchdog.__name__):
        dog.run()  # in this thread: returns once stopped
    assert outcomes == [] and [r.pool for r in dog.restored] == ["a", "b"]
    logged = [r for r in caplog.records if "cannot check the GPU pools" in r.getMessage()]
    assert [str(r.exc_info[1]) for r in logged if r.exc_info] == ["db down 1", "db down 3"]
    assert any("fail-open check of GPU pools every 0s" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("job_type", "checks"), [("SchedulerJob", 1), ("DagProcessorJob", 0), (None, 0)], ids=str
)
def test_the_watchdog_waits_for_its_jobs_type_then_runs_in_a_scheduler_only(
    monkeypatch: pytest.MonkeyPatch, job_type: str | None, checks: int
) -> None:
    """Airflow sets the job's type just after ``on_starting``: the watchdog waits for it (a minute at
    most: a job that never gets one is not a scheduler) and then checks only in a scheduler."""
    clock = {"t": 0.0}
    monkeypatch.setattr(watchdog, "time", SimpleNamespace(monotonic=lambda: clock["t"], time=time.time))
    job = FakeJob()

    def typed_after_three_waits(waits: int) -> None:
        if waits == 3:
            job.job_type = job_type

    dog = watchdog.PoolWatchdog(10.0, job)
    dog.stopped = SteppingEvent(clock, typed_after_three_waits)  # type: ignore[assignment]
    calls: list[float] = []
    monkeypatch.setattr(watchdog, "restore_expired", lambda: calls.append(clock["t"]) or dog.stop() or [])
    dog.run()
    assert len(calls) == checks
    if job_type is None:
        assert 60.0 <= clock["t"] < 60.5  # gave up after a minute of 0.2-s waits
    elif checks:
        assert calls == [pytest.approx(0.6 + 10.0)]  # typed after 3 waits, then one period


def test_a_watchdog_stopped_before_its_job_is_typed_never_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "restore_expired", lambda: pytest.fail("checked after stop"))
    dog = watchdog.PoolWatchdog(0.0, FakeJob())
    dog.stop()
    dog.run()
    assert dog.restored == []


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> list[watchdog.PoolWatchdog]:
    """No watchdog running in this process, and none started for real: the ones the listener starts."""
    started: list[watchdog.PoolWatchdog] = []
    monkeypatch.setattr(watchdog, "_running", {})
    monkeypatch.setattr(watchdog.PoolWatchdog, "start", lambda self: started.append(self))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__WATERMARK_WATCHDOG_INTERVAL", "7")
    return started


def test_one_watchdog_per_process_stopped_with_its_job(no_threads: list[watchdog.PoolWatchdog]) -> None:
    """Airflow calls ``on_starting`` for every job of a process: the first starts the watchdog (with
    the configured period), later ones start no second; ``before_stopping`` stops it, once."""
    first, second = FakeJob(), FakeJob()
    watchdog.on_starting(first)
    watchdog.on_starting(second)
    (dog,) = no_threads
    assert (dog.period, dog.job, dog.daemon) == (7.0, first, True)
    watchdog.before_stopping(first)
    assert dog.stopped.is_set() and watchdog._running == {}
    watchdog.before_stopping(second)  # nothing left to stop: no error
    watchdog.on_starting(second)  # a job started later in the process gets one again
    assert len(no_threads) == 2 and no_threads[1].job is second


@pytest.mark.parametrize("fails", ["settings", "thread"])
def test_a_watchdog_that_cannot_start_does_not_break_the_job(
    no_threads: list[watchdog.PoolWatchdog],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fails: str,
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("can't start new thread")

    if fails == "settings":
        monkeypatch.setattr(watchdog, "watermark_watchdog_interval", broken)
    else:
        monkeypatch.setattr(watchdog.PoolWatchdog, "start", broken)
    with caplog.at_level(logging.ERROR, logger=watchdog.__name__):
        watchdog.on_starting(FakeJob())  # does not raise into Airflow
    (record,) = [r for r in caplog.records if r.getMessage() == "gpu-dag watchdog: not started"]
    assert record.exc_info is not None and "can't start new thread" in str(record.exc_info[1])
    assert no_threads == []
    watchdog.before_stopping(FakeJob())
    assert watchdog._running == {}
