"""Stress DAG: GPU tasks of different widths competing for one GPU pool.

Each run is ``train`` (2 GPUs, estimated 1 h) -> ``evaluate`` (1 GPU, 20 min), with critical-path
priority (timed by the stress plugin): ``train`` weighs 4800, ``evaluate`` 1200. The test triggers
100 runs at once; the pool is far smaller than the demand, so the scheduler must queue, order and
never oversubscribe it.
"""

from __future__ import annotations

import os
import time

from airflow.sdk import DAG, task

from airflow_gpu_dag import gpu_hints

POOL = "stress_gpu"
WEIGHT_RULE = "stress_timed_priority.TimedCriticalPathPriorityStrategy"
SLEEP_S = float(os.environ.get("GPU_DAG_STRESS_SLEEP_S", "1.0"))

with DAG(
    "stress_gpu",
    schedule=None,
    catchup=False,
    max_active_runs=200,
    max_active_tasks=64,
    default_args={"weight_rule": WEIGHT_RULE, "retries": 0},
    tags=["stress"],
):

    @task(pool=POOL, pool_slots=2, executor_config=gpu_hints(duration="1h", gpus=2, gpu_memory="40GiB"))
    def train() -> str:
        time.sleep(SLEEP_S)
        return "ckpt"

    @task(pool=POOL, pool_slots=1, executor_config=gpu_hints(duration="20m", gpus=1, gpu_memory="20GiB"))
    def evaluate(checkpoint: str) -> None:
        time.sleep(SLEEP_S)

    evaluate(train())  # type: ignore[arg-type]  # TaskFlow passes the XComArg's value
