"""A Python GPU task killed with -9 while a process it started runs on, and the next task on its GPUs,
for tests/integration/test_gpu_leases_real.py.

``gpu_lease_orphan``: a ``@task.gpu`` callable on all 4 GPUs starts a trainer child (what torchrun or a
DataLoader worker is), writes ``$GPU_LEASE_TEST_LOG/orphan/orphan.json`` (the task process, its process group,
the child and its start token), then waits to be killed. The child keeps running until SIGTERM; then it
writes the time it stops to ``orphan.ended`` and exits.

``gpu_lease_orphan_next``: a ``@task.gpu`` callable on the same 4 GPUs writes ``successor.json``: when
it started, its devices, and whether the child was still running at that moment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pendulum
from airflow.sdk import DAG, task

#: Its own folder: the other DAGs of this folder write one JSON file per task into the log folder itself.
LOG = os.path.join(os.environ.get("GPU_LEASE_TEST_LOG", "/tmp"), "orphan")

#: The trainer: runs until SIGTERM, then says when it stopped.
CHILD = """
import os, signal, sys, time
log = sys.argv[1]
def stop(*_):
    with open(os.path.join(log, "orphan.ended"), "w") as handle:
        handle.write(repr(time.time()))
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.2)
"""

with DAG("gpu_lease_orphan", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):

    @task.gpu(gpus=4, duration="10m", retries=0)
    def victim() -> None:
        from airflow_gpu_dag.gpu.process import process_start_token

        os.makedirs(LOG, exist_ok=True)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, LOG],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # no pipe back to the task: the supervisor does not wait on it
            stderr=subprocess.DEVNULL,
        )
        info = {
            "task_pid": os.getpid(),
            "task_pgid": os.getpgid(0),
            "child_pid": child.pid,
            "child_start": process_start_token(child.pid),
            "lease_id": os.environ["GPU_DAG_LEASE_ID"],
            "devices": os.environ["CUDA_VISIBLE_DEVICES"],
        }
        with open(os.path.join(LOG, "orphan.tmp"), "w") as handle:
            json.dump(info, handle)
        os.replace(os.path.join(LOG, "orphan.tmp"), os.path.join(LOG, "orphan.json"))
        time.sleep(600)  # killed with -9 by the test long before

    victim()

with DAG("gpu_lease_orphan_next", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):

    @task.gpu(gpus=4, duration="1m", retries=0)
    def successor() -> None:
        from airflow_gpu_dag.gpu.process import process_start_token

        started = time.time()
        with open(os.path.join(LOG, "orphan.json")) as handle:
            info = json.load(handle)
        seen = {
            "started": started,
            "child_running": process_start_token(info["child_pid"]) == info["child_start"],
            "devices": os.environ["CUDA_VISIBLE_DEVICES"],
        }
        with open(os.path.join(LOG, "successor.json"), "w") as handle:
            json.dump(seen, handle)

    successor()
