"""The real-Airflow test harness itself: boot, run a one-task DAG, stop cleanly."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from airflow_gpu_dag.testing import AirflowCluster, ClusterError, sqlite

SMOKE_DAG = textwrap.dedent(
    """
    from airflow.sdk import DAG, task

    with DAG("harness_smoke", schedule=None, catchup=False):

        @task(pool="smoke_pool")
        def hello() -> int:
            return 42

        hello()
    """
)


# Prints the busy timeout (ms) of a connection from Airflow's own engine, as the components open it.
BUSY_TIMEOUT_PROBE = (
    "from airflow import settings\n"
    "with settings.engine.connect() as c:\n"
    "    print(c.exec_driver_sql('PRAGMA busy_timeout').scalar())\n"
)


def _running(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            pass
    return out


def test_rejects_missing_dags_folder(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="not a directory"):
        AirflowCluster(tmp_path / "nope")


def test_rejects_bad_pool_size(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="pool 'gpu'"):
        AirflowCluster(tmp_path, pools={"gpu": -1})


@pytest.mark.airflow_real
def test_boot_run_and_stop(tmp_path: Path) -> None:
    (tmp_path / "harness_smoke.py").write_text(SMOKE_DAG)
    cluster = AirflowCluster(tmp_path, pools={"smoke_pool": 2})
    with cluster:
        home = cluster.home
        assert cluster.get_pool("smoke_pool")["slots"] == 2
        assert cluster.set_pool("smoke_pool", 3)["slots"] == 3
        cluster.wait_for_dag("harness_smoke")
        assert cluster.import_errors() == []
        run_id = cluster.trigger("harness_smoke", conf={"k": "v"})
        assert cluster.wait_for_run("harness_smoke", run_id, timeout=300) == "success"
        (ti,) = cluster.task_instances("harness_smoke", run_id)
        assert ti["task_id"] == "hello"
        assert ti["state"] == "success"
        assert ti["pool"] == "smoke_pool"
        assert ti["start_date"] and ti["end_date"]
        assert ti["start_date"] <= ti["end_date"]
        assert cluster.get_run("harness_smoke", run_id)["conf"] == {"k": "v"}
        assert cluster.cli("version").stdout.strip().startswith("3.")
        # The components wait 60 s for SQLite's write lock, not the driver's 5 s (CI flaked on it).
        busy = subprocess.run(
            [sys.executable, "-c", BUSY_TIMEOUT_PROBE], env=cluster.env, capture_output=True, text=True
        )
        assert busy.stdout.strip() == str(sqlite.BUSY_TIMEOUT * 1000), busy.stderr[-2000:]
        started = cluster.process_tree()
        assert {"api-server", "scheduler", "dag-processor"} <= set(cluster.pids)
        assert len(started) >= 3
    assert _running(started) == [], f"left running after stop(): {_running(started)}"
    assert not home.exists()


@pytest.mark.airflow_real
def test_failed_boot_reports_component_logs(tmp_path: Path) -> None:
    # An executor that does not exist: the scheduler dies at start-up and the error must say so.
    cluster = AirflowCluster(
        tmp_path, env={"AIRFLOW__CORE__EXECUTOR": "no_such_module.NoSuchExecutor"}, boot_timeout=120
    )
    with pytest.raises(ClusterError) as excinfo:
        cluster.start()
    message = str(excinfo.value)
    assert "failed to boot" in message
    assert "NoSuchExecutor" in message or "no_such_module" in message
    assert "----- scheduler" in message  # the component log tails are part of the error
    for pid in cluster.pids.values():
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        assert _running([proc]) == [], f"component pid {pid} still running after a failed boot"
