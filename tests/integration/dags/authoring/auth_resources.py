"""Resource edges and affinity on GPU tasks (tests/integration/test_authoring_real.py).

``auth_exclusive``: two GPU tasks (a GpuBashOperator and an ``@task.gpu``) made mutually exclusive on
the 4-slot pool ``gpu_node``: each holds the whole pool and all 4 GPUs. ``auth_share``: two GPU tasks
sharing it half/half: each holds 2 GPUs, and each waits until the other has started, so both succeed
only if they ran at the same time. ``auth_affinity``: a GPU task pinned to the queue ``host-a``,
whose pool ``[gpu_dag] queues`` declares.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_gpu_dag.authoring import exclusive, pin_to_queue, share
from airflow_gpu_dag.operators.gpu import GpuBashOperator

BASE = os.environ.get("GPU_DAG_AUTH_BASE", "/tmp/gpu_dag_auth")
START = pendulum.datetime(2026, 1, 1)
SEEN = BASE + "/{{ run_id }}.$AIRFLOW_CTX_TASK_ID.devices"


def _wait_for_other(me: str, other: str) -> str:
    flag = BASE + "/{{ run_id }}"
    return (
        f"mkdir -p {flag}; echo $CUDA_VISIBLE_DEVICES > {flag}/{me}; "
        f"for i in $(seq 1 1200); do [ -f {flag}/{other} ] && exit 0; sleep 0.5; done; "
        f"echo '{other} never ran while {me} was running'; exit 1"
    )


with DAG("auth_exclusive", schedule=None, start_date=START, catchup=False, tags=["authoring"]):
    excl_bash = GpuBashOperator(
        task_id="excl_bash",
        gpus=1,
        duration="10m",
        bash_command=f"echo $CUDA_VISIBLE_DEVICES > {SEEN}; sleep 4",
    )

    @task.gpu(gpus=2, duration="10m")
    def excl_py(ti=None) -> None:
        Path(BASE, f"{ti.run_id}.excl_py.devices").write_text(os.environ["CUDA_VISIBLE_DEVICES"])
        time.sleep(4)

    exclusive([excl_bash, excl_py()], pool="gpu_node", pool_size=4)

with DAG("auth_share", schedule=None, start_date=START, catchup=False, tags=["authoring"]):
    share_a = GpuBashOperator(
        task_id="share_a", gpus=1, duration="10m", bash_command=_wait_for_other("a", "b")
    )
    share_b = GpuBashOperator(
        task_id="share_b", gpus=1, duration="10m", bash_command=_wait_for_other("b", "a")
    )
    share([(share_a, 0.5), (share_b, 0.5)], pool="gpu_node", pool_size=4)

with DAG("auth_affinity", schedule=None, start_date=START, catchup=False, tags=["authoring"]):
    pinned = GpuBashOperator(task_id="pinned", gpus=1, duration="10m", bash_command="true")
    pin_to_queue(pinned, "host-a")
