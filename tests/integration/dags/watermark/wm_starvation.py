"""apache/airflow#29474 in miniature: a 4-slot high-priority task behind a stream of 1-slot tasks.

Pool ``gpu`` has 4 slots. Three chains of 1-slot, priority-1 sleep tasks with staggered durations
keep 3 slots busy; ``wide`` (4 slots, priority 100) becomes ready once ``prep`` (default_pool)
is done. Stock Airflow lets the chains take every freed slot, so ``wide`` waits for the whole stream.
Built twice (``DAGS``): ``wm_starvation`` in pool ``gpu``, which tests/integration/test_reservation_real.py
has the watermark controller manage, and ``wm_starvation_stock`` in pool ``gpu_stock`` (4 slots, no
controller: stock Airflow), so that the two runs can go at the same time.
"""

from __future__ import annotations

import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import gpu_hints

CHAIN_SECONDS = (4, 5, 7)
CHAIN_LENGTH = 4
#: DAG id -> its GPU pool
DAGS = {"wm_starvation": "gpu", "wm_starvation_stock": "gpu_stock"}


def build(dag_id: str, pool: str) -> DAG:
    with DAG(
        dag_id,
        schedule=None,
        start_date=datetime.datetime(2026, 1, 1),
        catchup=False,
        max_active_tasks=16,
        default_args={"weight_rule": "absolute", "retries": 0},
    ) as dag:
        # 6 s: the controller's lookahead must tick (every 2 s) while prep runs, however slow the ticks
        prep = BashOperator(task_id="prep", bash_command="sleep 6", pool="default_pool", priority_weight=1)
        wide = BashOperator(
            task_id="wide",
            bash_command="sleep 3",
            pool=pool,
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
                    pool=pool,
                    pool_slots=1,
                    priority_weight=1,
                    executor_config=gpu_hints(duration=seconds, gpus=1),
                )
                if previous is not None:
                    previous >> small
                previous = small
    return dag


for _dag_id, _pool in DAGS.items():
    globals()[_dag_id] = build(_dag_id, _pool)
