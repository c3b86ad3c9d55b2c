"""The run the live view's real-browser test watches (tests/integration/test_ui_real.py): a 2-GPU pool
``gpu_live`` that the wide ``train`` fills while the 1-GPU ``sweep`` waits for it.

train (2 GPUs, 60 s) -> evaluate (1 GPU, 3 s);  sweep (1 GPU, 5 s), no upstream.

``train`` leads the critical path, so it has the higher weight and takes both slots first; ``sweep``
stays *scheduled* (waiting for slots) for the whole minute, long enough for a browser to load the view
on a loaded CI machine, and ``evaluate`` waits for ``train`` (not ready yet). Estimates are the sleeps
plus one second (a task process's start and finish).

Its own folder (a second DAG bundle of the test's cluster, ``AIRFLOW_ENV`` there): the CLI tests lint
and plan ``tests/integration/dags/ui`` and expect its one DAG.
"""

from __future__ import annotations

import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

POOL = "gpu_live"


def gpu_task(task_id: str, seconds: int, gpus: int) -> BashOperator:
    return BashOperator(
        task_id=task_id,
        bash_command=f"sleep {seconds}",
        pool=POOL,
        pool_slots=gpus,
        executor_config=gpu_hints(duration=seconds + 1, gpus=gpus),
    )


with DAG(
    "gpu_live_run",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE, "retries": 0},
):
    gpu_task("train", 60, 2) >> gpu_task("evaluate", 3, 1)
    gpu_task("sweep", 5, 1)
