"""Audit of the GPU operators and the lease path: each test failed on the code before its fix."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.gpu.process import process_start_token
from airflow_gpu_dag.gpu.usage import UsageLedger
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


def _child_running_at_release(op: GpuPythonOperator, pid_file: Path) -> list[bool]:
    """Whether the child written to ``pid_file`` still ran each time ``op`` released its lease."""
    seen: list[bool] = []
    finish = op._finish_gpu_lease

    def spy(outcome: str) -> None:
        seen.append(_running(int(pid_file.read_text())))
        finish(outcome)

    op._finish_gpu_lease = spy  # type: ignore[method-assign]
    return seen


def _context(task_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="gpu_dag", run_id="run1", task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "task_instance": ti}


def _running(pid: int) -> bool:
    return process_start_token(pid) is not None  # a zombie (exited, not reaped) counts as gone


# -- clock -------------------------------------------------------------------------------------------
def test_a_clock_jumping_forward_past_the_ttl_does_not_hand_a_live_lease_to_another_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wall clock was stepped an hour forward (NTP, a VM resumed) while the holder ran and renewed.
    # Before: its heartbeat looked an hour old, the lease was reclaimed (its command killed) and its
    # GPU handed to the next task.
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=60, heartbeat_s=5, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    lease = m.acquire(GpuRequest(1), LeaseOwner(task_id="a", dag_id="d"))
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert m.try_acquire(GpuRequest(1), LeaseOwner(task_id="b", dag_id="d")) is None
    assert m.reclaim_stale() == []
    assert lease.heartbeat() and not lease.lost
    assert lease.release()


def test_a_hung_holder_is_still_reclaimed_after_the_ttl(tmp_path: Path) -> None:
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=0.5, heartbeat_s=0.1, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    hung = m.acquire(GpuRequest(1), LeaseOwner(task_id="hung"))  # alive (this process), never renews
    time.sleep(0.8)
    assert m.try_acquire(GpuRequest(1), LeaseOwner(task_id="next")) is not None
    assert not hung.heartbeat() and hung.lost


# -- processes a Python callable starts --------------------------------------------------------------
def test_a_process_the_callable_left_running_is_stopped_before_its_gpus_are_given_back(
    static_host: Path, tmp_path: Path
) -> None:
    # Before: the callable returned, its GPU lease was released, and the trainer it had started
    # (torchrun, a multiprocessing worker) kept running on GPUs the next task was then given.
    pid_file = tmp_path / "child.pid"

    def train() -> None:
        child = subprocess.Popen(["sleep", "60"])
        pid_file.write_text(str(child.pid))

    op = GpuPythonOperator(task_id="spawner", python_callable=train, gpus=1)
    op.child_stop_grace_s = 2.0
    seen = _child_running_at_release(op, pid_file)
    try:
        op.execute(_context("spawner"))
        assert seen == [False]
        assert LeaseManager(LeaseSettings.from_config()).leases() == []
        assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["success"]
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_sigterm_stops_the_callables_processes_before_the_lease_is_released(
    static_host: Path, tmp_path: Path
) -> None:
    # Airflow's task process calls on_kill from its SIGTERM handler: the callable is interrupted and
    # the lease released. Before, a child that ignores SIGTERM kept running on the released GPUs.
    pid_file = tmp_path / "child.pid"
    op = GpuPythonOperator(task_id="stubborn", python_callable=lambda: None, gpus=2)
    op.child_stop_grace_s = 0.5

    def train() -> None:
        child = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 60 & wait"])
        pid_file.write_text(str(child.pid))
        time.sleep(0.3)  # bash has set its trap and started sleep
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

    op.python_callable = train
    previous = signal.signal(signal.SIGTERM, lambda *_: op.on_kill())
    seen = _child_running_at_release(op, pid_file)
    try:
        from airflow.sdk.exceptions import AirflowException

        with pytest.raises(AirflowException, match="SIGTERM"):
            op.execute(_context("stubborn"))
        assert seen == [False]
        assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["killed"]
    finally:
        signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_processes_started_before_the_task_are_left_alone(static_host: Path) -> None:
    earlier = subprocess.Popen(["sleep", "60"])  # not the callable's: e.g. the worker's own helper
    try:
        op = GpuPythonOperator(task_id="quiet", python_callable=lambda: 7, gpus=1)
        assert op.execute(_context("quiet")) == 7
        assert _running(earlier.pid)
    finally:
        earlier.kill()
        earlier.wait()


def test_a_sigterm_between_the_lease_and_the_callable_keeps_the_callable_from_starting(
    static_host: Path,
) -> None:
    # on_kill ran after the lease was taken but before the callable started (it raises into the
    # callable only while it runs). Before: the SIGTERM was forgotten and the callable ran to its end.
    from airflow.sdk.exceptions import AirflowException

    ran: list[bool] = []
    op = GpuPythonOperator(task_id="late_kill", python_callable=lambda: ran.append(True), gpus=1)
    acquire = op._acquire_gpu_lease

    def acquire_then_sigterm(ctx: Any) -> Any:
        lease = acquire(ctx)
        op.on_kill()
        return lease

    op._acquire_gpu_lease = acquire_then_sigterm  # type: ignore[method-assign]
    with pytest.raises(AirflowException, match="killed before its GPU callable started"):
        op.execute(_context("late_kill"))
    assert not ran
    assert LeaseManager(LeaseSettings.from_config()).leases() == []
    assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["killed"]
