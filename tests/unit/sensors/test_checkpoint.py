"""Tests of ``airflow_gpu_dag.sensors.checkpoint``."""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_gpu_dag.sensors import CheckpointSensor


@pytest.fixture
def ckpt_dir() -> str:
    return f"memory://ckpt-{uuid.uuid4().hex[:8]}/run"


# -- the sensor ---------------------------------------------------------------------------------------
def _context() -> dict[str, Any]:
    return {"ti": SimpleNamespace(dag_id="d", run_id="r1")}


def _sensor(directory: str, **kwargs: Any) -> CheckpointSensor:
    with DAG("d", schedule=None):
        EmptyOperator(task_id="train")
        return CheckpointSensor(
            task_id="wait_train_ckpt_2",
            checkpoint_dir=directory,
            step=2,
            timeout=3600,
            training_task_id="train",
            **kwargs,
        )


@pytest.mark.usefixtures("_deferring")
def test_the_trigger_event_fails_the_sensor_with_the_fix(ckpt_dir: str) -> None:
    event = {"status": "training_over", "state": "success", "path": ckpt_dir, "reason": "no checkpoint"}
    with pytest.raises(AirflowFailException, match=r"training task 'train' ended success without"):
        _sensor(ckpt_dir).execute_complete(_context(), event)


@pytest.mark.usefixtures("_deferring")
def test_an_unknown_training_task_is_named(ckpt_dir: str) -> None:
    with DAG("d2", schedule=None):
        sensor = CheckpointSensor(
            task_id="wait", checkpoint_dir=ckpt_dir, step=1, timeout=60, training_task_id="trian"
        )
    with pytest.raises(AirflowFailException, match=r"training_task_id='trian' is not a task of DAG 'd2'"):
        sensor.execute(_context())


@pytest.mark.usefixtures("_deferring")
def test_soft_fail_skips_a_failure_found_by_the_first_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the same permanent error skipped a soft_fail sensor when a poke or the trigger met it, but
    # failed it when the first check in execute() met it (before deferring or poking).
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
