"""A GPU bash task gives its GPUs back only once its command's whole process group is gone.

Before, the operator waited for the group's leader only: a shell that dies on SIGTERM at once while
its child (a trainer saving a checkpoint) cleans up for a while released the lease with the child
still on the GPUs, and the next task was handed them. A SIGTERM that came after the lease was taken
but before the command started released the lease too, and the command then ran on released GPUs.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowTaskTimeout

from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseSettings
from airflow_gpu_dag.gpu.usage import UsageLedger
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from tests.unit.test_gpu_operator import context, make_dag, static_host  # noqa: F401 (autouse fixture)


def _slow_child(pid_file: Path) -> str:
    """bash runs a python child that takes 3 s to clean up after SIGTERM; bash itself dies at once."""
    child = (
        "import os, signal, time; "
        f"open('{pid_file}', 'w').write(str(os.getpid())); "
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(3), os._exit(0))); "
        "time.sleep(60)"
    )
    return f'python3 -c "{child}"; echo finished'


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    return state != "Z"


def _spy_release(op: GpuBashOperator, pid_file: Path) -> list[bool]:
    """Records, at each release, whether the child was still alive."""
    alive_at_release: list[bool] = []
    finish = op._finish_gpu_lease

    def spy(outcome: str) -> None:
        alive_at_release.append(_alive(int(pid_file.read_text())))
        finish(outcome)

    op._finish_gpu_lease = spy  # type: ignore[method-assign]
    return alive_at_release


def _wait_for(pid_file: Path, manager: LeaseManager) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (
            pid_file.exists()
            and pid_file.read_text()
            and manager.leases()
            and manager.leases()[0]["processes"]
        ):
            return
        time.sleep(0.05)
    raise AssertionError("the command never started")


def _kill(pid_file: Path) -> None:
    with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_on_kill_waits_for_the_child_before_giving_the_gpus_back(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    with make_dag():
        op = GpuBashOperator(task_id="train", gpus=4, bash_command=_slow_child(pid_file))
    op.command_stop_grace_s = 10.0  # the child's 3-s cleanup fits: it ends on SIGTERM
    alive_at_release = _spy_release(op, pid_file)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run(op, errors))
    thread.start()
    manager = LeaseManager(LeaseSettings.from_config())
    try:
        _wait_for(pid_file, manager)
        op.on_kill()
        thread.join(30)
        assert alive_at_release and not any(alive_at_release)
        assert manager.leases() == []
    finally:
        _kill(pid_file)


def test_execution_timeout_waits_for_the_child_too(tmp_path: Path) -> None:
    from airflow.sdk.execution_time.task_runner import _run_execute_callable

    pid_file = tmp_path / "child.pid"
    with make_dag():
        op = GpuBashOperator(
            task_id="train",
            gpus=4,
            execution_timeout=datetime.timedelta(seconds=2),
            bash_command=_slow_child(pid_file),
        )
    op.command_stop_grace_s = 0.5  # shorter than the cleanup: SIGKILL to the group
    alive_at_release = _spy_release(op, pid_file)
    try:
        with pytest.raises(AirflowTaskTimeout):
            _run_execute_callable(context("train"), op.execute, op)  # type: ignore[arg-type]
        assert alive_at_release and not any(alive_at_release)
        assert LeaseManager(LeaseSettings.from_config()).leases() == []
    finally:
        _kill(pid_file)


def test_a_sigterm_before_the_command_starts_keeps_it_from_starting(
    static_host: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    with make_dag():
        op = GpuBashOperator(task_id="train", gpus=4, bash_command=f"touch {marker}")
    manager = LeaseManager(LeaseSettings.from_config())
    held_after_on_kill: list[int] = []
    get_env = op.get_env

    def sigterm_now(ctx: Any) -> dict:  # Airflow's SIGTERM handler runs between lease and Popen
        op.on_kill()
        held_after_on_kill.append(len(manager.leases()))
        return get_env(ctx)

    op.get_env = sigterm_now  # type: ignore[method-assign]
    with pytest.raises(AirflowException, match=r"killed before its GPU command started"):
        op.execute(context("train"))
    assert held_after_on_kill == [1]  # not handed out while this task could still start its command
    assert not marker.exists()
    assert manager.leases() == []
    assert [r.outcome for r in UsageLedger(static_host / "usage.jsonl").read()] == ["killed"]


def test_a_background_process_left_by_the_command_is_stopped_before_the_release(tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    with make_dag():
        op = GpuBashOperator(
            task_id="train", gpus=4, bash_command=f"sleep 60 > /dev/null 2>&1 & echo $! > {pid_file}"
        )
    op.command_stop_grace_s = 2.0
    alive_at_release = _spy_release(op, pid_file)
    try:
        op.execute(context("train"))
        assert alive_at_release == [False]
        assert LeaseManager(LeaseSettings.from_config()).leases() == []
    finally:
        _kill(pid_file)


def _run(op: GpuBashOperator, errors: list[BaseException]) -> None:
    try:
        op.execute(context("train"))
    except BaseException as err:
        errors.append(err)
