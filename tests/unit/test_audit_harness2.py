"""Audit of the real-Airflow test harness (no Airflow booted): a dead component's pid, reused by another
process, is neither adopted nor signalled; the caller's connections and Variables stay out of the
cluster; a wait whose poll fails names a dead api-server; a wait that times out keeps its message when
the listing for it fails; a restart that never gets healthy shows the logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil
import pytest

from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.testing import AirflowCluster, ClusterError
from airflow_gpu_dag.testing import rest as rest_module
from airflow_gpu_dag.testing.faults import start_component
from airflow_gpu_dag.testing.processes import Component, Components
from airflow_gpu_dag.testing.rest import ClusterRest

# -- a dead component's pid reused by another process ---------------------------------------------------

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


# -- the caller's environment -----------------------------------------------------------------------------


def test_the_callers_connections_and_variables_are_not_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A developer's connection to the shared budget ledger of a real deployment: tasks of the test cluster
    # would spend its budget (an environment connection wins over the cluster's own).
    monkeypatch.setenv("AIRFLOW_CONN_GPU_DAG_BUDGET", "postgresql://prod-ledger/budget")
    monkeypatch.setenv("AIRFLOW_VAR_GPU_DAG_BUDGET_CAP", "0")
    monkeypatch.setenv("AIRFLOW_GPU_DAG_KEEP_HOME_NOT_A_SETTING", "kept")
    cluster = AirflowCluster(tmp_path, env={"AIRFLOW_CONN_MINE": "sqlite:///x.db"})
    cluster._home, cluster._port = tmp_path, 8080
    env = cluster._build_env()
    assert "AIRFLOW_CONN_GPU_DAG_BUDGET" not in env and "AIRFLOW_VAR_GPU_DAG_BUDGET_CAP" not in env
    assert env["AIRFLOW_CONN_MINE"] == "sqlite:///x.db"  # given in env=: passed on
    assert env["AIRFLOW_GPU_DAG_KEEP_HOME_NOT_A_SETTING"] == "kept"


# -- waits whose poll fails -------------------------------------------------------------------------------


class FakeClient:
    def __init__(self, answers: list[tuple[int, Any] | RestError]) -> None:
        self.answers = list(answers)

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        answer = self.answers.pop(0)
        if isinstance(answer, RestError):
            raise answer
        return httpx.Response(answer[0], json=answer[1])

    def run_task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        raise RestError(f"GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances: ReadTimeout")

    def pages(self, path: str, key: str) -> list[dict[str, Any]]:
        raise RestError(f"GET /api/v2{path}: ReadTimeout")


class FakeCluster(ClusterRest):
    dags_folder = Path("/dags")
    dead: str | None = None

    def __init__(self, answers: list[tuple[int, Any] | RestError]) -> None:
        self.client = FakeClient(answers)

    def _rest(self) -> Any:
        return self.client

    def log_tails(self, lines: int = 40) -> str:
        return "----- scheduler tail -----"

    def check_alive(self) -> None:
        if self.dead:
            raise ClusterError(f"{self.dead} (pid 7) exited with status 1 on its own; Last error: boom")


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest_module, "RETRY_WAIT", 0.0)


def _refused(path: str) -> RestError:
    return RestError(f"GET {path}: ConnectError")


def test_wait_for_run_names_a_dead_api_server() -> None:
    cluster = FakeCluster([_refused("/api/v2/dags/d/dagRuns/r")])
    cluster.dead = "api-server"
    with pytest.raises(ClusterError, match=r"api-server \(pid 7\) exited .*boom"):
        cluster.wait_for_run("d", "r")


def test_wait_for_dag_names_a_dead_api_server() -> None:
    cluster = FakeCluster([_refused("/api/v2/dags/d")])
    cluster.dead = "api-server"
    with pytest.raises(ClusterError, match=r"api-server \(pid 7\) exited .*boom"):
        cluster.wait_for_dag("d")


def test_a_failed_poll_with_everything_alive_is_raised_as_it_was() -> None:
    cluster = FakeCluster([_refused("/api/v2/dags/d/dagRuns/r")])
    with pytest.raises(ClusterError, match="ConnectError"):
        cluster.wait_for_run("d", "r")


def test_wait_for_run_timeout_keeps_its_message_when_the_task_instances_cannot_be_read() -> None:
    cluster = FakeCluster([(200, {"state": "running"}), _refused("/api/v2/monitor/health")])
    with pytest.raises(ClusterError) as err:
        cluster.wait_for_run("d", "r", timeout=0)
    message = str(err.value)
    assert "DAG run d/r is still 'running' after 0s" in message
    assert "taskInstances: ReadTimeout" in message and "scheduler tail" in message


def test_wait_for_dag_timeout_keeps_its_message_when_the_import_errors_cannot_be_read() -> None:
    cluster = FakeCluster([(404, {"detail": "not found"})])
    with pytest.raises(ClusterError) as err:
        cluster.wait_for_dag("d", timeout=0)
    message = str(err.value)
    assert "DAG 'd' was not parsed within 0s from /dags" in message
    assert "importErrors: ReadTimeout" in message and "scheduler tail" in message


# -- a restart that never gets healthy --------------------------------------------------------------------


class FakeProc:
    def __init__(self, pid: int, returncode: int | None) -> None:
        self.pid, self.returncode = pid, returncode

    def poll(self) -> int | None:
        return self.returncode


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
