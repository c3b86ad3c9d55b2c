"""The watermark controller in a thread next to a benchmark's real Airflow (the two real benchmarks)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.testing import AirflowCluster
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController


@contextmanager
def controller_running(
    cluster: AirflowCluster, pool: str, capacity: int, interval: float
) -> Iterator[WatermarkController]:
    """Run a watermark controller for ``pool`` (a static capacity, every ``interval`` s, no leader lock)
    against ``cluster`` while the block runs; stopped and its client closed on the way out."""
    config = parse_config(
        {
            "interval": interval,
            "pools": {pool: {"source": capacity}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    client = AirflowRestClient(cluster.api_url, cluster.USERNAME, cluster.PASSWORD)
    controller = WatermarkController(config, client)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield controller
    finally:
        stop.set()
        thread.join(30)
        client.close()
