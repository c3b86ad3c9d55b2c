"""Three tasks each reading what the next one writes: repairing them would close a -> b -> c -> a.
``fix_hidden_dependencies`` refuses, and the refusal is the DAG file's import error."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import fix_hidden_dependencies
from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("auth_hidden_cycle", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False) as dag:
    GpuBashOperator(task_id="a", bash_command="true", outputs=["/lake/p"], inputs=["/lake/r"])
    GpuBashOperator(task_id="b", bash_command="true", outputs=["/lake/q"], inputs=["/lake/p"])
    GpuBashOperator(task_id="c", bash_command="true", outputs=["/lake/r"], inputs=["/lake/q"])
fix_hidden_dependencies(dag, mode="edge")
