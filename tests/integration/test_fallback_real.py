"""A fallback ladder under a real Airflow 3.3 scheduler (LocalExecutor, SQLite).

Rung 1 needs 4 slots of a 4-slot pool while another task holds 2: it cannot get its slots, its
start-deadline watcher skips it, and rung 2 (2 slots) runs; downstream gets rung 2's result. A second
DAG whose rungs can never fit shows the exhausted ladder failing the run.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.airflow_real

AIRFLOW_DAGS = "fallback"
AIRFLOW_POOLS = {"fallback_gpus": 4}


def _by_task(cluster: Any, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    return {ti["task_id"]: ti for ti in cluster.task_instances(dag_id, run_id)}


def _xcom(cluster: Any, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
    resp = cluster.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
    resp.raise_for_status()
    return resp.json()["value"]


def test_rung_one_cannot_get_its_slots_in_time_and_rung_two_runs(airflow_cluster):
    airflow_cluster.wait_for_dags(["fallback_real", "fallback_real_exhausted"])
    assert airflow_cluster.import_errors() == []
    run_id = airflow_cluster.trigger("fallback_real")
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


def test_exhausted_ladder_fails_the_run(airflow_cluster):
    airflow_cluster.wait_for_dag("fallback_real_exhausted")
    run_id = airflow_cluster.trigger("fallback_real_exhausted")
    state = airflow_cluster.wait_for_run("fallback_real_exhausted", run_id, timeout=300)
    states = {
        t: ti["state"] for t, ti in _by_task(airflow_cluster, "fallback_real_exhausted", run_id).items()
    }
    assert state == "failed", states
    assert states["train.8x"] == "skipped" and states["train.6x"] == "skipped"
    assert states["train.fallback_to_6x"] == "success"
    assert states["train.exhausted"] == "failed"
    assert states["train.result"] == "skipped" and states["evaluate"] == "skipped"
