"""Start windows hold for the task, not only its sensor; the plan starts windowed tasks when they open."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from airflow_gpu_dag.core.model.windows import (
    FixedWindow,
    TimeWindow,
    parse_window,
    seconds_until_open,
    window_from_hint,
)


def _at(hour: int, minute: int = 0, day: int = 10) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


# -- pure window arithmetic ---------------------------------------------------------------------------
def test_parse_window_daily_and_fixed() -> None:
    assert isinstance(parse_window("22:00", "06:00"), TimeWindow)
    fixed = parse_window("2026-11-10T22:00+00:00", "2026-11-11T06:00+00:00")
    assert isinstance(fixed, FixedWindow)
    assert fixed.state(_at(1), _at(23))[0] == "open"
    assert fixed.state(_at(1), _at(7, day=11))[0] == "missed"
    naive = parse_window("2026-11-10T22:00", "2026-11-11T01:00", tz="Europe/Berlin")
    assert naive.occurrence(_at(1))[0] == _at(21)  # 22:00 in Berlin is 21:00 UTC


@pytest.mark.parametrize(
    ("opens", "closes", "message"),
    [
        (
            "2026-11-11T06:00+00:00",
            "2026-11-10T22:00+00:00",
            "closes at 2026-11-10T22:00:00\\+00:00, before it opens",
        ),
        ("2026-11-10T22:00+00:00", "2026-11-10T22:00+00:00", "before it opens"),
        ("22:00", "2026-11-10T22:00+00:00", "mix a time of day and a date-time"),
        ("2026-13-40T22:00", "23:00", "neither a time of day"),
        ("08:00", "08:00", "equals closes"),
    ],
)
def test_impossible_windows_name_the_problem(opens: str, closes: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_window(opens, closes, where="task 't'")


def test_seconds_until_open_and_hints_round_trip() -> None:
    night = parse_window("22:00", "06:00")
    assert seconds_until_open(night, _at(9)) == 13 * 3600
    assert seconds_until_open(night, _at(23)) == 0  # already open
    assert window_from_hint(night.to_hint()) == night
    fixed = parse_window("2026-11-10T22:00+00:00", "2026-11-11T06:00+00:00")
    assert window_from_hint(fixed.to_hint()) == fixed
    assert window_from_hint({"templated": True}) is None
    assert window_from_hint(None) is None


@pytest.mark.parametrize(
    ("run_local", "hours"),
    [
        # DST starts 2026-03-29 02:00 in Berlin: 23:00 CET -> 04:00 CEST is 4 hours, not 5
        (datetime(2026, 3, 28, 23, 0), 4.0),
        # DST ends 2026-10-25 03:00: 23:00 CEST -> 04:00 CET is 6 hours, not 5
        (datetime(2026, 10, 24, 23, 0), 6.0),
    ],
)
def test_seconds_until_open_across_a_dst_change_whatever_the_zone_of_the_run(
    run_local: datetime, hours: float
) -> None:
    from zoneinfo import ZoneInfo

    berlin = ZoneInfo("Europe/Berlin")
    window = parse_window("04:00", "06:00", "Europe/Berlin")
    in_berlin = run_local.replace(tzinfo=berlin)
    assert seconds_until_open(window, in_berlin) == pytest.approx(hours * 3600)
    assert seconds_until_open(window, in_berlin.astimezone(UTC)) == pytest.approx(hours * 3600)
    # state() at one minute before the window opens, asked in the window's own zone
    opens = in_berlin.astimezone(UTC) + timedelta(hours=hours)
    state, start, _ = window.state(in_berlin, (opens - timedelta(minutes=1)).astimezone(berlin))
    assert state == "before" and start.astimezone(UTC) == opens


def test_a_window_in_a_fixed_offset_zone_reads_back_from_its_hint() -> None:
    # The hint of tz=timezone(timedelta(hours=2)) must read back: "UTC+02:00" is no name ZoneInfo
    # reads, and the plan and the critical-path page would drop the window without a word.
    from datetime import UTC, datetime, timedelta, timezone

    from airflow_gpu_dag.core.model.windows import parse_window, seconds_until_open, window_from_hint

    window = parse_window("22:00", "06:00", timezone(timedelta(hours=2)))
    back = window_from_hint(window.to_hint())
    assert back == window
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)  # 14:00 at +02:00: opens in 8 h
    assert seconds_until_open(back, now) == seconds_until_open(window, now) == 8 * 3600
    minus = parse_window("01:00", "02:00", "UTC-05:30")
    assert minus.tz.utcoffset(None) == -timedelta(hours=5, minutes=30)


def test_a_zone_without_a_readable_name_is_refused_at_parse_time() -> None:
    from datetime import timedelta, tzinfo

    from airflow_gpu_dag.core.model.windows import parse_window

    class Odd(tzinfo):
        def utcoffset(self, dt: datetime | None) -> timedelta:
            return timedelta(hours=1)

        def dst(self, dt: datetime | None) -> timedelta:
            return timedelta(0)

        def __repr__(self) -> str:
            return "Odd()"

    with pytest.raises(ValueError, match="IANA name"):
        parse_window("22:00", "06:00", Odd())


def test_a_daily_window_partly_in_a_dst_gap_is_open_after_the_jump() -> None:
    """Berlin jumps from 02:00 to 03:00 on 2026-03-29. The window from 02:30 to 03:30 is open from the
    jump, 03:00-03:30 CEST: reading 02:30 as 03:30 CEST would leave it empty that night and its task
    missed."""
    window = parse_window("02:30", "03:30", "Europe/Berlin")
    anchor = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    start, end = window.occurrence(anchor)
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
    )
    assert window.state(anchor, datetime(2026, 3, 29, 1, 10, tzinfo=UTC))[0] == "open"
    assert seconds_until_open(window, anchor) == 7200.0


def test_a_daily_window_the_clocks_skip_entirely_is_the_next_days() -> None:
    """02:00-03:00 in Berlin does not exist on 2026-03-29: the window that applies is the next night's,
    never an empty one that is 'missed' the moment it opens."""
    window = parse_window("02:00", "03:00", "Europe/Berlin")
    anchor = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    start, end = window.occurrence(anchor)
    assert start.astimezone(UTC) == datetime(2026, 3, 30, 0, 0, tzinfo=UTC)
    assert end.astimezone(UTC) == datetime(2026, 3, 30, 1, 0, tzinfo=UTC)
    assert window.state(anchor, datetime(2026, 3, 29, 1, 0, tzinfo=UTC))[0] == "before"


@pytest.fixture
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


@pytest.mark.usefixtures("_deferring")
def test_window_occurrence_and_state() -> None:
    night = TimeWindow.parse("22:00", "06:00")
    assert night.wraps
    assert night.occurrence(_at(9)) == (_at(22), _at(6, day=11))
    assert night.occurrence(_at(3)) == (_at(22, day=9), _at(6))  # already inside last night's window
    assert night.state(_at(9), _at(12))[0] == "before"
    assert night.state(_at(9), _at(23))[0] == "open"
    assert night.state(_at(9), _at(7, day=11))[0] == "missed"
    day = TimeWindow.parse(time(9), "17:30")
    assert day.state(_at(8), _at(17, 30))[0] == "missed"
    assert day.state(_at(18), _at(18))[0] == "before"  # next day's window


@pytest.mark.usefixtures("_deferring")
def test_window_in_other_timezone() -> None:
    berlin = TimeWindow.parse("01:00", "02:00", "Europe/Berlin")
    start, end = berlin.occurrence(_at(12))
    assert start == datetime(2026, 11, 11, 0, 0, tzinfo=UTC) and end - start == timedelta(hours=1)
