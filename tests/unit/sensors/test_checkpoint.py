"""Tests of ``airflow_gpu_dag.sensors.checkpoint``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_gpu_dag.sensors import CheckpointSensor
from tests.unit.sensors.conftest import checkpoint_sensor, sensor_context

# -- the sensor ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("_deferring")
def test_the_trigger_event_fails_the_sensor_with_the_fix(ckpt_dir: str) -> None:
    event = {"status": "training_over", "state": "success", "path": ckpt_dir, "reason": "no checkpoint"}
    with pytest.raises(AirflowFailException, match=r"training task 'train' ended success without"):
        checkpoint_sensor(ckpt_dir).execute_complete(sensor_context(), event)


@pytest.mark.usefixtures("_deferring")
def test_an_unknown_training_task_is_named(ckpt_dir: str) -> None:
    with DAG("d2", schedule=None):
        sensor = CheckpointSensor(
            task_id="wait", checkpoint_dir=ckpt_dir, step=1, timeout=60, training_task_id="trian"
        )
    with pytest.raises(AirflowFailException, match=r"training_task_id='trian' is not a task of DAG 'd2'"):
        sensor.execute(sensor_context())


@pytest.mark.usefixtures("_deferring")
def test_soft_fail_skips_a_failure_found_by_the_first_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # A permanent error skips a soft_fail sensor wherever it is met: in the first check in execute()
    # (before deferring or poking) just as in a poke or the trigger.
    from airflow.sdk.exceptions import AirflowSkipException

    import airflow_gpu_dag.sensors.checkpoint as sensor_checkpoint
    from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor

    missing = "nosuchscheme-audit2://bucket/ds"  # no filesystem for it: a permanent error
    for deferrable in (True, False):
        for flag in ("soft_fail", "never_fail"):
            sensor = DatasetCompleteSensor(
                task_id="wait", path=missing, timeout=60, deferrable=deferrable, **{flag: True}
            )
            with pytest.raises(AirflowSkipException):
                sensor.execute({})
            ckpt = CheckpointSensor(
                task_id="wait_ckpt",
                checkpoint_dir=missing,
                step=1,
                timeout=60,
                deferrable=deferrable,
                **{flag: True},
            )
            with pytest.raises(AirflowSkipException):
                ckpt.execute({})

    class TI:
        dag_id, run_id = "d", "r"

    monkeypatch.setattr(sensor_checkpoint, "ended_training_state", lambda *a: "failed")
    over = CheckpointSensor(
        task_id="wait_ckpt",
        checkpoint_dir="memory://audit2-none/ckpt",
        step=1,
        timeout=timedelta(minutes=1),
        training_task_id="train",
        soft_fail=True,
    )
    with pytest.raises(AirflowSkipException):
        over.execute({"ti": TI()})
