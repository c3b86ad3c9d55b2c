"""A GPU task whose lease is reclaimed while it runs, for tests/integration/test_gpu_leases_real.py.

The callable removes its own lease from the host's lease table (what a reclaim by another worker
does), then would work for 5 minutes. A real Airflow task process runs it with SIGINT at ``SIG_DFL``;
the lost lease must still stop it at the next heartbeat, and the task fail with ``LeaseLost``. If the
callable runs to the end it writes ``$GPU_LEASE_TEST_LOG/lost.finished``.
"""

from __future__ import annotations

import os
import time

import pendulum
from airflow.sdk import DAG, task

LOG = os.environ.get("GPU_LEASE_TEST_LOG", "/tmp")

with DAG("gpu_lease_lost", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):

    @task.gpu(gpus=1, duration="5m", retries=0)
    def reclaimed() -> None:
        from airflow_gpu_dag.gpu.lease import LeaseSettings
        from airflow_gpu_dag.gpu.lease_table import LeaseTable

        lease_id = os.environ["GPU_DAG_LEASE_ID"]
        table = LeaseTable(LeaseSettings.from_config())
        with table.locked():
            leases = table.load()
            leases["leases"].pop(lease_id)
            table.save(leases)
        with open(os.path.join(LOG, "lost.started"), "w") as handle:
            handle.write(lease_id)
        for _ in range(300):
            time.sleep(1)
        with open(os.path.join(LOG, "lost.finished"), "w") as handle:
            handle.write(lease_id)

    reclaimed()
