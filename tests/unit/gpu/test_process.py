"""Tests of ``airflow_gpu_dag.gpu.process``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu_dag.gpu.process import process_start_token
from airflow_gpu_dag.operators.gpu import GpuPythonOperator


@pytest.fixture
def static_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 4x A100 static inventory and a private lease directory."""
    lease_dir = tmp_path / "leases"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:80GiB")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(lease_dir))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_POLL_INTERVAL", "0.05")
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    return lease_dir


def _context(task_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="gpu_dag", run_id="run1", task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "task_instance": ti}


def _running(pid: int) -> bool:
    return process_start_token(pid) is not None  # a zombie (exited, not reaped) counts as gone


def test_processes_started_before_the_task_are_left_alone(static_host: Path) -> None:
    earlier = subprocess.Popen(["sleep", "60"])  # not the callable's: e.g. the worker's own helper
    try:
        op = GpuPythonOperator(task_id="quiet", python_callable=lambda: 7, gpus=1)
        assert op.execute(_context("quiet")) == 7
        assert _running(earlier.pid)
    finally:
        earlier.kill()
        earlier.wait()
