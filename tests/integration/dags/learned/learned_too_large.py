"""A task that needs more slots than its pool will ever have (tests/integration/test_learned_real.py):
Airflow would leave it scheduled forever; the watermark controller fails it with a note."""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG(
    "learned_too_large",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 0},
):
    BashOperator(task_id="huge", bash_command="true", pool="gpu_small", pool_slots=8)
