"""A start window that holds for the GPU task, not only for its sensor.

``blocker`` holds the only slot of pool ``window_gpu`` until 3 s after the window closes. The window
sensors run while the window is open (they start once the blocker is running) and succeed; the two
gated GPU tasks then wait for the pool slot and could only start after the window closed: their own
check (the ``start_window`` guard) skips one (``on_missed="skip"``) and fails the other
(``on_missed="fail"``) before any GPU is leased. Window times come from the run's conf.
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import start_window
from airflow_gpu_dag.operators.gpu import GpuBashOperator

BASE = os.environ.get("GPU_DAG_AUTH_BASE", "/tmp/gpu_dag_auth")
MARK = BASE + "/{{ run_id }}.blocker"

with DAG(
    "auth_window", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False, tags=["authoring"]
):
    blocker = GpuBashOperator(
        task_id="blocker",
        gpus=1,
        pool="window_gpu",
        duration="10m",
        priority_weight=100,
        bash_command=(
            f"touch {MARK}; now=$(date +%s); sleep $(( {{{{ dag_run.conf['closes_epoch'] }}}} - now + 3 ))"
        ),
    )
    started = BashOperator(
        task_id="blocker_started",
        bash_command=f"for i in $(seq 1 600); do [ -f {MARK} ] && exit 0; sleep 0.5; done; exit 1",
    )
    for name, policy in (("late_skip", "skip"), ("late_fail", "fail")):
        late = GpuBashOperator(
            task_id=name,
            gpus=1,
            pool="window_gpu",
            duration="10m",
            bash_command=f"touch {BASE}/{{{{ run_id }}}}.{name}.ran",
        )
        started >> late
        start_window(
            late, opens="{{ dag_run.conf['opens'] }}", closes="{{ dag_run.conf['closes'] }}", on_missed=policy
        )
