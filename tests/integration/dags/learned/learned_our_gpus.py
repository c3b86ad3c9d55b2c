"""Our own GPU tasks keep running while the watermark controller sizes their pool
(tests/integration/test_learned_real.py): three 1-GPU tasks start at once and hold their GPUs for a
while; two more become ready while they run. On a 6-GPU host with one GPU used by someone else, the
pool must stay at 5 for all five to run together (a capacity source that counted our busy GPUs as
gone would shrink it to 2 and hold the last two back).

With ``barrier`` in the run's conf (a folder), each GPU task also waits, up to 5 min, until all five
have started before it holds its GPU: on a loaded machine the last two may start more than
``HOLD_SECONDS`` after the first three, and only a pool that shrank keeps them from ever meeting."""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag.operators.gpu import GpuBashOperator

HOLD_SECONDS = 30
FIRST, SECOND = 3, 2
HOLD = (
    'd=\'{{ dag_run.conf.get("barrier", "") }}\'; if [ -n "$d" ]; then '
    'mkdir -p "$d"; touch "$d/$AIRFLOW_CTX_TASK_ID"; '
    f'for i in $(seq 1 600); do [ $(ls "$d" | wc -l) -ge {FIRST + SECOND} ] && break; sleep 0.5; done; fi; '
    f"sleep {HOLD_SECONDS}"
)

with DAG(
    "learned_our_gpus",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    max_active_tasks=16,
    default_args={"retries": 0},
):
    gate = BashOperator(task_id="gate", bash_command="sleep 8", pool="default_pool")
    for i in range(FIRST):
        GpuBashOperator(task_id=f"first_{i}", gpus=1, duration=HOLD_SECONDS, bash_command=HOLD)
    for i in range(SECOND):
        gate >> GpuBashOperator(task_id=f"second_{i}", gpus=1, duration=HOLD_SECONDS, bash_command=HOLD)
