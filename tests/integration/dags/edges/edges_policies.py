"""Budget gate and failure policies (retry with backoff, skip, abort)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import Retry, budget_gate, cleanup, failure_policy

BASE = os.environ.get("GPU_DAG_EDGES_BASE", "/tmp/gpu_dag_edges")
START = datetime(2026, 1, 1)

with DAG("edges_budget", schedule=None, start_date=START, catchup=False, tags=["edges"]):
    prep = BashOperator(task_id="prep", bash_command="true")
    fit = BashOperator(task_id="fit", bash_command="true", pool="edges_gpu")
    prep >> fit
    budget_gate(fit, gpu_hours_per_pool_day=1, poke_interval=1)

with DAG("edges_rollback", schedule=None, start_date=START, catchup=False, tags=["edges"]):
    # fails on its first try, succeeds on the second
    flaky = BashOperator(
        task_id="flaky",
        bash_command=(f"f={BASE}/flaky-{{{{ run_id }}}}; if [ -f $f ]; then exit 0; fi; touch $f; exit 1"),
    )
    failure_policy(flaky, Retry(retries=2, delay=1, backoff=True, max_delay=2))

    optional = BashOperator(task_id="optional", bash_command="exit 1")
    failure_policy(optional, "skip")
    tolerant = BashOperator(task_id="tolerant_after", bash_command="true", trigger_rule="none_failed")
    strict = BashOperator(task_id="strict_after", bash_command="true")
    optional >> [tolerant, strict]

    pretrain = BashOperator(task_id="pretrain", bash_command="exit 1", retries=3)
    sft = BashOperator(task_id="sft", bash_command="true")
    report = BashOperator(task_id="report", bash_command="true", trigger_rule="all_done")
    free = BashOperator(task_id="free", bash_command="true")
    alert = BashOperator(task_id="alert", bash_command="echo pretrain failed", trigger_rule="one_failed")
    pretrain >> sft >> report
    pretrain >> alert
    cleanup(free, after=sft)
    failure_policy(pretrain, "abort")
