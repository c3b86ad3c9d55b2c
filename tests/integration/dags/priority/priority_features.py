"""Critical-path weights on the Airflow features that change the task graph: a setup/teardown pair,
a task group and a mapped task (``.expand``; the weight rule is the class-path string from
``default_args``), in a 1-slot pool of its own. Used by tests/integration/test_priority_real_scheduler.py.

    setup_env (5m) -> prep.load (20m) -> prep.clean (10m) -> train[0..2] (1h) -> evaluate (15m)
        -> teardown_env (5m, teardown of setup_env)

remaining critical path (s): setup_env=6900 prep.load=6600 prep.clean=5400 train=4800
evaluate=1200 teardown_env=300
"""

from __future__ import annotations

import time

from airflow.sdk import DAG, TaskGroup, task

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints


@task
def step() -> None:
    time.sleep(1)


@task
def train(lr: float) -> float:
    time.sleep(1)
    return lr


with DAG(
    "cp_features",
    schedule=None,
    catchup=False,
    default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE, "retries": 0, "pool": "one_slot_features"},
    tags=["priority"],
) as cp_features:
    setup_env = step.override(task_id="setup_env", executor_config=gpu_hints(duration="5m"))().as_setup()
    with TaskGroup("prep") as prep:
        load = step.override(task_id="load", executor_config=gpu_hints(duration="20m"))()
        clean = step.override(task_id="clean", executor_config=gpu_hints(duration="10m"))()
        load >> clean
    trained = train.override(executor_config=gpu_hints(duration="1h")).expand(lr=[0.1, 0.01, 0.001])
    evaluate = step.override(task_id="evaluate", executor_config=gpu_hints(duration="15m"))()
    teardown_env = step.override(task_id="teardown_env", executor_config=gpu_hints(duration="5m"))()
    setup_env >> prep >> trained >> evaluate >> teardown_env
    teardown_env.as_teardown(setups=setup_env)
