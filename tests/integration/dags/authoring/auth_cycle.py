"""A cyclic GPU DAG: Airflow rejects it at import with its own message (one task named); the test
checks that and that ``airflow gpu-dag lint`` names the whole cycle."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("auth_cycle", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    prepare = GpuBashOperator(task_id="prepare", bash_command="true", duration="10m")
    train = GpuBashOperator(task_id="train", bash_command="true", duration="1h")
    evaluate = GpuBashOperator(task_id="evaluate", bash_command="true", duration="10m")
    prepare >> train >> evaluate >> prepare
