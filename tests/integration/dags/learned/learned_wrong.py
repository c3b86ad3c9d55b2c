"""Seconds-scale DAG whose declared estimates are wrong (tests/integration/test_learned_real.py).

* ``declared_long_runs_short`` declares 1 h and runs about 2 s;
* ``declared_short_runs_long`` declares 2 s and runs about 8 s;
* ``declared_right`` declares 3 s and runs about 3 s;
* ``shard`` is mapped over ``shards()``'s output (3 instances at run time, ``map_length=2`` declared)
  and runs about 3 s each.

After a few runs the learned durations follow the real ones: ``airflow gpu-dag estimates``, ``plan``,
the UI and the controller show them; the priority strategy can be checked to follow them too
(the critical path moves from ``declared_long_runs_short`` to ``declared_short_runs_long``).
"""

from __future__ import annotations

import time

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

#: task id -> (declared seconds, real seconds)
TASKS = {
    "declared_long_runs_short": (3600, 2),
    "declared_short_runs_long": (2, 8),
    "declared_right": (3, 3),
}
SHARD_SECONDS = 3
SHARDS = 3

with DAG(
    "learned_wrong",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE, "retries": 0},
):
    steps = {
        task_id: BashOperator(
            task_id=task_id, bash_command=f"sleep {real}", executor_config=gpu_hints(duration=declared)
        )
        for task_id, (declared, real) in TASKS.items()
    }

    @task(executor_config=gpu_hints(duration=1))
    def shards() -> list[int]:
        # a real duration: an instant task can end within the 0.1 s that counts as a zero-length try
        # (core.analysis.estimates.MIN_RUN_SECONDS) on an idle machine, and would learn nothing
        time.sleep(1)
        return list(range(SHARDS))

    @task(executor_config=gpu_hints(duration="30m", map_length=2))
    def shard(index: int) -> int:
        time.sleep(SHARD_SECONDS)
        return index

    listing = shards()
    listing >> [steps["declared_long_runs_short"], steps["declared_short_runs_long"]]
    steps["declared_short_runs_long"] >> steps["declared_right"]
    shard.expand(index=listing)
