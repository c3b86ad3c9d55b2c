"""Start windows: a task may only start between two times of day (or two instants).

    StartWindowSensor(task_id="train__window", opens="22:00", closes="06:00", on_missed="skip")

The window that applies to a DAG run is the first occurrence whose end lies after the run's
anchor, the end of its data interval (else its ``run_after``, else its logical date): a run created at
09:00 for a 22:00-06:00 window waits for 22:00 that evening; a run created at 03:00 is already inside
the window that opened at 22:00. With a data-interval timetable the run for the interval [D-1, D) is
due at D but its logical date is D-1: a daily window chosen from D-1 is usually over before the run is
even created, so the anchor is D. A manual run given a logical date L has the interval [L, L): its
window is the one of L, even when it is triggered later.
Before the window the sensor defers (no worker held) until it opens; inside it succeeds; after the
window closed it skips (``on_missed="skip"``: the gated chain is skipped) or fails
(``on_missed="fail"``) with a message giving the window. Two date-times (``"2026-12-01T22:00+00:00"``)
make a one-off window instead of a daily one.

The sensor alone does not hold the window for the task behind it: that task can wait in its pool and
start after the window closed. :class:`WindowGuard` is the task's own check, run by the Task SDK
just before the task executes (``pre_execute``), before a GPU task leases its devices; the
``start_window`` helper installs it on the gated task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_gpu_dag.airflow.declaring import partial_default
from airflow_gpu_dag.core.model.windows import (
    ON_MISSED,
    FixedWindow,
    TimeWindow,
    Window,
    parse_time_of_day,
    parse_timezone,
    parse_window,
)
from airflow_gpu_dag.deferral import declared_where, is_deferrable, resume_race_retry
from airflow_gpu_dag.executor_config import control_task_hints

__all__ = [
    "ON_MISSED",
    "FixedWindow",
    "StartWindowSensor",
    "TimeWindow",
    "WindowGuard",
    "check_on_missed",
    "parse_time_of_day",
    "templated",
]


def templated(value: object) -> bool:
    """True for a Jinja template, an expression ``{{ }}`` or a statement ``{% %}`` (checked at run time
    only)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def check_on_missed(on_missed: object, where: str) -> None:
    """Parse-time check of the missed-window policy; ``where`` names the DAG and the task."""
    if on_missed not in ON_MISSED:
        raise ValueError(f"{where}: on_missed={on_missed!r} is not a policy; use 'skip' or 'fail'.")


def _anchor(context: Any) -> datetime:
    """The moment the run's window is chosen from: the end of its data interval (when a scheduled run is
    due; a manual run's logical date), else ``run_after`` (runs without a logical date: asset-triggered,
    or triggered without one), else its logical date, else now. The sensor and the task's own check
    (:class:`WindowGuard`) share it."""
    dag_run = context.get("dag_run")
    for attr in ("data_interval_end", "run_after", "logical_date"):
        value = getattr(dag_run, attr, None) if dag_run is not None else None
        if isinstance(value, datetime):
            return value
    return datetime.now(UTC)


def _missed(who: str, start: datetime, end: datetime, on_missed: str, what: str) -> Exception:
    message = (
        f"task {who!r}: start window {start.isoformat()} - {end.isoformat()} was missed "
        f"(now {datetime.now(UTC).isoformat(timespec='seconds')}){what}"
    )
    if on_missed == "skip":
        return AirflowSkipException(message + "; skipping (on_missed='skip').")
    return AirflowFailException(message + "; failing (on_missed='fail').")


class StartWindowSensor(BaseSensorOperator):
    """Succeeds inside the run's start window; waits until it opens; skips/fails once it is missed.

    :param opens: time of day the window opens (``"HH:MM[:SS]"``), or a date-time for a one-off
        window; templated.
    :param closes: time of day it closes (``closes <= opens`` spans midnight), or a date-time after
        ``opens``; templated.
    :param tz: IANA timezone of the times (default UTC).
    :param on_missed: ``"skip"`` (the gated task and its chain are skipped) or ``"fail"``.
    :param deferrable: defer until the window opens (needs a running ``airflow triggerer``) instead of
        checking every ``poke_interval`` from a worker; default ``[operators] default_deferrable``
        (False unless set). Not deferring, it checks in ``mode="reschedule"`` unless given a mode, so
        it holds no worker slot while the window is closed.
    """

    template_fields: Sequence[str] = ("opens", "closes")
    ui_color = "#fff2b3"

    def __init__(
        self,
        *,
        opens: Any,
        closes: Any,
        tz: str = "UTC",
        on_missed: str = "skip",
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        where = declared_where(kwargs)
        check_on_missed(on_missed, where)
        deferrable = is_deferrable(deferrable)
        if not deferrable:
            kwargs["mode"] = partial_default(kwargs, "mode") or "reschedule"  # default_args' mode too
        if templated(opens) or templated(closes):  # the times are checked at run time, the zone now
            parse_timezone(tz, where=where)
        else:
            parse_window(opens, closes, tz, where=where)
        # The window bounds the wait; the sensor timeout is only a backstop (2 days).
        kwargs.setdefault("timeout", timedelta(days=2))
        kwargs["executor_config"] = control_task_hints(kwargs.get("executor_config"))
        super().__init__(**resume_race_retry(kwargs))
        self.opens = opens
        self.closes = closes
        self.tz = tz
        self.on_missed = on_missed
        self.deferrable = deferrable

    def _window(self) -> Window:
        return parse_window(self.opens, self.closes, self.tz, where=f"task {self.task_id!r}")

    def _decide(self, context: Any) -> Any:
        window = self._window()
        state, start, end = window.state(_anchor(context), datetime.now(UTC))
        if state == "open":
            self.log.info("start window %s - %s is open", start.isoformat(), end.isoformat())
            return {"window_start": start.isoformat(), "window_end": end.isoformat()}
        if state == "missed":
            raise _missed(self.task_id, start, end, self.on_missed, "")
        if not self.deferrable:  # poke() until it opens (or is missed), from a worker
            return super().execute(context)
        self.log.info("start window opens at %s; deferring until then", start.isoformat())
        self.defer(trigger=DateTimeTrigger(moment=start.astimezone(UTC)), method_name="execute_complete")

    def execute(self, context: Any) -> Any:
        return self._decide(context)

    def poke(self, context: Any) -> PokeReturnValue:
        """Not deferring: done once the window is open; a missed window skips or fails."""
        state, start, end = self._window().state(_anchor(context), datetime.now(UTC))
        if state == "missed":
            raise _missed(self.task_id, start, end, self.on_missed, "")
        if state == "open":
            return PokeReturnValue(True, {"window_start": start.isoformat(), "window_end": end.isoformat()})
        self.log.info(
            "start window opens at %s; checking again in %ss", start.isoformat(), self.poke_interval
        )
        return PokeReturnValue(False)

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        return self._decide(context)


def _resumed(context: Any) -> bool:
    """True when this start resumes a deferred task (it started inside its window already)."""
    ti = context.get("ti")
    server = getattr(ti, "_ti_context_from_server", None)  # Task SDK: set when resuming after a trigger
    return bool(getattr(server, "next_method", None))


class WindowGuard:
    """The gated task's own window check, run by the Task SDK as its ``pre_execute`` hook.

    Inside the window the task runs. After the window closed it does not start: it is skipped
    (``on_missed="skip"``, its chain follows its trigger rules) or fails without retry
    (``on_missed="fail"``); a GPU task has leased nothing yet. Before the window opens (the task was
    cleared on its own, without its window sensor) it fails with a retryable error saying so. A
    deferred task resuming after the window closed is not stopped: it started inside it. Retries
    are new starts and are checked again.

    :param previous: a ``pre_execute`` hook the task already had; it runs first.
    """

    def __init__(
        self,
        *,
        opens: Any,
        closes: Any,
        tz: str = "UTC",
        on_missed: str = "skip",
        sensor_task_id: str | None = None,
        previous: Callable[[Any], Any] | None = None,
    ) -> None:
        self.opens = opens
        self.closes = closes
        self.tz = tz
        self.on_missed = on_missed
        self.sensor_task_id = sensor_task_id
        self.previous = previous

    def _window(self, context: Any) -> Window:
        task = context.get("task")
        values = []
        for value in (self.opens, self.closes):
            if templated(value) and task is not None:
                value = task.render_template(value, context)
            values.append(value)
        who = getattr(task, "task_id", "?")
        return parse_window(values[0], values[1], self.tz, where=f"task {who!r}")

    def __call__(self, context: Any) -> None:
        if self.previous is not None:
            self.previous(context)
        if _resumed(context):
            return
        task_id = getattr(context.get("task"), "task_id", "?")
        state, start, end = self._window(context).state(_anchor(context), datetime.now(UTC))
        if state == "open":
            return
        if state == "missed":
            raise _missed(task_id, start, end, self.on_missed, " before the task could start")
        sensor = (
            f" (clear {self.sensor_task_id!r} too: it waits for the window)" if self.sensor_task_id else ""
        )
        raise AirflowException(
            f"task {task_id!r}: start window {start.isoformat()} - {end.isoformat()} is not open yet"
            f"{sensor}; not starting."
        )
