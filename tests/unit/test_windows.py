"""Start windows hold for the task, not only its sensor; the plan starts windowed tasks when they open."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_gpu_dag.airflow.dag_reader import build_task_graph, plan_dag
from airflow_gpu_dag.authoring import start_window
from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.windows import (
    FixedWindow,
    TimeWindow,
    parse_window,
    seconds_until_open,
    window_from_hint,
)
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from airflow_gpu_dag.sensors.window import WindowGuard


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


# -- critical path with release times -----------------------------------------------------------------
def test_critical_path_respects_not_before() -> None:
    graph = TaskGraph.from_edges("w", {"prep": 600, "train": 3600, "side": 1800}, [("prep", "train")])
    graph.nodes["train"].not_before = 7200  # its window opens 2 h after the run started
    result = analyze(graph)
    train, prep = result.timings["train"], result.timings["prep"]
    assert train.earliest_start == 7200 and train.earliest_finish == 10800
    assert result.makespan == 10800
    assert train.critical and not prep.critical
    assert prep.slack == 7200 - 600  # prep may start as late as the window needs it
    assert result.critical_path == ["train"]  # starts at its window, not after prep
    assert train.remaining == 3600  # priority weights do not move with the window
    graph.nodes["train"].not_before = 0
    assert analyze(graph).critical_path == ["prep", "train"]


def test_plan_of_a_dag_with_a_start_window() -> None:
    with DAG("pw", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep", executor_config={"gpu_dag": {"duration_s": 600}})
        train = GpuBashOperator(task_id="train", bash_command="true", gpus=1, duration="1h")
        prep >> train
        start_window(train, opens="22:00", closes="06:00")
    graph, _ = build_task_graph(dag, run_start=_at(9))
    assert graph.nodes["train"].not_before == 13 * 3600
    assert graph.nodes["train__window"].not_before == 13 * 3600
    plan = plan_dag(dag, run_start=_at(9))
    assert plan.task("train").earliest_start == 13 * 3600
    assert plan.makespan == 14 * 3600
    assert plan.task("train").not_before == 13 * 3600
    assert "start window opens at +13h00m" in plan.task("train").note
    inside = plan_dag(dag, run_start=_at(23))
    assert inside.task("train").earliest_start == 600  # inside the window: right after prep


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


def test_start_window_installs_the_guard_on_gpu_tasks() -> None:
    with DAG("gw", schedule=None) as dag:

        @task.gpu(gpus=1, duration="30m")
        def fit() -> None:
            pass

        fitted = fit()
        bash = GpuBashOperator(task_id="bash_fit", bash_command="true", gpus=1)
        start_window(fitted, opens="22:00", closes="06:00", on_missed="fail")
        start_window(bash, opens="{{ dag_run.conf['o'] }}", closes="06:00")
    fit_task = dag.get_task("fit")
    assert isinstance(fit_task._pre_execute_hook, WindowGuard)
    assert fit_task._pre_execute_hook.on_missed == "fail"
    assert read_hints(fit_task.executor_config)["window"] == {
        "opens": "22:00:00",
        "closes": "06:00:00",
        "tz": "UTC",
        "on_missed": "fail",
    }
    assert read_hints(dag.get_task("bash_fit").executor_config)["window"] == {
        "templated": True,
        "on_missed": "skip",
    }
    assert fit_task.upstream_task_ids == {"fit__window"}


def test_bad_window_names_dag_task_and_fix() -> None:
    with DAG("bad_window", schedule=None):
        train = EmptyOperator(task_id="train")
        with pytest.raises(
            ValueError, match=r"DAG 'bad_window', task 'train': impossible start window.*Fix: swap"
        ):
            start_window(train, opens="2026-11-11T06:00+00:00", closes="2026-11-10T22:00+00:00")


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


def test_the_window_is_chosen_from_when_the_run_is_due_not_its_logical_date() -> None:
    """A data-interval timetable (CronDataIntervalTimetable, DeltaDataIntervalTimetable) creates the
    run for [D-1, D) at D with logical_date D-1. Before, the window was chosen from the logical date:
    the one of the day before, long closed, and the run was skipped although it was due inside its
    window; the task's own check (WindowGuard) did the same."""
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
