"""A reservation that holds pool ``gpu_fo`` (capacity 2) at 0, for the fail-open test.

``hold`` (1 slot) takes the pool's only slot (the test sizes the pool 1 before the run) until the file
named by the run's conf ``release`` exists (at most 15 min; 120 s when the conf names none); once
``gate`` is done, ``wide`` (2 slots, priority 100) and three 1-slot tasks wait. A controller with
``backfill: false`` then holds the pool at ``C - w = 0`` for ``wide`` until ``hold`` ends; the test
kills it there and the scheduler's watchdog must open the pool again. The test releases ``hold`` when
it has seen all that, however long the controller and the CLI took to start on a loaded machine.
"""

from __future__ import annotations

import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import gpu_hints

with DAG(
    "wm_failopen",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_tasks=16,
    default_args={"weight_rule": "absolute", "retries": 0},
):
    hold = BashOperator(
        task_id="hold",
        bash_command=(
            "n={{ 900 if dag_run.conf.get('release') else 120 }}; "
            "for i in $(seq 1 $n); do [ -f \"{{ dag_run.conf.get('release', '') }}\" ] && exit 0; "
            "sleep 1; done"
        ),
        pool="gpu_fo",
        pool_slots=1,
        priority_weight=50,
        executor_config=gpu_hints(duration=120, gpus=1),
    )
    gate = BashOperator(task_id="gate", bash_command="sleep 1", pool="default_pool", priority_weight=1)
    wide = BashOperator(
        task_id="wide",
        bash_command="sleep 2",
        pool="gpu_fo",
        pool_slots=2,
        priority_weight=100,
        executor_config=gpu_hints(duration=2, gpus=2),
    )
    gate >> wide
    for i in range(3):
        gate >> BashOperator(
            task_id=f"small_{i}",
            bash_command="sleep 2",
            pool="gpu_fo",
            pool_slots=1,
            priority_weight=1,
            executor_config=gpu_hints(duration=2, gpus=1),
        )
