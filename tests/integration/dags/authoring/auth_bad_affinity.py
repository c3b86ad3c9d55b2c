"""An affinity to a queue that ``[gpu_dag] queues`` does not declare: a parse-time import error."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import pin_to_queue
from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("auth_bad_affinity", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    pin_to_queue(GpuBashOperator(task_id="lost", gpus=1, bash_command="true"), "host-zz")
