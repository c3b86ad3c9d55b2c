"""Several teams' DAGs on one 4-GPU pool (pool ``gpu_multi``), durations in seconds, cross-DAG keys.

* ``md_pipeline``: ``prep`` (1 GPU, 4 s) -> ``wide`` (4 GPUs, 6 s): a wide task the controller reserves for.
* ``md_stream_<k>``: one 1-GPU evaluation of 8 s each, triggered one after the other: a stream that
  keeps the pool busy (stock Airflow would starve ``wide`` behind it, apache/airflow#29474).
* ``md_probe``: a 2-s 1-GPU evaluation triggered while the reservation for ``wide`` is pending.
"""

from __future__ import annotations

import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

POOL = "gpu_multi"
START = datetime.datetime(2026, 1, 1)
#: One retry, 2 s later: a task whose process cannot reach an overloaded api-server's Execution API (a
#: loaded CI machine) fails its try, which says nothing about the order or the bounds checked here. The
#: checks read each task's last try (its start, end and ``scheduled_when``).
ARGS = {"weight_rule": CRITICAL_PATH_WEIGHT_RULE, "retries": 1, "retry_delay": datetime.timedelta(seconds=2)}
STREAM = 8


def gpu_task(task_id: str, seconds: int, gpus: int) -> BashOperator:
    return BashOperator(
        task_id=task_id,
        bash_command=f"sleep {seconds}",
        pool=POOL,
        pool_slots=gpus,
        executor_config=gpu_hints(duration=seconds, gpus=gpus),
    )


with DAG("md_pipeline", schedule=None, start_date=START, catchup=False, default_args=ARGS, tags=["multi"]):
    gpu_task("prep", 4, 1) >> gpu_task("wide", 6, 4)

for k in range(STREAM):
    with DAG(
        f"md_stream_{k}", schedule=None, start_date=START, catchup=False, default_args=ARGS, tags=["multi"]
    ):
        gpu_task("evaluate", 8, 1)

with DAG("md_probe", schedule=None, start_date=START, catchup=False, default_args=ARGS, tags=["multi"]):
    gpu_task("evaluate", 2, 1)
