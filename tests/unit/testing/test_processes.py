"""Tests of ``airflow_gpu_dag.testing.processes``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from airflow_gpu_dag.testing import ClusterError
from airflow_gpu_dag.testing import rest as rest_module
from airflow_gpu_dag.testing.faults import start_component
from airflow_gpu_dag.testing.processes import Component, Components

#: Another process group (another cluster's component, anyone's): a session leader with a child.
OTHER = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
    "print(child.pid, flush=True); time.sleep(120)"
)


@pytest.fixture
def other() -> Iterator[tuple[subprocess.Popen[bytes], psutil.Process]]:
    proc = subprocess.Popen([sys.executable, "-c", OTHER], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    child = psutil.Process(int(proc.stdout.readline()))
    try:
        yield proc, child
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # our own session, its leader alive: the group is ours
        proc.wait(timeout=30)
        if child.is_running():
            child.kill()
        psutil.wait_procs([child], timeout=10)


def _dead_component_whose_pid_was_reused(tmp_path: Path, pid: int) -> Components:
    """A component that exited and was reaped; then the kernel handed its pid to ``pid``'s process."""
    components = Components()
    comp = components.spawn("scheduler", [sys.executable, "-c", "pass"], {}, tmp_path, tmp_path / "s.log")
    assert comp.proc is not None
    comp.proc.wait(timeout=30)
    comp.proc.pid = pid
    return components


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest_module, "RETRY_WAIT", 0.0)


class FakeProc:
    def __init__(self, pid: int, returncode: int | None) -> None:
        self.pid, self.returncode = pid, returncode

    def poll(self) -> int | None:
        return self.returncode


def test_a_reused_pid_is_not_adopted_nor_stopped(
    tmp_path: Path, other: tuple[subprocess.Popen[bytes], psutil.Process]
) -> None:
    proc, child = other
    components = _dead_component_whose_pid_was_reused(tmp_path, proc.pid)
    assert components.process_tree() == []  # the other process and its child are not ours
    components.stop(grace=1)
    assert proc.poll() is None and child.is_running() and child.status() != psutil.STATUS_ZOMBIE


def test_the_group_of_a_reused_pid_gets_no_signal(
    tmp_path: Path, other: tuple[subprocess.Popen[bytes], psutil.Process]
) -> None:
    # faults.reap_component / kill_component(group=True) signal the group after the leader was reaped.
    proc, child = other
    (comp,) = _dead_component_whose_pid_was_reused(tmp_path, proc.pid)
    comp.signal_group(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=1)
    assert child.is_running()


def test_a_dead_leaders_group_with_members_left_is_still_signalled(tmp_path: Path) -> None:
    # The leader is gone, its pid is not reused (the group's members hold the id): killpg still reaches them.
    code = (
        "import subprocess, sys; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        "print(c.pid, flush=True)"
    )
    components = Components()
    comp = components.spawn("scheduler", [sys.executable, "-c", code], {}, tmp_path, tmp_path / "s.log")
    assert comp.proc is not None
    comp.proc.wait(timeout=30)
    child = psutil.Process(int((tmp_path / "s.log").read_text().split()[0]))
    try:
        comp.signal_group(signal.SIGKILL)
        gone, _ = psutil.wait_procs([child], timeout=30)
        assert gone
    finally:
        if child.is_running():
            child.kill()


def test_a_restart_that_never_gets_healthy_shows_the_logs(tmp_path: Path) -> None:
    components = Components()
    log = tmp_path / "scheduler.log"
    components.items.append(Component("scheduler", ["airflow", "scheduler"], log, proc=FakeProc(1, -9)))  # type: ignore[arg-type]

    def restart(name: str) -> Component:
        comp = Component(name, ["airflow", "scheduler"], log, proc=FakeProc(2, None))  # type: ignore[arg-type]
        components.items.append(comp)
        return comp

    cluster = SimpleNamespace(
        _components=components,
        pids={"scheduler": 2},
        _restart=restart,
        health=lambda: {"scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": None}},
        log_tails=lambda lines=40: "----- scheduler: sqlite3.OperationalError: no such table -----",
    )
    with pytest.raises(ClusterError, match="not healthy") as err:
        start_component(cluster, "scheduler", timeout=0.2)  # type: ignore[arg-type]
    assert "no such table" in str(err.value)
