"""Tests of ``airflow_gpu_dag.gpu.process``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from airflow_gpu_dag.gpu.process import process_start_token
from airflow_gpu_dag.operators.gpu import GpuPythonOperator
from tests.unit.operators.conftest import context


def _running(pid: int) -> bool:
    return process_start_token(pid) is not None  # a zombie (exited, not reaped) counts as gone


def test_processes_started_before_the_task_are_left_alone(static_host: Path) -> None:
    earlier = subprocess.Popen(["sleep", "60"])  # not the callable's: e.g. the worker's own helper
    try:
        op = GpuPythonOperator(task_id="quiet", python_callable=lambda: 7, gpus=1)
        assert op.execute(context("quiet")) == 7
        assert _running(earlier.pid)
    finally:
        earlier.kill()
        earlier.wait()
