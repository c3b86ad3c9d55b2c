"""Shared helpers of the sensor tests (the checkpoint sensor's are also used by the checkpoint trigger's
tests)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.sensors import CheckpointSensor


def sensor_context() -> dict[str, Any]:
    """The context of a task instance of DAG ``d``, run ``r1``."""
    return {"ti": SimpleNamespace(dag_id="d", run_id="r1")}


def checkpoint_sensor(directory: str, **kwargs: Any) -> CheckpointSensor:
    """In DAG ``d``: a sensor waiting (up to an hour) for step 2's checkpoint of task ``train`` in
    ``directory``."""
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
