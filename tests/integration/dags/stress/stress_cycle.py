"""A cyclic GPU DAG submitted alongside the stress DAGs: it must be rejected at parse time (an
import error naming the cycle) while the other DAGs in the folder keep running."""

from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag import gpu_hints

with DAG("stress_cycle", schedule=None, catchup=False, tags=["stress"]):
    load = EmptyOperator(task_id="load", executor_config=gpu_hints(duration="10m"))
    train = EmptyOperator(
        task_id="train", pool="stress_gpu", executor_config=gpu_hints(duration="1h", gpus=1)
    )
    evaluate = EmptyOperator(task_id="evaluate", executor_config=gpu_hints(duration="10m"))
    load >> train >> evaluate >> load
