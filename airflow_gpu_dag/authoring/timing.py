"""Time edges: start windows and stage dependencies.

    start_window(train, opens="22:00", closes="06:00", on_missed="skip")
    stage_dependency(train, evaluate, checkpoint_dir="/ckpt/{{ run_id }}", step=1000,
                     pattern="step-{step}", timeout=timedelta(hours=8))

``start_window`` inserts ``<task>__window`` (a :class:`~airflow_gpu_dag.sensors.StartWindowSensor`)
before the task, edge label ``time``. ``stage_dependency`` does *not* add ``train >> evaluate``:
it adds ``wait_<train>_ckpt_<N>`` (a :class:`~airflow_gpu_dag.sensors.CheckpointSensor`) that starts
alongside ``train`` (same upstream tasks) and lets ``evaluate`` start as soon as checkpoint N is
complete while training goes on.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_gpu_dag.authoring._wiring import insert_before, labelled, require_dag
from airflow_gpu_dag.sensors._common import RESUME_RACE_RETRIES, RESUME_RACE_RETRY_DELAY
from airflow_gpu_dag.sensors.checkpoint import CheckpointSensor
from airflow_gpu_dag.sensors.window import StartWindowSensor

__all__ = ["TIME", "stage_dependency", "start_window"]

#: Edge label of time edges.
TIME = "time"


def start_window(
    task: Any,
    *,
    opens: str,
    closes: str,
    tz: str = "UTC",
    on_missed: str = "skip",
    task_id: str | None = None,
) -> StartWindowSensor:
    """Gate ``task`` on a daily start window; see :class:`~airflow_gpu_dag.sensors.StartWindowSensor`.

    :raises ValueError: impossible window (opens == closes), malformed time, unknown policy; the
        message names the task.
    """
    dag = require_dag(task, "start_window")
    sensor = StartWindowSensor(
        task_id=task_id or f"{task.task_id}__window",
        opens=opens,
        closes=closes,
        tz=tz,
        on_missed=on_missed,
        dag=dag,
        retries=RESUME_RACE_RETRIES,
        retry_delay=RESUME_RACE_RETRY_DELAY,
    )
    insert_before(task, sensor, label=TIME)
    return sensor


def stage_dependency(
    upstream: Any,
    downstream: Any,
    *,
    checkpoint_dir: Any,
    step: int,
    timeout: float | timedelta | None = None,
    pattern: str = "checkpoint-{step}",
    completeness: object = "marker",
    poke_interval: float = 10.0,
    conn_id: str | None = None,
    task_id: str | None = None,
) -> CheckpointSensor:
    """``downstream`` starts once ``upstream`` wrote checkpoint ``step`` (upstream keeps running)."""
    dag = require_dag(upstream, "stage_dependency")
    if downstream.task_id in upstream.downstream_task_ids:
        raise ValueError(
            f"task {downstream.task_id!r} already waits for {upstream.task_id!r} to finish; remove "
            f"{upstream.task_id} >> {downstream.task_id} to start it at checkpoint {step} instead."
        )
    sensor = CheckpointSensor(
        task_id=task_id or f"wait_{upstream.task_id}_ckpt_{step}",
        checkpoint_dir=checkpoint_dir,
        step=step,
        pattern=pattern,
        completeness=completeness,
        timeout=timeout,
        poke_interval=poke_interval,
        conn_id=conn_id,
        dag=dag,
        retries=RESUME_RACE_RETRIES,
        retry_delay=RESUME_RACE_RETRY_DELAY,
    )
    sensor.doc_md = (
        f"Stage dependency: {downstream.task_id} starts at checkpoint {step} of {upstream.task_id}."
    )
    for up_id in sorted(upstream.upstream_task_ids):
        dag.get_task(up_id) >> sensor
    labelled(sensor, downstream, TIME)
    return sensor
