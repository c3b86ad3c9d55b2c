"""Tests of ``airflow_gpu_dag.sensors.window``."""

from __future__ import annotations

import datetime as dt
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
    TaskDeferred,
)

from airflow_gpu_dag.sensors import StartWindowSensor
from airflow_gpu_dag.sensors.window import WindowGuard


# -- the task's own check ------------------------------------------------------------------------------
def _context(anchor: datetime, resumed: bool = False, task_obj: object = None) -> dict:
    server = SimpleNamespace(next_method="execute_complete" if resumed else None)
    return {
        "dag_run": SimpleNamespace(logical_date=anchor, run_after=anchor),
        "ti": SimpleNamespace(_ti_context_from_server=server),
        "task": task_obj or SimpleNamespace(task_id="train", render_template=lambda v, c: v),
    }


def _guard(on_missed: str = "skip", **kwargs: object) -> WindowGuard:
    opens = (datetime.now(UTC) - timedelta(hours=3)).strftime("%H:%M")
    closes = (datetime.now(UTC) - timedelta(hours=1)).strftime("%H:%M")
    return WindowGuard(
        opens=opens, closes=closes, on_missed=on_missed, sensor_task_id="train__window", **kwargs
    )


def test_guard_stops_a_task_that_would_start_after_its_window() -> None:
    anchor = datetime.now(UTC) - timedelta(hours=4)
    with pytest.raises(
        AirflowSkipException, match=r"was missed .* before the task could start.*on_missed='skip'"
    ):
        _guard("skip")(_context(anchor))
    with pytest.raises(AirflowFailException, match="on_missed='fail'"):
        _guard("fail")(_context(anchor))
    _guard("fail")(_context(anchor, resumed=True))  # a deferred task resuming started inside it


def test_guard_lets_the_task_start_inside_and_refuses_before() -> None:
    now = datetime.now(UTC)
    inside = WindowGuard(
        opens=(now - timedelta(minutes=5)).isoformat(), closes=(now + timedelta(hours=1)).isoformat()
    )
    inside(_context(now))
    before = WindowGuard(
        opens=(now + timedelta(hours=1)).isoformat(),
        closes=(now + timedelta(hours=2)).isoformat(),
        sensor_task_id="train__window",
    )
    with pytest.raises(AirflowException, match=r"is not open yet .*clear 'train__window' too"):
        before(_context(now))


def test_guard_renders_templates_and_runs_the_previous_hook() -> None:
    calls: list[str] = []
    now = datetime.now(UTC)
    guard = WindowGuard(
        opens="{{ opens }}",
        closes=(now + timedelta(hours=1)).isoformat(),
        previous=lambda context: calls.append("previous"),
    )
    rendered = SimpleNamespace(
        task_id="train", render_template=lambda v, c: (now - timedelta(minutes=1)).isoformat()
    )
    guard(_context(now, task_obj=rendered))
    assert calls == ["previous"]


def test_the_window_is_chosen_from_when_the_run_is_due_not_its_logical_date() -> None:
    """A data-interval timetable (CronDataIntervalTimetable, DeltaDataIntervalTimetable) creates the
    run for [D-1, D) at D with logical_date D-1. The window is chosen from when the run is due, for the
    sensor and the task's own check (WindowGuard) alike: the logical date's window, of the day before,
    is long closed, and the run would be skipped although it is due inside its window."""
    from airflow_gpu_dag.sensors.window import StartWindowSensor

    now = datetime.now(UTC)
    opens = (now - timedelta(hours=1)).strftime("%H:%M")
    closes = (now + timedelta(hours=1)).strftime("%H:%M")
    run_after = now - timedelta(minutes=5)
    dag_run = SimpleNamespace(
        logical_date=run_after - timedelta(days=1),
        run_after=run_after,
        data_interval_start=run_after - timedelta(days=1),
        data_interval_end=run_after,
    )
    context = {**_context(run_after), "dag_run": dag_run}
    sensor = StartWindowSensor(task_id="train__window", opens=opens, closes=closes, on_missed="skip")
    answer = sensor.execute(context)
    assert (
        datetime.fromisoformat(answer["window_start"]) <= now < datetime.fromisoformat(answer["window_end"])
    )
    WindowGuard(opens=opens, closes=closes, on_missed="fail")(context)  # starts: no exception
    # a run without run_after (an older context) is still chosen from its logical date
    old = {**context, "dag_run": SimpleNamespace(logical_date=run_after - timedelta(days=1), run_after=None)}
    with pytest.raises(AirflowSkipException, match="was missed"):
        sensor.execute(old)
    # a manual run given a past logical date L (interval [L, L)) takes L's window, though due now
    backdated = SimpleNamespace(
        logical_date=now - timedelta(days=1), data_interval_end=now - timedelta(days=1), run_after=now
    )
    with pytest.raises(AirflowSkipException, match="was missed"):
        sensor.execute({**context, "dag_run": backdated})
    # an asset-triggered run (no logical date, no interval) is chosen from run_after
    asset_run = SimpleNamespace(logical_date=None, data_interval_end=None, run_after=run_after)
    sensor.execute({**context, "dag_run": asset_run})


ENV = "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"


def _dag(**default_args: Any) -> DAG:
    return DAG("d", schedule=None, start_date=dt.datetime(2026, 1, 1), default_args=default_args)


def _window_context(now: dt.datetime) -> dict[str, Any]:
    class Run:
        data_interval_end = now
        run_after = now
        logical_date = now

    class Ti:
        def get_first_reschedule_date(self, context: Any) -> None:
            return None  # the first try

    return {"dag_run": Run(), "ti": Ti()}


def test_a_window_sensor_that_does_not_defer_reschedules_until_the_window_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not deferring, a closed window is checked again later from a worker (reschedule mode: no slot
    held meanwhile), never handed to a triggerer that may not run; a deferring one still defers."""
    monkeypatch.delenv(ENV, raising=False)
    now = dt.datetime.now(dt.UTC)
    opens, closes = (
        (now + dt.timedelta(hours=1)).strftime("%H:%M"),
        (now + dt.timedelta(hours=2)).strftime("%H:%M"),
    )
    sensor = StartWindowSensor(task_id="w", opens=opens, closes=closes, dag=_dag())
    assert sensor.mode == "reschedule"
    with pytest.raises(AirflowRescheduleException):
        sensor.execute(_window_context(now))
    deferring = StartWindowSensor(task_id="w", opens=opens, closes=closes, deferrable=True, dag=_dag())
    with pytest.raises(TaskDeferred):
        deferring.execute(_window_context(now))


def test_a_window_sensor_that_does_not_defer_passes_an_open_window_and_skips_a_missed_one() -> None:
    now = dt.datetime.now(dt.UTC)
    sensor = StartWindowSensor(
        task_id="w",
        opens=(now - dt.timedelta(minutes=5)).isoformat(),
        closes=(now + dt.timedelta(hours=1)).isoformat(),
        deferrable=False,
        dag=_dag(),
    )
    assert sensor.poke(_window_context(now)).xcom_value["window_end"]
    missed = StartWindowSensor(
        task_id="w",
        opens=(now - dt.timedelta(hours=2)).isoformat(),
        closes=(now - dt.timedelta(hours=1)).isoformat(),
        deferrable=False,
        dag=_dag(),
    )
    with pytest.raises(AirflowSkipException, match="was missed"):
        missed.poke(_window_context(now))


@pytest.mark.usefixtures("_deferring")
def test_templated_window_is_checked_at_run_time_only() -> None:
    with DAG("tw", schedule=None):
        StartWindowSensor(task_id="s", opens="{{ dag_run.conf['opens'] }}", closes="23:00")
