"""DAGs only planned (never triggered): the critical-path API shows fallback rungs with their expected
durations and the assumed rung, and a task behind a start window starting when the window opens."""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import Rung, fallback_ladder, start_window
from airflow_gpu_dag.operators.gpu import GpuBashOperator

START = pendulum.datetime(2026, 1, 1)

with DAG("auth_ladder", schedule=None, start_date=START, catchup=False):
    fallback_ladder(
        "train",
        [
            Rung("big", gpus=4, start_within="20m", duration="2h"),
            Rung("small", gpus=2, start_within="20m", duration="3h30m"),
        ],
        lambda rung: BashOperator(task_id=rung.name, bash_command="true"),
        plan_rung="small",
    )

with DAG("auth_future_window", schedule=None, start_date=START, catchup=False):
    night = GpuBashOperator(task_id="night", gpus=1, duration="1h", bash_command="true")
    start_window(night, opens="2099-01-01T00:00+00:00", closes="2099-01-01T06:00+00:00")
