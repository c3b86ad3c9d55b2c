"""Time edges: start windows (templated from conf) and a stage dependency on checkpoint N."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import stage_dependency, start_window

BASE = os.environ.get("GPU_DAG_EDGES_BASE", "/tmp/gpu_dag_edges")
START = datetime(2026, 1, 1)

with DAG("edges_window", schedule=None, start_date=START, catchup=False, tags=["edges"]):
    skip_task = BashOperator(task_id="skip_task", bash_command="true")
    fail_task = BashOperator(task_id="fail_task", bash_command="true")
    after = BashOperator(task_id="after_skip", bash_command="true")
    skip_task >> after
    for task, policy in ((skip_task, "skip"), (fail_task, "fail")):
        start_window(
            task,
            opens="{{ dag_run.conf.get('opens', '00:00') }}",
            closes="{{ dag_run.conf.get('closes', '23:59:59') }}",
            on_missed=policy,
        )

# train writes checkpoint-1..3 (marker last) and keeps running until evaluate has used checkpoint 2:
# it succeeds only if evaluate ran while it was still running. The waits are generous (a loaded 2-core CI
# machine starts each task process slowly); a passing run ends as soon as evaluate is done. With
# conf {"fail": true} it fails before writing any checkpoint (the sensor must give up, not time out).
TRAIN = f"""
set -e; d={BASE}/ckpt/{{{{ run_id }}}}; mkdir -p $d
{{% if dag_run.conf.get('fail') %}}echo 'training diverged'; exit 3{{% endif %}}
for i in 1 2 3; do
  mkdir -p $d/checkpoint-$i; echo w > $d/checkpoint-$i/weights; touch $d/checkpoint-$i/_SUCCESS; sleep 1
done
for i in $(seq 1 420); do [ -f $d/eval_done ] && exit 0; sleep 1; done
echo 'evaluate never ran while training was running'; exit 1
"""

with DAG("edges_stage", schedule=None, start_date=START, catchup=False, tags=["edges"]):
    prepare = BashOperator(task_id="prepare", bash_command="true")
    train = BashOperator(task_id="train", bash_command=TRAIN)
    evaluate = BashOperator(
        task_id="evaluate",
        bash_command=(
            "test -f {{ ti.xcom_pull(task_ids='wait_train_ckpt_2')['path'] }}/weights && "
            "echo {{ ti.xcom_pull(task_ids='wait_train_ckpt_2')['step'] }} > "
            f"{BASE}/ckpt/{{{{ run_id }}}}/eval_done"
        ),
    )
    prepare >> train
    stage_dependency(
        train,
        evaluate,
        checkpoint_dir=f"{BASE}/ckpt/{{{{ run_id }}}}",
        step=2,
        timeout=timedelta(seconds=420),
        poke_interval=1,
    )
