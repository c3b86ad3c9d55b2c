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


# -- parse-time checks, defaults and the sensor's answers ------------------------------------------------
def _hhmm(delta: timedelta, tz: dt.tzinfo = UTC) -> str:
    return (datetime.now(tz) + delta).strftime("%H:%M")


def test_check_on_missed_accepts_the_two_policies_and_names_them_for_anything_else() -> None:
    from airflow_gpu_dag.sensors.window import check_on_missed

    check_on_missed("skip", "DAG 'd', task 'w'")
    check_on_missed("fail", "DAG 'd', task 'w'")
    for bad in ("Skip", "", None, ["skip"]):
        with pytest.raises(ValueError, match=r"^DAG 'd', task 'w': on_missed=.* use 'skip' or 'fail'"):
            check_on_missed(bad, "DAG 'd', task 'w'")


def test_templated_recognises_jinja_expressions_in_strings_only() -> None:
    from airflow_gpu_dag.sensors.window import templated

    assert templated("{{ dag_run.conf['opens'] }}")
    assert not templated("22:00") and not templated(None) and not templated(dt.time(22, 0))


def test_a_window_given_as_a_jinja_statement_is_checked_at_run_time_only() -> None:
    with DAG("tw_stmt", schedule=None):
        StartWindowSensor(
            task_id="s",
            opens="{% if dag_run.conf.get('late') %}23:00{% else %}22:00{% endif %}",
            closes="06:00",
        )


def test_an_unknown_timezone_is_refused_at_parse_time_even_with_templated_times() -> None:
    with (
        DAG("tw_tz", schedule=None),
        pytest.raises(ValueError, match="DAG 'tw_tz', task 's': unknown timezone"),
    ):
        StartWindowSensor(task_id="s", opens="{{ dag_run.conf['opens'] }}", closes="06:00", tz="Mars/Base")


@pytest.mark.parametrize(
    ("opens", "closes", "message"),
    [
        ("22:00", "22:00", r"opens='22:00' equals closes='22:00', so it is never open\. Give two"),
        ("24:00", "06:00", r"opens='24:00' is not a time of day; use 'HH:MM'"),
        ("22:00", "6h", r"closes='6h' is not a time of day"),
        (22, "06:00", r"opens=22 is not a time of day"),
        (None, "06:00", r"opens=None is not a time of day"),
        ("22:00", "2026-12-02T06:00+00:00", r"mix a time of day and a date-time; give two times"),
        (
            "2026-12-02T06:00+00:00",
            "2026-12-01T22:00+00:00",
            r"before it opens .* Fix: swap opens and closes",
        ),
        ("2026-12-01T22:00+00:00", "2026-12-01T22:00+00:00", r"before it opens"),
        ("2026-13-01T22:00", "2026-12-02T06:00", r"opens='2026-13-01T22:00' is neither a time of day"),
    ],
)
def test_an_impossible_window_is_refused_at_parse_time_naming_the_dag_the_task_and_the_fix(
    opens: object, closes: object, message: str
) -> None:
    with (
        DAG("tw_bad", schedule=None),
        pytest.raises(ValueError, match=r"^DAG 'tw_bad', task 's': .*" + message),
    ):
        StartWindowSensor(task_id="s", opens=opens, closes=closes)


def test_times_of_day_are_read_with_seconds_single_digit_hours_or_as_time_objects() -> None:
    with DAG("tw_ok", schedule=None):
        StartWindowSensor(task_id="a", opens="7:05", closes="23:59:59")
        StartWindowSensor(task_id="b", opens=dt.time(22, 0), closes=dt.time(6, 0), tz="Europe/Berlin")
        StartWindowSensor(task_id="c", opens="00:00", closes="00:00:01", tz="UTC+05:30")


def test_the_sensor_waits_two_days_at_most_unless_told_and_reschedules_unless_given_a_mode() -> None:
    sensor = StartWindowSensor(task_id="w", opens="22:00", closes="06:00", deferrable=False, dag=_dag())
    assert sensor.timeout == timedelta(days=2).total_seconds() and sensor.mode == "reschedule"
    poking = StartWindowSensor(
        task_id="p", opens="22:00", closes="06:00", deferrable=False, mode="poke", timeout=600, dag=_dag()
    )
    assert (poking.mode, poking.timeout) == ("poke", 600)
    assert poking.executor_config["gpu_dag"]["duration_s"] == 0.0  # a control task: no estimate padding
    assert set(StartWindowSensor.template_fields) == {"opens", "closes"}


def test_a_deferring_sensor_sleeps_until_the_window_opens_in_utc() -> None:
    kolkata = dt.timezone(timedelta(hours=5, minutes=30))
    sensor = StartWindowSensor(
        task_id="w",
        opens=_hhmm(timedelta(hours=2), kolkata),
        closes=_hhmm(timedelta(hours=3), kolkata),
        tz="Asia/Kolkata",
        deferrable=True,
        dag=_dag(),
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(_window_context(datetime.now(UTC)))
    moment = deferred.value.trigger.moment
    assert moment.utcoffset() == timedelta(0) and deferred.value.method_name == "execute_complete"
    assert timedelta(hours=1, minutes=58) < moment - datetime.now(UTC) <= timedelta(hours=2)


def test_resumed_inside_its_window_the_sensor_answers_the_window_in_its_timezone() -> None:
    kolkata = dt.timezone(timedelta(hours=5, minutes=30))
    sensor = StartWindowSensor(
        task_id="w",
        opens=_hhmm(timedelta(hours=-1), kolkata),
        closes=_hhmm(timedelta(hours=1), kolkata),
        tz="Asia/Kolkata",
        deferrable=True,
        dag=_dag(),
    )
    answer = sensor.execute_complete(_window_context(datetime.now(UTC)), {"status": "success"})
    start, end = datetime.fromisoformat(answer["window_start"]), datetime.fromisoformat(answer["window_end"])
    assert start.utcoffset() == timedelta(hours=5, minutes=30) and start <= datetime.now(UTC) < end


def test_resumed_after_its_window_closed_the_sensor_fails_with_the_window_when_told_to() -> None:
    now = datetime.now(UTC)
    sensor = StartWindowSensor(
        task_id="w",
        opens=(now - timedelta(hours=2)).isoformat(),
        closes=(now - timedelta(seconds=1)).isoformat(),
        on_missed="fail",
        deferrable=True,
        dag=_dag(),
    )
    with pytest.raises(
        AirflowFailException, match=r"task 'w': start window .* was missed .*on_missed='fail'"
    ):
        sensor.execute_complete(_window_context(now))


def test_poking_before_the_window_opens_is_not_done() -> None:
    now = datetime.now(UTC)
    sensor = StartWindowSensor(
        task_id="w",
        opens=(now + timedelta(hours=1)).isoformat(),
        closes=(now + timedelta(hours=2)).isoformat(),
        deferrable=False,
        dag=_dag(),
    )
    answer = sensor.poke(_window_context(now))
    assert answer.is_done is False and answer.xcom_value is None


def test_a_template_that_renders_to_no_time_fails_at_run_time_naming_the_task_and_the_fix() -> None:
    sensor = StartWindowSensor(
        task_id="w", opens="{{ params.opens }}", closes="06:00", deferrable=True, dag=_dag()
    )
    sensor.opens = "late evening"  # what the template rendered to
    with pytest.raises(ValueError, match=r"task 'w': opens='late evening' is not a time of day; use 'HH:MM'"):
        sensor.execute(_window_context(datetime.now(UTC)))


def test_guard_without_a_dag_run_takes_the_window_around_now() -> None:
    guard = WindowGuard(opens=_hhmm(timedelta(hours=-1)), closes=_hhmm(timedelta(hours=1)), on_missed="fail")
    guard({"task": SimpleNamespace(task_id="train"), "ti": None})  # open: starts


def test_guard_runs_the_previous_hook_first_even_when_resuming() -> None:
    calls: list[str] = []
    guard = _guard("fail", previous=lambda context: calls.append("previous"))
    guard(_context(datetime.now(UTC) - timedelta(hours=4), resumed=True))
    assert calls == ["previous"]
    failing = _guard("fail", previous=lambda context: (_ for _ in ()).throw(RuntimeError("hook")))
    with pytest.raises(RuntimeError, match="hook"):  # its own error, before any window check
        failing(_context(datetime.now(UTC) - timedelta(hours=4)))


def test_guard_refuses_a_template_that_renders_to_no_time_naming_the_task() -> None:
    guard = WindowGuard(opens="{{ params.opens }}", closes="06:00")
    task_obj = SimpleNamespace(task_id="train", render_template=lambda value, context: "teatime")
    with pytest.raises(ValueError, match=r"^task 'train': opens='teatime' is not a time of day"):
        guard(_context(datetime.now(UTC), task_obj=task_obj))
