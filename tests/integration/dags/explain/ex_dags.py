"""Two teams on one 4-GPU pool (``gpu_ex``), for ``airflow gpu-dag explain`` against the real scheduler.

* ``ex_train``: ``hold`` (3 GPUs, 20 s) starts at once; ``prep`` (CPU, 2 s) then makes the 4-GPU ``wide``
  ready while it runs, so the watermark controller holds the pool's slots for ``wide`` until it ends.
  ``post`` after ``wide`` is a long CPU tail (its estimate: 10 minutes), which gives ``wide`` an early
  cross-DAG key: the pipeline is more urgent than a fresh evaluation.
* ``ex_small``: one 1-GPU evaluation of 20 s, triggered while the reservation holds: too long to be
  let through as backfill (the slots free in less), so it waits for ``wide``.

Estimates are the sleeps plus one second (a task process's start and finish).
"""

from __future__ import annotations

import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

POOL = "gpu_ex"
START = datetime.datetime(2026, 1, 1)
ARGS = {"weight_rule": CRITICAL_PATH_WEIGHT_RULE, "retries": 0}


def gpu_task(task_id: str, seconds: int, gpus: int) -> BashOperator:
    return BashOperator(
        task_id=task_id,
        bash_command=f"sleep {seconds}",
        pool=POOL,
        pool_slots=gpus,
        executor_config=gpu_hints(duration=seconds + 1, gpus=gpus),
    )


with DAG("ex_train", schedule=None, start_date=START, catchup=False, default_args=ARGS, max_active_tasks=16):
    gpu_task("hold", 20, 3)
    prep = BashOperator(
        task_id="prep", bash_command="sleep 2", pool="default_pool", executor_config=gpu_hints(duration=3)
    )
    post = BashOperator(
        task_id="post", bash_command="sleep 1", pool="default_pool", executor_config=gpu_hints(duration=600)
    )
    prep >> gpu_task("wide", 6, 4) >> post

with DAG("ex_small", schedule=None, start_date=START, catchup=False, default_args=ARGS):
    gpu_task("evaluate", 20, 1)
