"""apache/airflow#29474 in miniature: a 4-slot high-priority task behind a stream of 1-slot tasks.

Pool ``gpu`` has 4 slots. Three chains of 1-slot, priority-1 sleep tasks with staggered durations
keep 3 slots busy; ``wide`` (4 slots, priority 100) becomes ready once ``prep`` (default_pool)
is done. Stock Airflow lets the chains take every freed slot, so ``wide`` waits for the whole stream.
"""

from __future__ import annotations

import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import gpu_hints

CHAIN_SECONDS = (4, 5, 7)
CHAIN_LENGTH = 4

with DAG(
    "wm_starvation",
    schedule=None,
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_tasks=16,
    default_args={"weight_rule": "absolute", "retries": 0},
):
    # 6 s: the controller's lookahead must tick (every 2 s) while prep runs, however slow the ticks
    prep = BashOperator(task_id="prep", bash_command="sleep 6", pool="default_pool", priority_weight=1)
    wide = BashOperator(
        task_id="wide",
        bash_command="sleep 3",
        pool="gpu",
        pool_slots=4,
        priority_weight=100,
        executor_config=gpu_hints(duration=3, gpus=4),
    )
    prep >> wide
    for chain, seconds in enumerate(CHAIN_SECONDS):
        previous = None
        for step in range(CHAIN_LENGTH):
            small = BashOperator(
                task_id=f"small_{chain}_{step}",
                bash_command=f"sleep {seconds}",
                pool="gpu",
                pool_slots=1,
                priority_weight=1,
                executor_config=gpu_hints(duration=seconds, gpus=1),
            )
            if previous is not None:
                previous >> small
            previous = small
