"""Hidden dependencies repaired with real files (tests/integration/test_authoring_real.py).

A writer appends three rows to ``part-0`` one second apart, then writes ``_SUCCESS``; the reader
fails unless it sees the complete dataset. Neither DAG has an edge between them: only
``fix_hidden_dependencies`` orders them.

* ``auth_hidden_edge`` (edge mode): the reader runs after the writer ended.
* ``auth_hidden_sensor`` (sensor mode): the reader waits for ``_SUCCESS``, not for the writer task,
  which keeps running until the reader has read (it fails after 10 min otherwise): the run succeeds
  only if the reader read complete data while the writer was still running.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import fix_hidden_dependencies
from airflow_gpu_dag.operators.gpu import GpuBashOperator

BASE = os.environ.get("GPU_DAG_AUTH_BASE", "/tmp/gpu_dag_auth")
START = pendulum.datetime(2026, 1, 1)


def _tasks(dag_id: str, linger: str) -> tuple[GpuBashOperator, GpuBashOperator]:
    data = f"{BASE}/{dag_id}/{{{{ run_id }}}}"
    writer = GpuBashOperator(
        task_id="write",
        gpus=1,
        duration="10m",
        outputs=[data],
        bash_command=(
            f"mkdir -p {data}; for i in 1 2 3; do echo row$i >> {data}/part-0; sleep 1; done; "
            f"touch {data}/_SUCCESS; {linger}"
        ),
    )
    reader = GpuBashOperator(
        task_id="read",
        gpus=1,
        duration="10m",
        inputs=[f"{data}/part-0"],
        bash_command=(
            f"test -f {data}/_SUCCESS && test $(wc -l < {data}/part-0) -eq 3 && date +%s > {data}/read_at"
        ),
    )
    return writer, reader


with DAG("auth_hidden_edge", schedule=None, start_date=START, catchup=False, tags=["authoring"]) as edge_dag:
    _tasks("auth_hidden_edge", "true")
fix_hidden_dependencies(edge_dag, mode="edge")

WAIT_FOR_READER = (
    f"for i in $(seq 1 1200); do [ -f {BASE}/auth_hidden_sensor/{{{{ run_id }}}}/read_at ] && exit 0; "
    "sleep 0.5; done; echo 'the reader never read while the writer was running'; exit 1"
)
with DAG(
    "auth_hidden_sensor", schedule=None, start_date=START, catchup=False, tags=["authoring"]
) as sensor_dag:
    _tasks("auth_hidden_sensor", WAIT_FOR_READER)
fix_hidden_dependencies(sensor_dag, mode="sensor", timeout=timedelta(minutes=15), poke_interval=1)
