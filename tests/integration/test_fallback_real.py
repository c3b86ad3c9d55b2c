"""A fallback ladder under a real Airflow 3.3 scheduler (LocalExecutor, SQLite).

Rung 1 needs 4 slots of a 4-slot pool while another task holds 2: it cannot get its slots, its
start-deadline watcher skips it, and rung 2 (2 slots) runs; downstream gets rung 2's result. A second
DAG whose rungs can never fit shows the exhausted ladder failing the run (the two runs go at the same
time: the exhausted rungs never get slots, so they take none from the first). A third runs with the
watermark controller managing the pool: its first rung is larger than the live capacity, and the
controller's too-large check flags it but leaves it to its watcher, so the ladder falls back.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import build_controller
from airflow_gpu_dag.watermark.sources import CapacityReading
from airflow_gpu_dag.watermark.too_large import TooLargeWatch

pytestmark = pytest.mark.airflow_real

AIRFLOW_DAGS = "fallback"
AIRFLOW_POOLS = {"fallback_gpus": 4}


def _by_task(cluster: Any, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    return {ti["task_id"]: ti for ti in cluster.task_instances(dag_id, run_id)}


def _xcom(cluster: Any, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
    resp = cluster.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
    resp.raise_for_status()
    return resp.json()["value"]


@pytest.fixture(scope="module")
def ladder_runs(airflow_cluster: Any) -> dict[str, str]:
    """The runs of ``fallback_real`` and ``fallback_real_exhausted``, triggered together."""
    airflow_cluster.wait_for_dags(["fallback_real", "fallback_real_exhausted"])
    assert airflow_cluster.import_errors() == []
    return {
        dag_id: airflow_cluster.trigger(dag_id) for dag_id in ("fallback_real", "fallback_real_exhausted")
    }


def test_rung_one_cannot_get_its_slots_in_time_and_rung_two_runs(airflow_cluster, ladder_runs):
    run_id = ladder_runs["fallback_real"]
    state = airflow_cluster.wait_for_run("fallback_real", run_id, timeout=300)
    tis = _by_task(airflow_cluster, "fallback_real", run_id)
    states = {t: ti["state"] for t, ti in tis.items()}
    assert state == "success", states

    assert states["train.4x"] == "skipped"  # never got its 4 slots: taken out of the pool queue
    assert tis["train.4x"]["pool_slots"] == 4 and tis["train.4x"]["pool"] == "fallback_gpus"
    assert states["train.4x_start_deadline"] == "success"
    assert states["train.fallback_to_2x"] == "success"
    assert states["train.2x"] == "success" and tis["train.2x"]["pool_slots"] == 2
    assert states["train.exhausted"] == "skipped"
    assert states["train.result"] == "success" and states["evaluate"] == "success"

    mark = _xcom(airflow_cluster, "fallback_real", run_id, "train.4x_start_deadline", "gpu_dag_fallback")
    assert mark["outcome"] == "not_started" and "did not start within 10s" in mark["reason"]
    assert _xcom(airflow_cluster, "fallback_real", run_id, "train.result", "fallback_rung") == "train.2x"
    evaluated = _xcom(airflow_cluster, "fallback_real", run_id, "evaluate")
    assert evaluated == {"evaluated": {"task": "train.2x", "batch_size": 32, "grad_accum": 2}}


def test_exhausted_ladder_fails_the_run(airflow_cluster, ladder_runs):
    run_id = ladder_runs["fallback_real_exhausted"]
    state = airflow_cluster.wait_for_run("fallback_real_exhausted", run_id, timeout=300)
    states = {
        t: ti["state"] for t, ti in _by_task(airflow_cluster, "fallback_real_exhausted", run_id).items()
    }
    assert state == "failed", states
    assert states["train.8x"] == "skipped" and states["train.6x"] == "skipped"
    assert states["train.fallback_to_6x"] == "success"
    assert states["train.exhausted"] == "failed"
    assert states["train.result"] == "skipped" and states["evaluate"] == "skipped"


class _FourGpus:
    kind = "fake"

    def read(self) -> CapacityReading:
        return CapacityReading(4, "fake 4")


def test_the_controller_leaves_a_rung_larger_than_the_live_capacity_to_its_ladder(airflow_cluster):
    """The too-large check flags rung 6x and the watcher skips it after 20 s: failing it would end the
    ladder (a failed rung did not "not start"), and the run would fail."""
    airflow_cluster.wait_for_dag("fallback_real_shrunk")
    client = AirflowRestClient(airflow_cluster.api_url, airflow_cluster.USERNAME, airflow_cluster.PASSWORD)
    pool = {"source": 0, "backfill": True}
    config = parse_config(
        {
            "interval": 1,
            "fail_open_after": 600,  # no fail-open between ticks on a loaded machine
            "pools": {"fallback_gpus": pool},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    controller = build_controller(config, client, "fallback-test", {"fallback_gpus": _FourGpus()})
    controller.too_large = TooLargeWatch(client, intervals=1, action="fail", max_gpus_per_host=None)
    stop = threading.Event()
    flagged: list[str] = []

    def tick() -> None:
        while not stop.is_set():
            controller.tick()
            description = str((client.get_pool("fallback_gpus") or {}).get("description"))
            if "too large" in description:
                flagged.append(description)
            stop.wait(1.0)

    ticker = threading.Thread(target=tick, daemon=True)
    try:
        run_id = airflow_cluster.trigger("fallback_real_shrunk")
        ticker.start()
        state = airflow_cluster.wait_for_run("fallback_real_shrunk", run_id, timeout=300)
    finally:
        stop.set()
        ticker.join(timeout=60)
        controller.shutdown("test over")
        client.close()
    tis = _by_task(airflow_cluster, "fallback_real_shrunk", run_id)
    states = {t: ti["state"] for t, ti in tis.items()}
    assert state == "success", (states, flagged[-1:])
    assert states["train.6x"] == "skipped" and states["train.2x"] == "success", states
    assert flagged and "train.6x (run" in flagged[0] and "a fallback rung: left to its ladder" in flagged[0]
