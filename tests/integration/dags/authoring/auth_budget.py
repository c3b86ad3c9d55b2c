"""Two budget gates racing for a cap only one task fits under, on the shared SQL ledger.

``fit_a`` and ``fit_b`` each declare 1 GPU for 1 h (a claim of 1 GPU-hour); the pool ``budget_gpu``
may use 1.5 GPU-hours a day. Both gates run at once: one claims and its task runs (40 s); the other
defers until that task has been charged its real use (a few GPU-seconds, forwarded from the host's
lease ledger) and its claim closed; then it claims and its task runs. Each task runs 40 s so that the
gates meet while the first one's claim is open even when the second gate starts late on a loaded
machine.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("auth_budget_race", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    for name in ("fit_a", "fit_b"):
        fit = GpuBashOperator(task_id=name, gpus=1, pool="budget_gpu", duration="1h", bash_command="sleep 40")
        budget_gate(fit, gpu_hours_per_pool_day=1.5, poke_interval=2)
