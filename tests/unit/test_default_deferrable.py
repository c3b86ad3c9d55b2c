"""The provider's sensors and gates follow ``[operators] default_deferrable`` as Airflow's own deferrable
operators do, instead of always deferring: a deployment without a triggerer (the default is False)
must not leave a data edge, a checkpoint wait, a start window or a budget gate deferred for ever. An
author's ``deferrable=`` (or ``default_args={"deferrable": ...}``) still wins."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowRescheduleException, AirflowSkipException, TaskDeferred

from airflow_gpu_dag.authoring import budget_gate, data_edge, stage_dependency, start_window
from airflow_gpu_dag.operators import GpuBashOperator
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor, StartWindowSensor

ENV = "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"


def _dag(**default_args: Any) -> DAG:
    return DAG("d", schedule=None, start_date=dt.datetime(2026, 1, 1), default_args=default_args)


def _pair(dag: DAG) -> tuple[Any, Any]:
    with dag:
        train = GpuBashOperator(task_id="train", bash_command="true", gpus=1, duration="1h")
        evaluate = GpuBashOperator(task_id="evaluate", bash_command="true", gpus=1, duration="10m")
    return train, evaluate


#: Each way an author gets a sensor or a gate, built in a fresh DAG, with ``deferrable`` if given.
BUILDERS: dict[str, Callable[..., Any]] = {
    "DatasetCompleteSensor": lambda dag, **kw: DatasetCompleteSensor(
        task_id="s", path="/lake/x", timeout=60, dag=dag, **kw
    ),
    "CheckpointSensor": lambda dag, **kw: CheckpointSensor(
        task_id="s", checkpoint_dir="/ckpt", step=1, timeout=60, dag=dag, **kw
    ),
    "StartWindowSensor": lambda dag, **kw: StartWindowSensor(
        task_id="s", opens="01:00", closes="02:00", dag=dag, **kw
    ),
    "BudgetGateOperator": lambda dag, **kw: BudgetGateOperator(
        task_id="s", gpu_hours_per_run=10, dag=dag, **kw
    ),
    "data_edge": lambda dag, **kw: data_edge(*_pair(dag), path="/lake/x", timeout=60, **kw),
    "stage_dependency": lambda dag, **kw: stage_dependency(
        *_pair(dag), checkpoint_dir="/ckpt", step=1, timeout=60, **kw
    ),
    "start_window": lambda dag, **kw: start_window(_pair(dag)[1], opens="01:00", closes="02:00", **kw),
    "budget_gate": lambda dag, **kw: budget_gate(_pair(dag)[1], gpu_hours_per_run=10, **kw),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_default_follows_default_deferrable(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)  # Airflow's default: False (no triggerer needed)
    assert BUILDERS[name](_dag()).deferrable is False
    monkeypatch.setenv(ENV, "True")
    assert BUILDERS[name](_dag()).deferrable is True


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_author_still_chooses(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "False")
    assert BUILDERS[name](_dag(), deferrable=True).deferrable is True
    assert BUILDERS[name](_dag(deferrable=True)).deferrable is True  # through default_args
    monkeypatch.setenv(ENV, "True")
    assert BUILDERS[name](_dag(), deferrable=False).deferrable is False
    assert BUILDERS[name](_dag(deferrable=False)).deferrable is False


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
