"""Trigger times of DAG runs as the priority strategy sees them: a run id cannot claim any time."""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
from datetime import UTC, datetime
from types import SimpleNamespace

import pendulum
import pytest

from airflow_gpu_dag.priority import trigger
from airflow_gpu_dag.priority.trigger import parse_run_id_time

NOW = 1_796_040_000.0  # 2026-11-30T12:00:00Z


def _ti(run_id: str) -> SimpleNamespace:
    return SimpleNamespace(dag_id="d", run_id=run_id)


@pytest.fixture
def times(monkeypatch: pytest.MonkeyPatch) -> trigger.TriggerTimes:
    monkeypatch.setattr(trigger, "MAX_RUN_AGE", 30 * 86400.0)  # the shipped bound (tests/conftest.py)
    return trigger.TriggerTimes(clock=lambda: NOW)


def _airflow_run_ids(at: datetime) -> dict[str, str]:
    """The run ids Airflow 3.3 makes for runs whose run id carries the moment they were triggered
    (``DagRunType.generate_run_id``: ``<type>__<run_after>`` and, since 3.x, a random suffix)."""
    from airflow.models.dagrun import DagRun
    from airflow.timetables.base import DataInterval
    from airflow.timetables.simple import AssetTriggeredTimetable, NullTimetable
    from airflow.timetables.trigger import CronPartitionTimetable, CronTriggerTimetable
    from airflow.utils.types import DagRunType

    when = pendulum.instance(at)
    cron = CronTriggerTimetable("0 * * * *", timezone="UTC")
    partitioned = CronPartitionTimetable("0 * * * *", timezone="UTC")
    interval = DataInterval(when.subtract(hours=1), when)
    return {
        # the scheduler's asset-triggered runs, and TriggerDagRunOperator without a logical date
        "asset-triggered (scheduler)": DagRun.generate_run_id(
            run_type=DagRunType.ASSET_TRIGGERED, logical_date=None, run_after=when
        ),
        "TriggerDagRunOperator": DagRun.generate_run_id(
            run_type=DagRunType.MANUAL, logical_date=None, run_after=when
        ),
        "manual, with a logical date": DagRun.generate_run_id(
            run_type=DagRunType.MANUAL, logical_date=when, run_after=when
        ),
        # REST / UI triggers go through the DAG's timetable
        "REST, schedule=None": NullTimetable().generate_run_id(
            run_type=DagRunType.MANUAL, run_after=when, data_interval=None
        ),
        "REST, cron trigger": cron.generate_run_id(
            run_type=DagRunType.MANUAL, run_after=when, data_interval=None
        ),
        "REST, partitioned cron": partitioned.generate_run_id(
            run_type=DagRunType.MANUAL, run_after=when, data_interval=None
        ),
        "REST, partitioned cron with a key": partitioned.generate_run_id(
            run_type=DagRunType.MANUAL,
            run_after=when,
            data_interval=None,
            partition_key="2026-11-30T00:00:00",
        ),
        "asset materialization": AssetTriggeredTimetable([]).generate_run_id(
            run_type=DagRunType.ASSET_MATERIALIZATION, run_after=when, data_interval=interval
        ),
        "operator-triggered (execution API)": cron.generate_run_id(
            run_type=DagRunType.OPERATOR_TRIGGERED, run_after=when, data_interval=None
        ),
        "microseconds": DagRun.generate_run_id(
            run_type=DagRunType.ASSET_TRIGGERED, logical_date=None, run_after=when.add(microseconds=250_000)
        ),
    }


def test_a_run_id_in_the_future_is_weighed_as_triggered_now(
    times: trigger.TriggerTimes, caplog: pytest.LogCaptureFixture
) -> None:
    """``manual__9999-...`` put every task of the run behind every other DAG's for ever: a wait with no
    bound, which the cross-DAG policy promises never happens."""
    with caplog.at_level("WARNING", logger="airflow_gpu_dag.priority.trigger"):
        assert times.of(_ti("manual__9999-12-31T23:59:59+00:00")) == NOW
        assert times.of(_ti("manual__9999-12-31T23:59:59+00:00")) == NOW  # remembered: logged once
    (record,) = caplog.records
    assert "from now" in record.getMessage() and "weighed as triggered now" in record.getMessage()


def test_a_run_id_long_ago_is_weighed_as_at_most_30_days_old(times: trigger.TriggerTimes) -> None:
    """``manual__0001-...`` put every task of the run ahead of every other DAG's (the int32 maximum)."""
    assert times.of(_ti("manual__0001-01-01T00:00:00+00:00")) == NOW - 30 * 86400.0


def test_run_ids_within_the_bound_keep_their_time(times: trigger.TriggerTimes) -> None:
    assert times.of(_ti("manual__2026-11-30T11:00:00+00:00")) == NOW - 3600.0
    assert times.of(_ti("manual__2026-11-01T12:00:00+00:00")) == NOW - 29 * 86400.0
    assert times.of(_ti("scheduled__2020-01-01T00:00:00+00:00")) == NOW  # a logical date: first seen
    assert times.of(_ti("manual__2026-11-30T12:05:00+00:00")) == NOW + 300.0  # another host's clock, ahead


def test_every_run_id_airflow_makes_for_a_triggered_run_gives_its_trigger_time() -> None:
    """Airflow 3.3 appends a random suffix (``asset_triggered__2026-11-30T12:00:00+00:00_Jcy2ixpR``):
    the time was not read, so each process weighed the run from the moment *it* first saw it."""
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    ids = _airflow_run_ids(at)
    suffixed = ids["asset-triggered (scheduler)"]
    assert suffixed.startswith("asset_triggered__2026-11-30T12:00:00+00:00_") and len(suffixed) > 43
    got = {what: trigger.parse_run_id_time(run_id) for what, run_id in ids.items()}
    expected = {what: NOW + (0.25 if what == "microseconds" else 0.0) for what in ids}
    assert got == expected, ids


@pytest.mark.parametrize(
    "run_id",
    [
        "asset_triggered__2026-11-30T12:00:00+00:00_Jcy2ixpR",
        "manual__2026-11-30T12:00:00+00:00_aB3dE6gH",
        "manual__2026-11-30T12:00:00+00:00__aB3dE6gH",
        "manual__2026-11-30T12:00:00+00:00__2026-11-30__aB3dE6gH",
        "manual__2026-11-30T17:30:00+05:30",
        "manual__2026-11-30T12:00:00Z",
        "dataset_triggered__2026-11-30T12:00:00+00:00",  # Airflow 2
    ],
)
def test_suffixed_run_ids_parse(run_id: str) -> None:
    assert trigger.parse_run_id_time(run_id) == NOW


@pytest.mark.parametrize(
    "run_id",
    [
        "scheduled__2026-11-30T12:00:00+00:00",  # when due by the schedule: long ago for a catch-up
        "backfill__2026-11-30T12:00:00+00:00",
        "manual__2026-11-30T12:00:00+00:00x",  # not a suffix Airflow makes
        "manual__2026-13-30T12:00:00+00:00_Jcy2ixpR",
        "my own run",
        "",
    ],
)
def test_other_run_ids_carry_no_trigger_time(run_id: str) -> None:
    assert trigger.parse_run_id_time(run_id) is None


def test_two_processes_weigh_a_suffixed_run_from_the_same_moment() -> None:
    """The api-server creates the run's task instances at 12:00; the scheduler expands its mapped task
    two hours later (or restarts): both must use the run's trigger time, not when each first saw it."""
    run_id = "asset_triggered__2026-11-30T12:00:00+00:00_Jcy2ixpR"
    creator = trigger.TriggerTimes(clock=lambda: NOW)
    expander = trigger.TriggerTimes(clock=lambda: NOW + 7200)
    assert creator.of(_ti(run_id)) == expander.of(_ti(run_id)) == NOW


def test_a_loaded_run_comes_first_and_nothing_is_loaded_lazily() -> None:
    run = SimpleNamespace(run_after=datetime(2026, 11, 30, 11, 0, tzinfo=UTC), queued_at=None)
    loaded = SimpleNamespace(dag_id="d", run_id="asset_triggered__2026-11-30T12:00:00+00:00_Jcy2ixpR")
    loaded.__dict__["dag_run"] = run
    assert trigger.TriggerTimes(clock=lambda: NOW).of(loaded) == NOW - 3600

    class Lazy:  # a relationship not loaded yet: reading it would query the database
        dag_id = "d"
        run_id = "asset_triggered__2026-11-30T12:00:00+00:00_Jcy2ixpR"

        @property
        def dag_run(self) -> object:
            raise AssertionError("lazy load inside get_weight")

    assert trigger.TriggerTimes(clock=lambda: NOW + 7200).of(Lazy()) == NOW


@pytest.mark.parametrize("kind", ["backfill", "scheduled"])
def test_a_loaded_backfill_or_catch_up_run_is_weighed_from_its_creation_not_its_due_date(kind: str) -> None:
    """Clearing a task over the api-server loads its run: a backfill's ``run_after`` is the date it was
    due by the schedule (23 days ago), which put the cleared task ahead of every other DAG's. The run was
    created an hour ago: that is its trigger time."""
    from airflow.utils.types import DagRunType

    run_type = DagRunType(kind)
    due = datetime.fromtimestamp(NOW - 23 * 86400, UTC)
    created = datetime.fromtimestamp(NOW - 3600, UTC)
    run = SimpleNamespace(run_type=run_type, run_after=due, queued_at=due, created_at=created)
    cleared = SimpleNamespace(dag_id="d", run_id=f"{run_type.value}__{due.isoformat()}")
    cleared.__dict__["dag_run"] = run
    assert trigger.TriggerTimes(clock=lambda: NOW).of(cleared) == NOW - 3600
    # the same run weighed without its loaded run (the scheduler, at creation): first seen, not due
    assert (
        trigger.TriggerTimes(clock=lambda: NOW).of(SimpleNamespace(dag_id="d", run_id=cleared.run_id)) == NOW
    )


@pytest.mark.usefixtures("_fresh_strategies")
@pytest.mark.parametrize(
    "run_id",
    ["manual__0001-01-01T00:00:00+14:00", "manual__9999-12-31T23:59:59-14:00", "manual__2026-13-45T99:00:00"],
)
def test_out_of_range_run_ids_do_not_raise(run_id: str) -> None:
    found = parse_run_id_time(run_id)
    assert found is None or math.isfinite(found)


# -- direct checks of the module's promises ------------------------------------------------------------
def _loaded(run_id: str, **run: object) -> SimpleNamespace:
    """A task instance carrying its loaded run (in ``__dict__``, as SQLAlchemy keeps a loaded relation)."""
    ti = SimpleNamespace(dag_id="d", run_id=run_id)
    ti.__dict__["dag_run"] = SimpleNamespace(**run)
    return ti


@pytest.mark.parametrize(
    ("run_id", "expected"),
    [
        ("manual__2026-11-30T17:00:00+05", NOW),  # an hours-only offset
        ("manual__2026-11-30T17:30:00+0530", NOW),  # an offset without a colon
        ("manual__2026-11-30T12:00:00-00:00", NOW),
        ("manual__2026-11-30T12:00+00:00", NOW),  # no seconds
        ("manual__2026-11-30T12:00:00", NOW),  # no offset: UTC, not this host's zone
        ("manual__2026-11-30T12:00:00,5+00:00", NOW + 0.5),  # a decimal comma
        ("manual__2026-11-30T12:00:00.1234567+00:00", NOW + 0.123456),  # more digits than microseconds
        ("operator_triggered__2026-11-30T12:00:00+00:00", NOW),
        ("asset_materialization__2026-11-30T12:00:00+00:00_Jcy2ixpR", NOW),
    ],
)
def test_iso_forms_of_the_time_in_a_run_id_are_read(run_id: str, expected: float) -> None:
    assert parse_run_id_time(run_id) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    "run_id",
    [
        "MANUAL__2026-11-30T12:00:00+00:00",  # run types are lower case
        "manual__2026-11-30 12:00:00+00:00",  # not the isoformat Airflow writes
        "manual__2026-11-30T24:00:00+00:00",
        "manual__2026-11-30T12:00:00+24:00",  # an offset that does not exist
        "manual__\u0662\u0660\u0662\u0666-\u0661\u0661-\u0663\u0660T12:00:00+00:00",  # Arabic-Indic digits
        "manual_2026-11-30T12:00:00+00:00",
        "manual__",
    ],
)
def test_malformed_times_in_run_ids_give_none_not_an_error(run_id: str) -> None:
    assert parse_run_id_time(run_id) is None


def test_a_missing_run_id_gives_none() -> None:
    assert parse_run_id_time(None) is None  # type: ignore[arg-type]


def test_every_task_instance_of_a_run_gets_the_time_first_seen_even_as_the_clock_moves() -> None:
    ticks = iter([NOW, NOW + 60, NOW + 120])
    times = trigger.TriggerTimes(clock=lambda: next(ticks))
    first = times.of(_ti("scheduled__2026-11-01T00:00:00+00:00"))
    assert first == NOW
    assert times.of(_ti("scheduled__2026-11-01T00:00:00+00:00")) == NOW  # remembered: the clock not read
    assert (
        times.of(SimpleNamespace(dag_id="other", run_id="scheduled__2026-11-01T00:00:00+00:00")) == NOW + 60
    )


def test_the_least_recently_used_run_is_forgotten_first() -> None:
    ticks = iter(float(NOW + i) for i in range(10))
    times = trigger.TriggerTimes(size=2, clock=lambda: next(ticks))
    a, b, c = (_ti(f"scheduled__2026-11-0{i}T00:00:00+00:00") for i in (1, 2, 3))
    assert (times.of(a), times.of(b)) == (NOW, NOW + 1)
    assert times.of(a) == NOW  # used again: b is now the oldest
    assert times.of(c) == NOW + 2
    assert times.of(a) == NOW  # kept
    assert times.of(b) == NOW + 3  # forgotten: seen anew


def test_a_task_instance_without_ids_or_a_dict_is_weighed_as_first_seen() -> None:
    class Slotted:
        __slots__ = ("dag_id",)

        def __init__(self) -> None:
            self.dag_id = "d"

    times = trigger.TriggerTimes(clock=lambda: NOW)
    assert times.of(Slotted()) == NOW
    assert times.of(object()) == NOW


def test_a_naive_loaded_run_after_is_utc() -> None:
    ti = _loaded("manual__whatever", run_type="manual", run_after=datetime(2026, 11, 30, 11, 0))
    assert trigger.TriggerTimes(clock=lambda: NOW).of(ti) == NOW - 3600


def test_a_loaded_run_without_run_after_uses_queued_at_then_the_run_id() -> None:
    queued = _loaded(
        "manual__2026-11-30T10:00:00+00:00",
        run_type="manual",
        run_after=None,
        queued_at=pendulum.datetime(2026, 11, 30, 11, 0, tz="UTC"),
    )
    assert trigger.TriggerTimes(clock=lambda: NOW).of(queued) == NOW - 3600
    neither = _loaded("manual__2026-11-30T10:00:00+00:00", run_type="manual", run_after=None, queued_at=None)
    assert trigger.TriggerTimes(clock=lambda: NOW).of(neither) == NOW - 7200


def test_a_loaded_run_without_a_run_type_is_typed_by_its_run_id() -> None:
    manual = _loaded(
        "manual__2026-11-30T10:00:00+00:00",
        run_after=datetime(2026, 11, 30, 11, 0, tzinfo=UTC),
        created_at=datetime(2026, 11, 30, 11, 30, tzinfo=UTC),
    )
    assert trigger.TriggerTimes(clock=lambda: NOW).of(manual) == NOW - 3600
    scheduled = _loaded(
        "scheduled__2026-11-01T00:00:00+00:00",
        run_after=datetime(2026, 11, 1, tzinfo=UTC),
        created_at=datetime(2026, 11, 30, 11, 30, tzinfo=UTC),
    )
    assert trigger.TriggerTimes(clock=lambda: NOW).of(scheduled) == NOW - 1800


def test_a_relation_loaded_as_none_falls_back_to_the_run_id() -> None:
    ti = _ti("manual__2026-11-30T11:00:00+00:00")
    ti.__dict__["dag_run"] = None
    assert trigger.TriggerTimes(clock=lambda: NOW).of(ti) == NOW - 3600


def test_a_loaded_run_time_is_bounded_like_a_run_id(times: trigger.TriggerTimes) -> None:
    future = _loaded("manual__x", run_type="manual", run_after=datetime(2100, 1, 1, tzinfo=UTC))
    assert times.of(future) == NOW
    ancient = SimpleNamespace(dag_id="e", run_id="manual__y")
    ancient.__dict__["dag_run"] = SimpleNamespace(
        run_type="manual", run_after=datetime(2000, 1, 1, tzinfo=UTC)
    )
    assert times.of(ancient) == NOW - 30 * 86400.0


def test_the_bounds_themselves_are_kept(
    times: trigger.TriggerTimes, caplog: pytest.LogCaptureFixture
) -> None:
    oldest = datetime.fromtimestamp(NOW - trigger.MAX_RUN_AGE, UTC).isoformat()
    latest = datetime.fromtimestamp(NOW + trigger.CLOCK_SKEW, UTC).isoformat()
    with caplog.at_level("WARNING", logger="airflow_gpu_dag.priority.trigger"):
        assert times.of(_ti(f"manual__{oldest}")) == NOW - trigger.MAX_RUN_AGE
        assert times.of(_ti(f"manual__{latest}")) == NOW + trigger.CLOCK_SKEW
    assert caplog.records == []  # within the bounds: nothing to warn about
    beyond = datetime.fromtimestamp(NOW + trigger.CLOCK_SKEW + 1, UTC).isoformat()
    assert times.of(_ti(f"manual__{beyond}")) == NOW


def test_a_run_older_than_the_bound_is_logged_once_naming_the_run_and_the_bound(
    times: trigger.TriggerTimes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="airflow_gpu_dag.priority.trigger"):
        for _ in range(3):
            times.of(SimpleNamespace(dag_id="etl", run_id="manual__2000-01-01T00:00:00+00:00"))
    (record,) = caplog.records
    message = record.getMessage()
    assert "'manual__2000-01-01T00:00:00+00:00'" in message and "'etl'" in message
    assert " ago;" in message and "30 days ago" in message


def test_two_threads_weighing_a_new_run_at_once_get_the_same_time() -> None:
    """The class has a lock and promises one time per run in a process; two threads (the api-server's)
    that both miss the cache each read the clock and each return their own, the later overwriting it."""
    barrier = threading.Barrier(2, timeout=1.0)
    ticks = itertools.count()

    def clock() -> float:
        moment = NOW + next(ticks)
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()  # both threads missed the cache before either remembers its time
        return moment

    times = trigger.TriggerTimes(clock=clock)
    got: list[float] = []
    threads = [
        threading.Thread(target=lambda: got.append(times.of(_ti("scheduled__2026-11-01T00:00:00+00:00"))))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(got) == 2
    assert got[0] == got[1] == times.of(_ti("scheduled__2026-11-01T00:00:00+00:00"))
