"""Tests of ``airflow_gpu_dag.gpu.process``."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from airflow_gpu_dag.gpu import process as process_module
from airflow_gpu_dag.gpu.process import (
    HostIdentity,
    boot_id,
    group_members,
    pid_namespace,
    process_alive,
    process_start_token,
    processes_with_env,
)
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


# -- helpers of the direct tests below ------------------------------------------------------------------
def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _state(pid: int) -> str | None:
    """The state letter of ``pid`` in ``/proc/<pid>/stat`` (``Z``: a zombie), None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()[0]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10)


# -- process_start_token, HostIdentity --------------------------------------------------------------------
def test_the_start_token_is_the_start_time_in_clock_ticks_from_proc() -> None:
    raw = Path("/proc/self/stat").read_text()
    assert process_start_token(os.getpid()) == raw[raw.rfind(")") + 2 :].split()[19]


@pytest.mark.parametrize("pid", [0, -1])
def test_a_pid_that_is_not_positive_has_no_start_token(pid: int) -> None:
    """pid 0 and negative pids name a process group, never one process, to ``kill``."""
    assert process_start_token(pid) is None


def test_a_process_whose_name_looks_like_a_zombie_state_is_still_running(tmp_path: Path) -> None:
    """The command name in ``/proc/<pid>/stat`` may hold ``)`` and spaces: ``a) Z 1`` must not be read as
    the state of a zombie, or a live lease holder would be judged gone and its GPUs leased twice."""
    program = tmp_path / "a) Z 1 2"
    shutil.copy("/bin/sleep", program)
    proc = subprocess.Popen([str(program), "60"])
    try:
        _wait_until(lambda: f"({program.name})" in Path(f"/proc/{proc.pid}/stat").read_text(), "the exec")
        token = process_start_token(proc.pid)
        assert token is not None and token.isdigit()
        assert process_alive(proc.pid, token)
    finally:
        _stop(proc)


def test_the_host_identity_is_the_host_name_boot_id_and_pid_namespace_of_this_process() -> None:
    identity = HostIdentity.current()
    assert identity.host == socket.gethostname()
    assert identity.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip() == boot_id()
    assert identity.pidns == str(os.stat("/proc/self/ns/pid").st_ino) == pid_namespace()


def test_a_holder_record_has_the_pid_its_start_token_and_where_the_pid_means_something() -> None:
    identity = HostIdentity("gpu-01", "boot-1", "4026531836")
    assert identity.holder(os.getpid()) == {
        "pid": os.getpid(),
        "start": process_start_token(os.getpid()),
        "host": "gpu-01",
        "boot_id": "boot-1",
        "pidns": "4026531836",
    }


def test_without_a_readable_boot_id_or_pid_namespace_they_are_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """None, not an error: a lease then judges its holder without them."""

    class Unreadable(type(Path())):  # type: ignore[misc]
        def read_text(self, *args: Any, **kwargs: Any) -> str:
            raise PermissionError(13, "Permission denied", str(self))

    def no_stat(path: Any) -> Any:
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(process_module, "Path", Unreadable)
    monkeypatch.setattr(process_module, "os", SimpleNamespace(stat=no_stat))
    assert (boot_id(), pid_namespace()) == (None, None)


def test_without_proc_the_start_token_is_psutils_create_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A host without ``/proc`` (macOS): every running holder would otherwise be judged gone."""
    monkeypatch.setattr(process_module, "_PROC", tmp_path / "no-proc")
    token = process_start_token(os.getpid())
    assert token == f"{psutil.Process().create_time():.3f}"
    assert process_alive(os.getpid(), token)


def test_with_proc_a_pid_without_an_entry_is_gone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where ``/proc`` exists, a missing ``/proc/<pid>`` means the process is gone (psutil not asked)."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "stat").write_text("1 (x) S 0")
    monkeypatch.setattr(process_module, "_PROC", proc)
    assert process_start_token(os.getpid()) is None


# -- own_process_group ----------------------------------------------------------------------------------
_OWN_GROUP = (
    "import os; from airflow_gpu_dag.gpu.process import own_process_group; "
    "print(own_process_group(), os.getpid())"
)


@pytest.mark.parametrize("leads", [True, False], ids=["leader", "member"])
def test_own_process_group_is_this_process_only_when_it_leads_its_group(leads: bool) -> None:
    """A process that shares its group (``dag.test()``, a test runner) must not record or kill it."""
    done = subprocess.run(
        [sys.executable, "-c", _OWN_GROUP],
        process_group=0 if leads else None,  # else the child is in this test runner's group
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    group, pid = done.stdout.split()
    assert group == (pid if leads else "None")


# -- group_members ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("pgid", [1, 0])
def test_group_members_of_init_or_of_no_real_group_is_empty(pgid: int) -> None:
    """Group 1 is init's and 0 is "my own group" to ``killpg``: never a lease's work."""
    assert group_members(pgid) == []


def test_group_members_are_the_running_processes_of_the_group_also_after_its_leader_exited() -> None:
    leader = subprocess.Popen(["sleep", "60"], process_group=0)
    member = subprocess.Popen(["sleep", "60"], process_group=leader.pid)
    try:
        _wait_until(lambda: os.getpgid(member.pid) == leader.pid, "the member to join the group")
        assert sorted(group_members(leader.pid)) == sorted([leader.pid, member.pid])
        _stop(leader)
        assert group_members(leader.pid) == [member.pid]
    finally:
        _stop(leader, member)


def test_a_process_group_whose_processes_are_all_zombies_holds_nothing() -> None:
    """A zombie (exited, not yet reaped) holds no GPU: its group must not keep the devices held."""
    leader = subprocess.Popen(["sleep", "60"], process_group=0)
    try:
        leader.kill()  # not reaped: a zombie, still in its group
        _wait_until(lambda: _state(leader.pid) == "Z", "the leader to become a zombie")
        assert group_members(leader.pid) == []
    finally:
        _stop(leader)
    assert group_members(leader.pid) == []  # reaped: no such group


def test_without_proc_a_group_that_exists_is_reported_as_its_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = subprocess.Popen(["sleep", "60"], process_group=0)
    try:
        monkeypatch.setattr(process_module, "_PROC", tmp_path)  # no /proc/self/stat
        assert group_members(leader.pid) == [leader.pid]
        _stop(leader)
        assert group_members(leader.pid) == []
    finally:
        _stop(leader)


# -- processes_with_env -----------------------------------------------------------------------------------
def _with_env(**env: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "60"], env={**os.environ, **env})
    # Popen returns as the exec starts; /proc/<pid>/environ reads empty until the kernel has set it up
    _wait_until(lambda: _cmdline(proc.pid).startswith(b"sleep\0"), "the exec to complete")
    return proc


def test_processes_with_env_finds_the_processes_started_with_exactly_that_variable() -> None:
    lease_id = uuid.uuid4().hex
    mine = _with_env(GPU_DAG_LEASE_ID=lease_id)
    longer = _with_env(GPU_DAG_LEASE_ID=lease_id + "-2")  # another lease whose id starts the same
    other_name = _with_env(X_GPU_DAG_LEASE_ID=lease_id)
    try:
        assert processes_with_env("GPU_DAG_LEASE_ID", lease_id) == [mine.pid]
        assert processes_with_env("GPU_DAG_LEASE_ID", uuid.uuid4().hex) == []
    finally:
        _stop(mine, longer, other_name)


def test_processes_with_env_skips_zombies() -> None:
    lease_id = uuid.uuid4().hex
    proc = _with_env(GPU_DAG_LEASE_ID=lease_id)
    try:
        proc.kill()
        _wait_until(lambda: _state(proc.pid) == "Z", "the process to become a zombie")
        assert processes_with_env("GPU_DAG_LEASE_ID", lease_id) == []
    finally:
        _stop(proc)


def test_processes_with_env_started_after_reads_only_processes_started_at_or_after_the_token() -> None:
    """A lease's work starts after its holder: older processes with a stale copy of the id are not its."""
    lease_id = uuid.uuid4().hex
    proc = _with_env(GPU_DAG_LEASE_ID=lease_id)
    try:
        token = process_start_token(proc.pid)
        assert token is not None
        assert processes_with_env("GPU_DAG_LEASE_ID", lease_id, started_after=token) == [proc.pid]
        later = str(int(token) + 1)
        assert processes_with_env("GPU_DAG_LEASE_ID", lease_id, started_after=later) == []
    finally:
        _stop(proc)


def test_without_proc_no_process_is_found_by_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease_id = uuid.uuid4().hex
    proc = _with_env(GPU_DAG_LEASE_ID=lease_id)
    try:
        monkeypatch.setattr(process_module, "_PROC", tmp_path)
        assert processes_with_env("GPU_DAG_LEASE_ID", lease_id) == []
    finally:
        _stop(proc)
