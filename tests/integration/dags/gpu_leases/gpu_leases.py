"""GPU tasks for tests/integration/test_gpu_leases_real.py: several runs compete for a static 4-GPU host.

Each task writes what it saw (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, its lease id) to
``$GPU_LEASE_TEST_LOG/<run_id>.<task_id>.<map_index>.json`` and holds its GPUs for a moment.
"""

from __future__ import annotations

import json
import os
import time

import pendulum
from airflow.sdk import DAG, task

from airflow_gpu_dag.operators.gpu import GpuBashOperator

LOG = os.environ.get("GPU_LEASE_TEST_LOG", "/tmp")


def _record(context_task_id: str, run_id: str, map_index: int) -> None:
    path = os.path.join(LOG, f"{run_id}.{context_task_id}.{map_index}.json")
    seen = {
        "task_id": context_task_id,
        "run_id": run_id,
        "map_index": map_index,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvidia_visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        "lease_id": os.environ.get("GPU_DAG_LEASE_ID"),
    }
    with open(path, "w") as handle:
        json.dump(seen, handle)


with DAG("gpu_leases", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):

    @task.gpu(gpus=2, gpu_memory="40GiB", duration="20m")
    def train(ti=None) -> None:
        _record(ti.task_id, ti.run_id, ti.map_index)
        time.sleep(2)

    @task.gpu(gpus=3, duration="30m")
    def wide(ti=None) -> None:
        _record(ti.task_id, ti.run_id, ti.map_index)
        time.sleep(2)

    @task.gpu(gpus=1, gpu_type="a100", duration="15m")
    def sweep(lr: float, ti=None) -> float:
        _record(ti.task_id, ti.run_id, ti.map_index)
        time.sleep(1)
        return lr

    prep = GpuBashOperator(
        task_id="prep",
        gpus=1,
        duration="10m",
        bash_command=(
            'printf \'{"task_id": "prep", "run_id": "%s", "map_index": -1, "cuda_visible_devices": "%s", '
            '"nvidia_visible_devices": "%s", "lease_id": "%s"}\' "$AIRFLOW_CTX_DAG_RUN_ID" '
            '"$CUDA_VISIBLE_DEVICES" "$NVIDIA_VISIBLE_DEVICES" "$GPU_DAG_LEASE_ID" '
            '> "$GPU_LEASE_TEST_LOG/$AIRFLOW_CTX_DAG_RUN_ID.prep.-1.json"; sleep 2'
        ),
    )

    prep >> [train(), wide(), sweep.expand(lr=[0.1, 0.01, 0.001])]
