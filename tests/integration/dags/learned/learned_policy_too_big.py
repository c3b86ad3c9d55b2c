"""Rejected at parse time (tests/integration/test_learned_real.py): no [gpu_dag] pools are set, but the
static inventory (5 x A100) says no host has 8 GPUs."""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import gpu_hints

with DAG("learned_policy_too_big", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    BashOperator(
        task_id="pretrain_8_gpus",
        bash_command="true",
        pool="gpu_default",
        pool_slots=8,
        executor_config=gpu_hints(duration="1h", gpus=8),
    )
