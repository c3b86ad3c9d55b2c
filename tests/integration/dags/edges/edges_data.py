"""Data edges for the real-Airflow tests: completeness sensor, fallback to the last good artifact,
and the strict variant where a failed producer blocks the consumer after its retries."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Asset

from airflow_gpu_dag.authoring import data_edge, dataset_path

BASE = os.environ.get("GPU_DAG_EDGES_BASE", "/tmp/gpu_dag_edges")

# conf: exit (producer exit code), mark (write _SUCCESS, default true)
PRODUCE = (
    "set -e; d={base}/{name}/{{{{ run_id }}}}; mkdir -p $d; echo rows-{{{{ run_id }}}} > $d/part-0; "
    "{{% if dag_run.conf.get('mark', True) %}}touch $d/_SUCCESS;{{% endif %}} "
    "exit {{{{ dag_run.conf.get('exit', 0) }}}}"
)

for name, fallback in (("edges_data", True), ("edges_data_strict", False)):
    with DAG(name, schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["edges"]) as dag:
        produce = BashOperator(
            task_id="produce",
            bash_command=PRODUCE.format(base=BASE, name=name),
            retries=0 if fallback else 1,
            retry_delay=timedelta(seconds=1),
        )
        consume = BashOperator(
            task_id="consume",
            bash_command=(
                f"cat {dataset_path('wait_' + name)}/part-0 > {BASE}/{name}/consumed-{{{{ run_id }}}}"
            ),
        )
        data_edge(
            produce,
            consume,
            path=f"{BASE}/{name}/{{{{ run_id }}}}",
            asset=Asset(name, uri=f"file://{BASE}/{name}"),
            # long enough for data_late_marker, whose _SUCCESS the test writes after the window test
            timeout=timedelta(seconds=900 if fallback else 12),
            poke_interval=1,
            fallback_to_last_good=fallback,
            task_id=f"wait_{name}",
        )
    globals()[name] = dag
