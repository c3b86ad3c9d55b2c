"""Start windows hold for the task, not only its sensor; the plan starts windowed tasks when they open."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from airflow_gpu_dag.core.model.windows import (
    ON_MISSED,
    FixedWindow,
    TimeWindow,
    parse_time_of_day,
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


# -- times of day and zones ------------------------------------------------------------------------------
def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("22:00", time(22, 0)),
        ("6:05", time(6, 5)),
        (" 06:30:15 ", time(6, 30, 15)),
        ("00:00", time(0, 0)),
        ("23:59:59", time(23, 59, 59)),
        (time(7, 15), time(7, 15)),
    ],
)
def test_parse_time_of_day_reads_hours_minutes_and_optional_seconds(value: object, expected: time) -> None:
    assert parse_time_of_day(value) == expected


@pytest.mark.parametrize("value", ["24:00", "12:60", "12:00:60", "7pm", "22", "22:00:00.5", "", 2200, None])
def test_parse_time_of_day_refuses_what_is_no_24h_time_and_names_the_field(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"opens={value!r} is not a time of day; use 'HH:MM'")):
        parse_time_of_day(value, "opens")


def test_the_missed_window_policies_are_skip_and_fail() -> None:
    assert ON_MISSED == ("skip", "fail")


@pytest.mark.parametrize("spelling", ["UTC", "utc", UTC, timezone(timedelta(0))])
def test_utc_is_one_zone_whatever_its_spelling(spelling: object) -> None:
    """Each spelling of UTC stores "UTC" in the hint, so the plan reads back the very same window."""
    window = parse_window("22:00", "06:00", spelling)  # type: ignore[arg-type]
    assert window.tz == UTC
    assert window.to_hint() == {"opens": "22:00:00", "closes": "06:00:00", "tz": "UTC"}
    assert window_from_hint(window.to_hint()) == window


@pytest.mark.parametrize("tz", ["Mars/Base", "UTC+2", "Europe/Nowhere", ""])
def test_an_unknown_zone_is_refused_naming_it_and_the_fix(tz: str) -> None:
    message = f"task 't': unknown timezone {tz!r}; use an IANA name like 'Europe/Berlin'."
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_window("22:00", "06:00", tz, where="task 't'")
    with pytest.raises(ValueError, match=re.escape(message)):  # also when two aware instants need none
        parse_window("2026-11-10T22:00+00:00", "2026-11-11T06:00+00:00", tz, where="task 't'")
    with pytest.raises(ValueError, match=re.escape(message)):
        TimeWindow.parse("22:00", "06:00", tz, where="task 't'")


# -- daily windows ---------------------------------------------------------------------------------------
def test_a_daily_window_wraps_only_when_it_closes_at_or_before_it_opens() -> None:
    assert TimeWindow(time(22), time(6)).wraps
    assert not TimeWindow(time(9), time(17)).wraps
    assert TimeWindow(time(9), time(17)).tz == UTC  # the default zone


def test_time_window_parse_errors_carry_the_where_prefix_only_when_given() -> None:
    with pytest.raises(ValueError, match=r"^task 't': closes='6pm' is not a time of day"):
        TimeWindow.parse("22:00", "6pm", where="task 't'")
    # "8:00" and "08:00:00" are the same time of day: the window would never be open
    with pytest.raises(ValueError, match=r"^impossible start window: opens='8:00' equals closes='08:00:00'"):
        TimeWindow.parse("8:00", "08:00:00")


def test_a_daily_window_inside_one_day_applies_today_until_it_closes_then_tomorrow() -> None:
    office = parse_window("09:00", "17:30")
    assert office.occurrence(_utc(2026, 5, 4, 8)) == (_utc(2026, 5, 4, 9), _utc(2026, 5, 4, 17, 30))
    assert office.occurrence(_utc(2026, 5, 4, 12)) == (_utc(2026, 5, 4, 9), _utc(2026, 5, 4, 17, 30))
    assert office.occurrence(_utc(2026, 5, 4, 17, 30)) == (_utc(2026, 5, 5, 9), _utc(2026, 5, 5, 17, 30))
    assert seconds_until_open(office, _utc(2026, 5, 4, 8)) == 3600.0
    assert seconds_until_open(office, _utc(2026, 5, 4, 12)) == 0.0


def test_a_window_is_open_from_its_opening_instant_and_missed_from_its_closing_one() -> None:
    """``[opens, closes)``: open at the very instant it opens, missed at the very instant it closes."""
    night = parse_window("22:00", "06:00")
    anchor = _utc(2026, 5, 4, 9)
    second = timedelta(seconds=1)
    assert night.state(anchor, _utc(2026, 5, 4, 22) - second)[0] == "before"
    assert night.state(anchor, _utc(2026, 5, 4, 22))[0] == "open"
    assert night.state(anchor, _utc(2026, 5, 5, 6) - second)[0] == "open"
    assert night.state(anchor, _utc(2026, 5, 5, 6)) == ("missed", _utc(2026, 5, 4, 22), _utc(2026, 5, 5, 6))
    once = parse_window("2026-05-04T22:00+00:00", "2026-05-05T06:00+00:00")
    assert once.state(anchor, _utc(2026, 5, 4, 22) - second)[0] == "before"
    assert once.state(anchor, _utc(2026, 5, 4, 22))[0] == "open"
    assert once.state(anchor, _utc(2026, 5, 5, 6))[0] == "missed"


def test_seconds_until_open_at_the_opening_and_closing_instants() -> None:
    """A run starting as its window opens waits 0 s; one starting as it closes gets the next night's."""
    night = parse_window("22:00", "06:00")
    assert seconds_until_open(night, _utc(2026, 5, 4, 22)) == 0.0
    assert seconds_until_open(night, _utc(2026, 5, 4, 21, 59, 59)) == 1.0
    assert seconds_until_open(night, _utc(2026, 5, 5, 5, 59, 59)) == 0.0
    assert night.occurrence(_utc(2026, 5, 5, 6)) == (_utc(2026, 5, 5, 22), _utc(2026, 5, 6, 6))
    assert seconds_until_open(night, _utc(2026, 5, 5, 6)) == 16 * 3600.0


def test_the_module_docstring_example_holds() -> None:
    assert seconds_until_open(parse_window("22:00", "06:00"), _utc(2026, 1, 1, 9)) == 46800.0


def test_anchors_and_nows_in_any_zone_are_compared_as_instants() -> None:
    night = parse_window("22:00", "06:00", "Europe/Berlin")  # 21:00-05:00 UTC in winter
    anchor_utc = _utc(2026, 1, 10, 12)
    anchor_ny = anchor_utc.astimezone(ZoneInfo("America/New_York"))
    assert night.occurrence(anchor_ny) == night.occurrence(anchor_utc)
    start, end = night.occurrence(anchor_ny)
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (_utc(2026, 1, 10, 21), _utc(2026, 1, 11, 5))
    tokyo = ZoneInfo("Asia/Tokyo")
    assert night.state(anchor_ny, _utc(2026, 1, 10, 20, 59).astimezone(tokyo))[0] == "before"
    assert night.state(anchor_ny, _utc(2026, 1, 10, 21).astimezone(tokyo))[0] == "open"
    assert seconds_until_open(night, anchor_ny) == seconds_until_open(night, anchor_utc) == 9 * 3600.0


# -- daylight-saving changes -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tz", "anchor", "opens_utc", "closes_utc"),
    [
        # Berlin: 2026-03-29 02:00 CET -> 03:00 CEST, 2026-10-25 03:00 CEST -> 02:00 CET
        ("Europe/Berlin", _utc(2026, 3, 28, 12), _utc(2026, 3, 28, 21), _utc(2026, 3, 29, 4)),
        ("Europe/Berlin", _utc(2026, 10, 24, 12), _utc(2026, 10, 24, 20), _utc(2026, 10, 25, 5)),
        # New York: 2026-03-08 02:00 EST -> 03:00 EDT, 2026-11-01 02:00 EDT -> 01:00 EST
        ("America/New_York", _utc(2026, 3, 7, 17), _utc(2026, 3, 8, 3), _utc(2026, 3, 8, 10)),
        ("America/New_York", _utc(2026, 10, 31, 16), _utc(2026, 11, 1, 2), _utc(2026, 11, 1, 11)),
    ],
    ids=["berlin-spring", "berlin-autumn", "new-york-spring", "new-york-autumn"],
)
def test_a_window_across_midnight_and_a_dst_change_keeps_its_wall_clock_times(
    tz: str, anchor: datetime, opens_utc: datetime, closes_utc: datetime
) -> None:
    """22:00-06:00 local over the night the clocks change lasts 7 h (spring) or 9 h (autumn), not 8."""
    window = parse_window("22:00", "06:00", tz)
    start, end = window.occurrence(anchor)
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (opens_utc, closes_utc)
    assert (start.time(), end.time()) == (time(22), time(6))
    assert window.state(anchor, closes_utc - timedelta(seconds=1))[0] == "open"
    assert window.state(anchor, closes_utc)[0] == "missed"


@pytest.mark.parametrize(
    ("run_start", "hours"),
    [
        (_utc(2026, 3, 8, 4), 4.0),  # 23:00 EST -> 04:00 EDT: 4 hours, not 5
        (_utc(2026, 11, 1, 3), 6.0),  # 23:00 EDT -> 04:00 EST: 6 hours, not 5
    ],
)
def test_seconds_until_open_across_a_dst_change_in_new_york(run_start: datetime, hours: float) -> None:
    window = parse_window("04:00", "06:00", "America/New_York")
    assert seconds_until_open(window, run_start) == hours * 3600
    assert seconds_until_open(window, run_start.astimezone(ZoneInfo("America/New_York"))) == hours * 3600


def test_a_window_opening_at_a_time_new_york_skips_opens_at_the_jump() -> None:
    """02:30 does not exist in New York on 2026-03-08 (02:00 EST -> 03:00 EDT): the window opens at 03:00
    EDT (07:00 UTC) that day and at 02:30 again the next."""
    window = parse_window("02:30", "04:00", "America/New_York")
    start, end = window.occurrence(_utc(2026, 3, 8, 0))
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (_utc(2026, 3, 8, 7), _utc(2026, 3, 8, 8))
    assert start.replace(tzinfo=None) == datetime(2026, 3, 8, 3, 0)
    assert seconds_until_open(window, _utc(2026, 3, 8, 0)) == 7 * 3600.0
    nxt = window.occurrence(_utc(2026, 3, 8, 8))
    assert [t.astimezone(UTC) for t in nxt] == [_utc(2026, 3, 9, 6, 30), _utc(2026, 3, 9, 8)]


@pytest.mark.parametrize(("opens", "closes"), [("02:00", "03:00"), ("02:15", "02:45")])
def test_a_window_new_york_skips_entirely_is_the_next_days(opens: str, closes: str) -> None:
    window = parse_window(opens, closes, "America/New_York")
    start, end = window.occurrence(_utc(2026, 3, 8, 0))
    assert start.astimezone(UTC).date() == end.astimezone(UTC).date() == datetime(2026, 3, 9).date()
    assert (start.time(), end.time()) == (parse_time_of_day(opens), parse_time_of_day(closes))
    assert window.state(_utc(2026, 3, 8, 0), _utc(2026, 3, 8, 7))[0] == "before"  # the jump: not missed


def test_a_window_closing_at_a_time_the_clocks_skip_closes_at_the_jump() -> None:
    """01:00-02:30 in Berlin on 2026-03-29 runs from 01:00 CET to the jump (03:00 CEST): one hour."""
    window = parse_window("01:00", "02:30", "Europe/Berlin")
    start, end = window.occurrence(_utc(2026, 3, 28, 12))
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (_utc(2026, 3, 29, 0), _utc(2026, 3, 29, 1))


def test_a_half_hour_dst_jump_is_found_too() -> None:
    """Lord Howe Island moves its clocks by 30 min (2026-10-04 02:00 -> 02:30): 02:15 opens at the jump."""
    window = parse_window("02:15", "03:00", "Australia/Lord_Howe")
    start, end = window.occurrence(_utc(2026, 10, 3, 0))
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (_utc(2026, 10, 3, 15, 30), _utc(2026, 10, 3, 16))


def test_a_day_a_zone_skips_entirely_has_no_window() -> None:
    """Samoa skipped 2011-12-30: a run anchored on the 29th evening gets the window of the 31st."""
    window = parse_window("09:00", "17:00", "Pacific/Apia")
    start, end = window.occurrence(_utc(2011, 12, 30, 6))  # 2011-12-29 20:00 local
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (_utc(2011, 12, 30, 19), _utc(2011, 12, 31, 3))
    assert start.date() == datetime(2011, 12, 31).date()


@pytest.mark.parametrize(
    ("tz", "opens", "closes", "opens_utc", "closes_utc"),
    [
        # New York repeats 01:00-02:00 on 2026-11-01 (EDT, then EST); Berlin repeats 02:00-03:00 on 10-25
        ("America/New_York", "01:30", "01:45", _utc(2026, 11, 1, 5, 30), _utc(2026, 11, 1, 5, 45)),
        ("Europe/Berlin", "02:30", "02:45", _utc(2026, 10, 25, 0, 30), _utc(2026, 10, 25, 0, 45)),
    ],
)
def test_a_window_in_the_repeated_hour_opens_once_at_its_first_occurrence(
    tz: str, opens: str, closes: str, opens_utc: datetime, closes_utc: datetime
) -> None:
    window = parse_window(opens, closes, tz)
    anchor = opens_utc - timedelta(hours=3)
    start, end = window.occurrence(anchor)
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (opens_utc, closes_utc)
    # the second time the clocks show it (an hour later) the window is over, not open again
    assert window.state(anchor, opens_utc + timedelta(hours=1, minutes=5))[0] == "missed"
    # a run anchored in the repeated hour after the window gets the next day's window
    later_start, _ = window.occurrence(opens_utc + timedelta(hours=1))
    assert later_start.astimezone(UTC) == opens_utc + timedelta(hours=25)


def test_a_window_spanning_the_repeated_hour_lasts_its_wall_clock_length() -> None:
    """01:00-02:00 in New York on 2026-11-01 covers both 01:xx hours: two hours of real time."""
    window = parse_window("01:00", "02:00", "America/New_York")
    start, end = window.occurrence(_utc(2026, 11, 1, 0))
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (_utc(2026, 11, 1, 5), _utc(2026, 11, 1, 7))
    assert window.state(_utc(2026, 11, 1, 0), _utc(2026, 11, 1, 6, 30))[0] == "open"  # 01:30 EST


# -- one-off windows -------------------------------------------------------------------------------------
def test_a_one_off_window_in_the_past_is_missed_and_needs_no_wait() -> None:
    past = parse_window("2020-01-01T22:00+00:00", "2020-01-02T06:00+00:00")
    now = _utc(2026, 5, 4, 12)
    assert (
        past.occurrence(now)
        == past.occurrence(_utc(2019, 1, 1))
        == (_utc(2020, 1, 1, 22), _utc(2020, 1, 2, 6))
    )
    assert past.state(now, now) == ("missed", _utc(2020, 1, 1, 22), _utc(2020, 1, 2, 6))
    assert seconds_until_open(past, now) == 0.0


def test_a_future_one_off_window_waits_real_seconds_across_a_dst_change() -> None:
    """Naive date-times are read in ``tz``: 23:00 CET to 04:00 CEST the next night is 4 h, not 5."""
    once = parse_window("2026-03-29T04:00", "2026-03-29T06:00", "Europe/Berlin")
    run_start = datetime(2026, 3, 28, 23, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    assert seconds_until_open(once, run_start) == 4 * 3600.0
    assert once.state(run_start, _utc(2026, 3, 29, 2))[0] == "open"  # 04:00 CEST


def test_one_off_windows_compare_instants_not_wall_clocks() -> None:
    """23:00+01:00 is 22:00 UTC: a window until 22:30+00:00 is half an hour long; one until 22:00+00:00
    closes when it opens and is refused."""
    ok = parse_window("2026-11-10T23:00+01:00", "2026-11-10T22:30+00:00")
    assert isinstance(ok, FixedWindow)
    assert ok.end - ok.start == timedelta(minutes=30)
    with pytest.raises(ValueError, match="before it opens"):
        parse_window("2026-11-10T23:00+01:00", "2026-11-10T22:00+00:00")


def test_naive_date_times_are_read_in_the_zone_and_aware_ones_keep_theirs() -> None:
    ny = "America/New_York"
    naive = parse_window(datetime(2026, 11, 10, 22), datetime(2026, 11, 11, 6), ny)
    assert (naive.start, naive.end) == (_utc(2026, 11, 11, 3), _utc(2026, 11, 11, 11))
    aware = parse_window(_utc(2026, 11, 10, 22), _utc(2026, 11, 11, 6), ny)
    assert (aware.start, aware.end) == (_utc(2026, 11, 10, 22), _utc(2026, 11, 11, 6))
    mixed = parse_window("2026-11-10T22:00", "2026-11-11T06:00Z", ny)
    assert (mixed.start, mixed.end) == (_utc(2026, 11, 11, 3), _utc(2026, 11, 11, 6))


def test_a_one_off_window_of_whole_days_runs_from_midnight_to_midnight() -> None:
    days = parse_window("2026-12-01", "2026-12-02", "Europe/Berlin")
    assert (days.start, days.end) == (_utc(2026, 11, 30, 23), _utc(2026, 12, 1, 23))


def test_a_one_off_window_hint_keeps_its_offsets_and_reads_back() -> None:
    once = parse_window("2026-11-10T22:00", "2026-11-11T06:00", "Europe/Berlin")
    assert once.to_hint() == {
        "opens": "2026-11-10T22:00:00+01:00",
        "closes": "2026-11-11T06:00:00+01:00",
        "fixed": True,
    }
    back = window_from_hint(once.to_hint())
    assert back == once and isinstance(back, FixedWindow)


@pytest.mark.parametrize(
    ("opens", "closes"),
    [(datetime(2026, 11, 10, 22), time(6)), (time(22), "2026-11-11T06:00"), ("22:00", _utc(2026, 11, 11, 6))],
)
def test_a_time_of_day_and_a_date_time_do_not_make_a_window(opens: object, closes: object) -> None:
    with pytest.raises(ValueError, match=r"^task 't': opens=.* mix a time of day and a date-time; give two"):
        parse_window(opens, closes, where="task 't'")


def test_a_reversed_one_off_window_names_the_task_both_instants_and_the_fix() -> None:
    message = (
        "DAG 'd', task 't': impossible start window: it closes at 2026-12-01T22:00:00+00:00, before it opens "
        "at 2026-12-02T06:00:00+00:00, so the task could never start. Fix: swap opens and closes, or give "
        "a later closes."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_window("2026-12-02T06:00+00:00", "2026-12-01T22:00+00:00", where="DAG 'd', task 't'")


def test_a_malformed_date_time_is_refused_with_both_accepted_forms() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            "task 't': closes='2026-11-31T06:00' is neither a time of day ('22:00') nor an ISO date-time "
            "('2026-12-01T22:00+00:00')."
        ),
    ):
        parse_window("2026-11-10T22:00", "2026-11-31T06:00", where="task 't'")


# -- hints -----------------------------------------------------------------------------------------------
def test_a_daily_window_hint_names_its_zone_and_keeps_seconds() -> None:
    window = parse_window("22:00:30", "06:30:15", "Europe/Berlin")
    assert window.to_hint() == {"opens": "22:00:30", "closes": "06:30:15", "tz": "Europe/Berlin"}
    assert window_from_hint(window.to_hint()) == window


@pytest.mark.parametrize(
    "hint",
    [
        [],
        "22:00-06:00",
        {},
        {"opens": "22:00"},
        {"opens": "22:00", "closes": "22:00"},
        {"opens": "22:00", "closes": "06:00", "tz": "Mars/Base"},
        {"opens": 22, "closes": 6},
        {"opens": "22:00", "closes": "2026-11-11T06:00+00:00"},
        {"opens": "2026-11-11T06:00+00:00", "closes": "2026-11-10T22:00+00:00", "fixed": True},
        {"templated": True, "on_missed": "skip"},
    ],
)
def test_window_from_hint_gives_none_for_what_is_no_window(hint: object) -> None:
    """The plan treats an unreadable hint as no window (planned as open) instead of crashing."""
    assert window_from_hint(hint) is None


@pytest.mark.parametrize("hint", [{}, {"tz": None}, {"tz": ""}])
def test_window_from_hint_reads_a_missing_zone_as_utc(hint: dict) -> None:
    back = window_from_hint({"opens": "22:00", "closes": "06:00", **hint})
    assert back == TimeWindow(time(22), time(6), UTC)


def test_window_from_hint_reads_the_wire_form_the_plan_passes() -> None:
    """The contract's wire form adds ``on_missed`` (and ``fixed``, ``tz``): they do not hide the window."""
    daily = window_from_hint(
        {"opens": "22:00:00", "closes": "06:00:00", "tz": "Europe/Berlin", "on_missed": "fail"}
    )
    assert daily == TimeWindow(time(22), time(6), ZoneInfo("Europe/Berlin"))
    fixed = window_from_hint(
        {"opens": "2026-11-10T22:00", "closes": "2026-11-11T06:00", "fixed": True, "tz": "Europe/Berlin"}
    )
    assert fixed == FixedWindow(_utc(2026, 11, 10, 21), _utc(2026, 11, 11, 5))


# -- a window read back from its hint means the same instants -------------------------------------------
def test_a_named_fixed_offset_zone_reads_back_as_the_same_offset() -> None:
    """A window the parser accepts must mean the same instants once read back from its hint (the plan)."""
    window = parse_window("22:00", "06:00", timezone(timedelta(hours=1), "CET"))
    back = window_from_hint(window.to_hint())
    july = _utc(2026, 7, 1, 12)  # 13:00 at +01:00: opens in 9 h
    assert back is not None
    assert seconds_until_open(back, july) == seconds_until_open(window, july) == 9 * 3600.0


@pytest.mark.parametrize(
    "opens",
    [time(22, 0, 0, 500), time(22, 0, tzinfo=timezone(timedelta(hours=2)))],
    ids=["microseconds", "tzinfo"],
)
def test_a_time_object_the_window_accepts_reads_back_from_its_hint(opens: time) -> None:
    """Either the parser refuses such a time, or the window it makes survives its hint."""
    try:
        window = parse_window(opens, "06:00")
    except ValueError:
        return  # refusing it at parse time is a fix too
    assert window_from_hint(window.to_hint()) == window
