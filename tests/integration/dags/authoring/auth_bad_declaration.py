"""GPU tasks declared wrongly (on a 4-GPU static inventory): an import error whose message lists each
problem of the first task with its code and whose traceback ends at that task's line; lint reports
every wrongly declared task of the file."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("auth_bad_declaration", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    GpuBashOperator(task_id="huge", bash_command="true", gpus=16, duration="forty")  # the first error
    GpuBashOperator(task_id="kind", bash_command="true", gpu_type="h999", duration="1h")
