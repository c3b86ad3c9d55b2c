"""Start windows: a task may only start between two times of day.

    StartWindowSensor(task_id="train__window", opens="22:00", closes="06:00", on_missed="skip")

The window that applies to a DAG run is the first occurrence whose end lies after the run's
anchor (its logical date, else ``run_after``): a run created at 09:00 for a 22:00-06:00 window waits
for 22:00 that evening; a run created at 03:00 is already inside the window that opened at 22:00.
Before the window the sensor defers (no worker held) until it opens; inside it succeeds; after the
window closed it skips (``on_missed="skip"``: the gated chain is skipped) or fails
(``on_missed="fail"``) with a message giving the window.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_gpu_dag.hints import control_task_hints
from airflow_gpu_dag.sensors._common import resume_race_retry

__all__ = ["ON_MISSED", "StartWindowSensor", "TimeWindow", "parse_time_of_day"]

#: What to do when the window closed before the task could start.
ON_MISSED = ("skip", "fail")

_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")


def parse_time_of_day(value: object, what: str = "time") -> time:
    """``"22:00"``, ``"06:30:15"`` or a :class:`datetime.time`."""
    if isinstance(value, time):
        return value
    match = _TIME.match(str(value).strip()) if isinstance(value, str) else None
    if match:
        hour, minute, second = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
        if hour < 24 and minute < 60 and second < 60:
            return time(hour, minute, second)
    raise ValueError(f"{what}={value!r} is not a time of day; use 'HH:MM' or 'HH:MM:SS' (24h), e.g. '22:00'.")


@dataclass(frozen=True)
class TimeWindow:
    """A daily window ``[opens, closes)`` in ``tz``; ``closes <= opens`` means it spans midnight."""

    opens: time
    closes: time
    tz: tzinfo = UTC

    @classmethod
    def parse(cls, opens: object, closes: object, tz: str | tzinfo = "UTC", where: str = "") -> TimeWindow:
        """Validate; ``where`` (e.g. "task 'train'") prefixes the error message."""
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
        if isinstance(tz, str):
            try:
                zone: tzinfo = UTC if tz.upper() == "UTC" else ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f"{prefix}unknown timezone {tz!r}; use an IANA name like 'Europe/Berlin'."
                ) from None
        else:
            zone = tz
        return cls(start, end, zone)

    @property
    def wraps(self) -> bool:
        return self.closes <= self.opens

    def _occurrence(self, day: date) -> tuple[datetime, datetime]:
        start = datetime.combine(day, self.opens, self.tz)
        end = datetime.combine(day + timedelta(days=1) if self.wraps else day, self.closes, self.tz)
        return start, end

    def occurrence(self, anchor: datetime) -> tuple[datetime, datetime]:
        """The first window ``(start, end)`` whose end is after ``anchor`` (aware datetime)."""
        local = anchor.astimezone(self.tz)
        for offset in (-1, 0, 1):
            start, end = self._occurrence(local.date() + timedelta(days=offset))
            if end > anchor:
                return start, end
        raise AssertionError("unreachable: a daily window recurs every day")  # pragma: no cover

    def state(self, anchor: datetime, now: datetime) -> tuple[str, datetime, datetime]:
        """``("before"|"open"|"missed", start, end)`` of the run's window at ``now``."""
        start, end = self.occurrence(anchor)
        if now < start:
            return "before", start, end
        if now < end:
            return "open", start, end
        return "missed", start, end


def _templated(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


class StartWindowSensor(BaseSensorOperator):
    """Succeeds inside the run's start window; defers until it opens; skips/fails once it is missed.

    :param opens: time of day the window opens (``"HH:MM[:SS]"``); templated.
    :param closes: time of day it closes; ``closes <= opens`` spans midnight; templated.
    :param tz: IANA timezone of the times (default UTC).
    :param on_missed: ``"skip"`` (the gated task and its chain are skipped) or ``"fail"``.
    """

    template_fields: Sequence[str] = ("opens", "closes")
    ui_color = "#fff2b3"

    def __init__(
        self,
        *,
        opens: str,
        closes: str,
        tz: str = "UTC",
        on_missed: str = "skip",
        **kwargs: Any,
    ) -> None:
        task_id = kwargs.get("task_id", "?")
        if on_missed not in ON_MISSED:
            raise ValueError(
                f"task {task_id!r}: on_missed={on_missed!r} is not a policy; use 'skip' or 'fail'."
            )
        if not (_templated(opens) or _templated(closes)):
            TimeWindow.parse(opens, closes, tz, where=f"task {task_id!r}")
        # The window bounds the wait; the sensor timeout is only a backstop (2 days).
        kwargs.setdefault("timeout", timedelta(days=2))
        kwargs["executor_config"] = control_task_hints(kwargs.get("executor_config"))
        super().__init__(**resume_race_retry(kwargs))
        self.opens = opens
        self.closes = closes
        self.tz = tz
        self.on_missed = on_missed

    def _window(self) -> TimeWindow:
        return TimeWindow.parse(self.opens, self.closes, self.tz, where=f"task {self.task_id!r}")

    @staticmethod
    def _anchor(context: Any) -> datetime:
        dag_run = context.get("dag_run")
        for attr in ("logical_date", "run_after"):
            value = getattr(dag_run, attr, None) if dag_run is not None else None
            if isinstance(value, datetime):
                return value
        return datetime.now(UTC)

    def _decide(self, context: Any) -> Any:
        window = self._window()
        state, start, end = window.state(self._anchor(context), datetime.now(UTC))
        if state == "open":
            self.log.info("start window %s - %s is open", start.isoformat(), end.isoformat())
            return {"window_start": start.isoformat(), "window_end": end.isoformat()}
        if state == "missed":
            message = (
                f"task {self.task_id!r}: start window {start.isoformat()} - {end.isoformat()} was missed "
                f"(now {datetime.now(UTC).isoformat(timespec='seconds')})"
            )
            if self.on_missed == "skip":
                raise AirflowSkipException(message + "; skipping (on_missed='skip').")
            raise AirflowFailException(message + "; failing (on_missed='fail').")
        from airflow.providers.standard.triggers.temporal import DateTimeTrigger

        self.log.info("start window opens at %s; deferring until then", start.isoformat())
        self.defer(trigger=DateTimeTrigger(moment=start.astimezone(UTC)), method_name="execute_complete")

    def execute(self, context: Any) -> Any:
        return self._decide(context)

    def poke(self, context: Any) -> bool:  # not used: execute() decides; kept for the sensor API
        return self._window().state(self._anchor(context), datetime.now(UTC))[0] == "open"

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        return self._decide(context)
