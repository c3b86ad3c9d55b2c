"""Start windows, pure: when may a task start, and how long after a run's start does its window open?

Two kinds, both with ``occurrence(anchor)``, ``state(anchor, now)`` and ``to_hint()``:

* :class:`TimeWindow`, a daily window between two times of day (``22:00``-``06:00`` spans midnight).
  The window that applies to a run is the first occurrence whose end lies after the run's anchor
  (the end of its data interval, else its ``run_after``, else its logical date).
* :class:`FixedWindow`, one window between two instants (``2026-12-01T22:00+00:00`` -
  ``2026-12-02T06:00+00:00``); it must close after it opens.

:func:`parse_window` builds either from what a DAG author wrote and raises ``ValueError`` with the
fix; :func:`window_from_hint` reads the hint back (what the plan uses through
:func:`seconds_until_open`).

    >>> w = parse_window("22:00", "06:00")
    >>> from datetime import datetime, UTC
    >>> seconds_until_open(w, datetime(2026, 1, 1, 9, 0, tzinfo=UTC))
    46800.0
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "ON_MISSED",
    "FixedWindow",
    "TimeWindow",
    "Window",
    "parse_time_of_day",
    "parse_timezone",
    "parse_window",
    "seconds_until_open",
    "window_from_hint",
]

#: What to do when the window closed before the task could start.
ON_MISSED = ("skip", "fail")

_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")


def parse_time_of_day(value: object, what: str = "time") -> time:
    """``"22:00"``, ``"06:30:15"`` or a :class:`datetime.time` without microseconds or a zone (a window's
    hint stores it as ``HH:MM:SS``, and its zone is the window's ``tz``)."""
    if isinstance(value, time) and not value.microsecond and value.tzinfo is None:
        return value
    match = _TIME.match(str(value).strip()) if isinstance(value, str) else None
    if match:
        hour, minute, second = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
        if hour < 24 and minute < 60 and second < 60:
            return time(hour, minute, second)
    raise ValueError(f"{what}={value!r} is not a time of day; use 'HH:MM' or 'HH:MM:SS' (24h), e.g. '22:00'.")


#: A fixed offset as ``datetime.timezone`` names it (``UTC+02:00``): the name a window's hint stores.
_OFFSET = re.compile(r"UTC([+-])(\d\d):(\d\d)$")


def _zone(tz: str | tzinfo, prefix: str) -> tzinfo:
    if not isinstance(tz, str):
        try:  # the task's hint stores the zone's name: the plan must read the same zone back from it
            _zone(_tz_name(tz), prefix)
        except ValueError:
            raise ValueError(
                f"{prefix}timezone {tz!r} has no name a plan can read back; use an IANA name like "
                "'Europe/Berlin'."
            ) from None
        return tz
    if offset := _OFFSET.match(tz.strip()):
        sign = -1 if offset.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3))))
    try:
        return UTC if tz.upper() == "UTC" else ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{prefix}unknown timezone {tz!r}; use an IANA name like 'Europe/Berlin'.") from None


def parse_timezone(tz: str | tzinfo, where: str = "") -> tzinfo:
    """The zone ``tz`` names (an IANA name, ``UTC``, ``UTC+02:00``, or a zone a plan can read back from
    its name). :raises ValueError: an unknown zone; ``where`` prefixes the message."""
    return _zone(tz, f"{where}: " if where else "")


def _tz_name(zone: tzinfo) -> str:
    """The name a window's hint stores ``zone`` by. A fixed offset is stored as its offset
    (``UTC+01:00``), never by its own name: ``timezone(+1h, "CET")`` would read back as the IANA zone
    CET, which has summer time."""
    if isinstance(zone, timezone):
        return str(timezone(zone.utcoffset(None)))  # "UTC" for a zero offset
    return getattr(zone, "key", None) or str(zone)


@dataclass(frozen=True)
class TimeWindow:
    """A daily window ``[opens, closes)`` in ``tz``; ``closes <= opens`` means it spans midnight."""

    opens: time
    closes: time
    tz: tzinfo = UTC

    @classmethod
    def parse(cls, opens: object, closes: object, tz: str | tzinfo = "UTC", where: str = "") -> TimeWindow:
        """Validate times of day; ``where`` (e.g. "task 'train'") prefixes the error message."""
        prefix = f"{where}: " if where else ""
        try:
            start = parse_time_of_day(opens, "opens")
            end = parse_time_of_day(closes, "closes")
        except ValueError as err:
            raise ValueError(prefix + str(err)) from None
        if start == end:
            raise ValueError(
                f"{prefix}impossible start window: opens={opens!r} equals closes={closes!r}, so it is "
                "never open. Give two different times, e.g. opens='22:00', closes='06:00'."
            )
        return cls(start, end, _zone(tz, prefix))

    @property
    def wraps(self) -> bool:
        return self.closes <= self.opens

    def _occurrence(self, day: date) -> tuple[datetime, datetime]:
        start = _wall_time(day, self.opens, self.tz)
        end = _wall_time(day + timedelta(days=1) if self.wraps else day, self.closes, self.tz)
        return start, end

    def occurrence(self, anchor: datetime) -> tuple[datetime, datetime]:
        """The first window ``(start, end)`` whose end is after ``anchor`` (aware datetime); a day whose
        window the clocks skip entirely (it lies in a daylight-saving gap) has none."""
        local = anchor.astimezone(self.tz)
        for offset in (-1, 0, 1, 2):
            start, end = self._occurrence(local.date() + timedelta(days=offset))
            # instants: the same zone compares wall times
            if end.astimezone(UTC) > max(anchor.astimezone(UTC), start.astimezone(UTC)):
                return start, end
        raise AssertionError("unreachable: a daily window recurs every day")  # pragma: no cover

    def state(self, anchor: datetime, now: datetime) -> tuple[str, datetime, datetime]:
        """``("before"|"open"|"missed", start, end)`` of the run's window at ``now``."""
        return _state(*self.occurrence(anchor), now)

    def to_hint(self) -> dict[str, Any]:
        """JSON-ready form stored in the task's hints (``executor_config``)."""
        return {
            "opens": self.opens.isoformat(),
            "closes": self.closes.isoformat(),
            "tz": _tz_name(self.tz),
        }


@dataclass(frozen=True)
class FixedWindow:
    """One window ``[start, end)`` between two aware instants (``end`` after ``start``)."""

    start: datetime
    end: datetime

    def occurrence(self, anchor: datetime) -> tuple[datetime, datetime]:
        """The window itself, whatever the run."""
        return self.start, self.end

    def state(self, anchor: datetime, now: datetime) -> tuple[str, datetime, datetime]:
        """``("before"|"open"|"missed", start, end)`` at ``now``."""
        return _state(self.start, self.end, now)

    def to_hint(self) -> dict[str, Any]:
        """JSON-ready form stored in the task's hints."""
        return {"opens": self.start.isoformat(), "closes": self.end.isoformat(), "fixed": True}


Window = TimeWindow | FixedWindow


def _wall_time(day: date, clock: time, zone: tzinfo) -> datetime:
    """``clock`` on ``day`` in ``zone``; a time the clocks skip (a daylight-saving gap, 02:30 when they
    jump from 02:00 to 03:00) is the first instant at or after it: the jump. Read as an hour later, a
    window from 02:30 to 03:30 would be empty that day and its task missed."""
    moment = datetime.combine(day, clock, zone)
    wall = moment.replace(tzinfo=None)
    if moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall:
        return moment  # exists (fold 0: the first of the two in an hour the clocks repeat)
    # in a gap: fold 1 reads it with the offset after the jump (an instant before it), fold 0 after it
    early = int(moment.replace(fold=1).timestamp())
    late = int(moment.timestamp())
    while late - early > 1:  # the jump is on a whole second
        middle = (early + late) // 2
        if datetime.fromtimestamp(middle, zone).replace(tzinfo=None) >= wall:
            late = middle
        else:
            early = middle
    return datetime.fromtimestamp(late, zone)


def _state(start: datetime, end: datetime, now: datetime) -> tuple[str, datetime, datetime]:
    instant = now.astimezone(UTC)
    if instant < start.astimezone(UTC):
        return "before", start, end
    if instant < end.astimezone(UTC):
        return "open", start, end
    return "missed", start, end


def _instant(value: object, what: str, zone: tzinfo) -> datetime | None:
    """An aware datetime from a ``datetime`` or an ISO string with a date; None for a time of day."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and ("T" in value or "-" in value.strip()[:5]):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{what}={value!r} is neither a time of day ('22:00') nor an ISO date-time "
                "('2026-12-01T22:00+00:00')."
            ) from None
    else:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


def parse_window(opens: object, closes: object, tz: str | tzinfo = "UTC", where: str = "") -> Window:
    """A daily :class:`TimeWindow` (two times of day) or a one-off :class:`FixedWindow` (two
    date-times; naive ones are read in ``tz``).

    :raises ValueError: malformed values, a daily window whose two times are equal, a one-off window
        that closes before (or when) it opens, or a mix of the two kinds; ``where`` prefixes the message.
    """
    prefix = f"{where}: " if where else ""
    zone = _zone(tz, prefix)
    try:
        start = _instant(opens, "opens", zone)
        end = _instant(closes, "closes", zone)
    except ValueError as err:
        raise ValueError(prefix + str(err)) from None
    if start is None and end is None:
        return TimeWindow.parse(opens, closes, zone, where=where)
    if start is None or end is None:
        raise ValueError(
            f"{prefix}opens={opens!r} and closes={closes!r} mix a time of day and a date-time; give two "
            "times of day for a daily window ('22:00', '06:00') or two date-times for a one-off window."
        )
    if end <= start:
        raise ValueError(
            f"{prefix}impossible start window: it closes at {end.isoformat()}, before it opens at "
            f"{start.isoformat()}, so the task could never start. Fix: swap opens and closes, or give "
            "a later closes."
        )
    return FixedWindow(start, end)


def window_from_hint(hint: object) -> Window | None:
    """The window stored in a task's hints (None when absent, templated or unreadable)."""
    if not isinstance(hint, dict):
        return None
    try:
        return parse_window(hint.get("opens"), hint.get("closes"), str(hint.get("tz") or "UTC"))
    except (ValueError, TypeError):
        return None


def seconds_until_open(window: Window, run_start: datetime) -> float:
    """Seconds from ``run_start`` until the run's window opens (0 when it is already open or missed)."""
    start, _ = window.occurrence(run_start)
    # in UTC: Python subtracts two datetimes of one zone by wall clock, an hour off across a DST change
    return max(0.0, (start.astimezone(UTC) - run_start.astimezone(UTC)).total_seconds())
