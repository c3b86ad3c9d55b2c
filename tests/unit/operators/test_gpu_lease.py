"""Tests of ``airflow_gpu_dag.operators.gpu_lease``: the lease lifecycle of :class:`GpuLeaseMixin` called
directly (acquire, heartbeat, release, left to the reclaim, lost), on a static 4x A100 inventory in a
temporary lease directory. The operators built on it (their work, SIGTERM, timeouts) are tested in
``test_gpu.py``."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import (
    Lease,
    LeaseError,
    LeaseImpossible,
    LeaseLost,
    LeaseManager,
    LeaseOwner,
    LeaseSettings,
    LeaseTableCorrupt,
    LeaseTimeout,
)
from airflow_gpu_dag.gpu.usage import UsageLedger
from airflow_gpu_dag.operators import gpu_lease
from airflow_gpu_dag.operators.gpu_lease import GpuLeaseMixin
from tests.unit.operators.conftest import context

#: How the task of ``context("train")`` is named in lease messages.
TRAIN = "gpu_dag.train (run run1, try 1)"

LOG_NAME = "tests.unit.operators.test_gpu_lease"


class LeasingTask(GpuLeaseMixin):
    """The mixin alone, as an operator holds it: a GPU request, lease timeout, pool and logger, leasing
    from ``manager`` (None: the configured lease directory). The leases its heartbeat finds lost are
    collected in ``lost_leases`` and ``lost`` is set."""

    def __init__(
        self,
        manager: LeaseManager | None,
        request: GpuRequest | None = None,
        *,
        lease_timeout: float | None = None,
        pool: str = "gpu_default",
    ) -> None:
        self.manager = manager
        self.gpu_request = request or GpuRequest(1)
        self.lease_timeout = lease_timeout
        self.pool = pool
        self.log = logging.getLogger(LOG_NAME)
        self.lost = threading.Event()
        self.lost_leases: list[Lease] = []

    def _lease_manager(self) -> LeaseManager:
        return self.manager if self.manager is not None else super()._lease_manager()

    def _on_lease_lost(self, lease: Lease) -> None:
        self.lost_leases.append(lease)
        self.lost.set()


class GroupLeasingTask(LeasingTask):
    """A task whose work runs in this process's group (as a Python GPU task's does)."""

    def _lease_work_groups(self) -> tuple[int, ...]:
        return (os.getpgid(0),)


def _manager(lease_dir: Path, **settings: float) -> LeaseManager:
    """A lease manager of a 4x A100 static host in ``lease_dir``; waits time out after 30 s unless a
    task sets its own lease timeout."""
    values: dict[str, Any] = {"ttl_s": 60.0, "heartbeat_s": 5.0, "poll_s": 0.05, "wait_timeout_s": 30.0}
    return LeaseManager(
        LeaseSettings(lease_dir=lease_dir, **{**values, **settings}), parse_inventory("4xa100:80GiB")
    )


@pytest.fixture
def manager(tmp_path: Path) -> LeaseManager:
    return _manager(tmp_path / "leases")


@pytest.fixture
def tasks() -> Iterator[Callable[..., LeasingTask]]:
    """Makes ``LeasingTask`` objects; at the end their heartbeats are stopped and their leases given back."""
    made: list[LeasingTask] = []

    def make(*args: Any, cls: type[LeasingTask] = LeasingTask, **kwargs: Any) -> LeasingTask:
        made.append(cls(*args, **kwargs))
        return made[-1]

    yield make
    for task in made:
        if task._gpu_lease is not None:
            task._gpu_lease.stop_heartbeat()
            with contextlib.suppress(LeaseError):
                task._gpu_lease.release("failed")


@pytest.fixture
def forwarded(manager: LeaseManager, monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]] | None]:
    """Each time the mixin forwards this host's usage to a shared budget ledger: the leases ``manager``
    held then (None: its table could not be read)."""
    calls: list[list[dict[str, Any]] | None] = []

    def forward() -> None:
        try:
            calls.append(manager.leases())
        except LeaseError:  # a damaged table
            calls.append(None)

    monkeypatch.setattr(gpu_lease, "forward_this_host", forward)
    return calls


def _outcomes(manager: LeaseManager) -> list[str]:
    return [record.outcome for record in UsageLedger(manager.settings.usage_file).read()]


# -- acquire -------------------------------------------------------------------------------------------------
def test_acquiring_leases_the_request_for_the_task_instance_and_its_pool(
    manager: LeaseManager, tasks: Callable[..., LeasingTask]
) -> None:
    task = tasks(manager, GpuRequest(2, gpu_type="a100"), pool="gpu_a100")
    lease = task._acquire_gpu_lease(context("train"))
    assert task._gpu_lease is lease
    (record,) = manager.leases()
    assert record["lease_id"] == lease.lease_id
    assert record["devices"] == list(lease.devices) and len(lease.devices) == 2
    assert record["request"] == {"gpus": 2, "memory_mib": None, "gpu_type": "a100"}
    assert record["owner"] == {
        "dag_id": "gpu_dag",
        "run_id": "run1",
        "task_id": "train",
        "map_index": -1,
        "try_number": 1,
        "pool": "gpu_a100",
    }
    assert record["holder"]["pid"] == os.getpid()
    assert record["processes"] == []  # the mixin records no work groups unless the operator has some


def test_the_operators_work_groups_are_recorded_as_the_lease_is_taken(
    manager: LeaseManager, tasks: Callable[..., LeasingTask]
) -> None:
    """In the write that grants the devices: there is no moment the devices are leased and the work
    unknown to a reclaim."""
    task = tasks(manager, cls=GroupLeasingTask)
    task._acquire_gpu_lease(context("train"))
    (record,) = manager.leases()
    assert [process["pid"] for process in record["processes"]] == [os.getpgid(0)]


def test_the_acquired_lease_names_the_devices_the_work_is_handed(
    manager: LeaseManager, tasks: Callable[..., LeasingTask], caplog: pytest.LogCaptureFixture
) -> None:
    """The lease it returns carries the devices and their ``CUDA_VISIBLE_DEVICES`` (the operators put them
    in the work's environment, not the mixin), and the task log says which they are."""
    other = manager.acquire(GpuRequest(1))  # GPU taken by another task: never handed to this one
    task = tasks(manager, GpuRequest(3))
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    with caplog.at_level(logging.INFO, logger=LOG_NAME):
        lease = task._acquire_gpu_lease(context("train"))
    assert sorted((*lease.devices, *other.devices)) == [0, 1, 2, 3]
    assert lease.visible_devices == ",".join(str(device) for device in lease.devices)
    assert lease.env()["CUDA_VISIBLE_DEVICES"] == lease.visible_devices
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before  # the process's own environment is left alone
    assert (
        f"GPU lease {lease.lease_id}: devices {list(lease.devices)} "
        f"(CUDA_VISIBLE_DEVICES={lease.visible_devices}) for {TRAIN}"
    ) in caplog.messages
    other.release()


def test_without_its_own_manager_the_mixin_leases_from_the_configured_lease_directory(
    static_host: Path, tasks: Callable[..., LeasingTask]
) -> None:
    task = tasks(None, GpuRequest(4))
    lease = task._acquire_gpu_lease(context("train"))
    configured = LeaseManager(LeaseSettings.from_config())
    assert configured.dir == static_host
    assert [record["lease_id"] for record in configured.leases()] == [lease.lease_id]
    task._finish_gpu_lease("success")
    assert configured.leases() == []
    assert [record.outcome for record in UsageLedger(static_host / "usage.jsonl").read()] == ["success"]


# -- no GPU can be leased ------------------------------------------------------------------------------------
def _refused(task: LeasingTask) -> AirflowException:
    with pytest.raises(AirflowException) as raised:
        task._acquire_gpu_lease(context("train"))
    assert task._gpu_lease is None
    return raised.value


def test_a_request_the_host_can_never_hold_fails_at_once_naming_the_task_once(
    manager: LeaseManager, tasks: Callable[..., LeasingTask]
) -> None:
    """The lease error already names the task: it is not prefixed with it a second time."""
    err = _refused(tasks(manager, GpuRequest(8)))
    assert isinstance(err.__cause__, LeaseImpossible)  # at once: not a timeout after 30 s
    assert str(err).startswith(f"{TRAIN}: 8x GPU can never be leased")
    assert str(err).count(TRAIN) == 1
    assert "Fix:" in str(err)
    assert manager.leases() == []


def test_devices_held_past_the_tasks_lease_timeout_fail_it_naming_the_holder(
    manager: LeaseManager, tasks: Callable[..., LeasingTask]
) -> None:
    """The task's ``lease_timeout`` is the wait (not the host's 30-s default), and the error names the
    task once, the holder, and the fix."""
    holder = LeaseOwner(dag_id="other", run_id="r9", task_id="holder", try_number=2)
    other = manager.acquire(GpuRequest(4), holder)
    err = _refused(tasks(manager, GpuRequest(1), lease_timeout=0.2))
    assert isinstance(err.__cause__, LeaseTimeout)
    assert str(err).startswith(f"{TRAIN} waited 0s for 1 GPU(s)")
    assert str(err).count(TRAIN) == 1
    assert "other.holder (run r9, try 2)" in str(err) and "Fix:" in str(err)
    assert [record["lease_id"] for record in manager.leases()] == [other.lease_id]
    other.release()


def test_a_sigterm_stops_the_wait_for_devices(
    manager: LeaseManager, tasks: Callable[..., LeasingTask]
) -> None:
    """``on_kill`` sets ``_gpu_cancelled``: a task waiting for held devices stops at once instead of
    waiting out its timeout (30 s here)."""
    other = manager.acquire(GpuRequest(4))
    task = tasks(manager, GpuRequest(1))
    task._gpu_cancelled = True
    err = _refused(task)
    assert type(err.__cause__) is LeaseError
    assert str(err) == f"{TRAIN}: stopped while waiting for 1x GPU"
    other.release()


def test_a_lease_error_that_does_not_name_the_task_is_prefixed_with_it(
    manager: LeaseManager, tasks: Callable[..., LeasingTask]
) -> None:
    manager.dir.mkdir(parents=True)
    manager.table_path.write_text("not json")
    err = _refused(tasks(manager))
    assert isinstance(err.__cause__, LeaseTableCorrupt)
    assert str(err).startswith(f"{TRAIN}: GPU lease table {manager.table_path} cannot be read")


# -- release -------------------------------------------------------------------------------------------------
def test_finishing_with_success_releases_the_lease_once(
    manager: LeaseManager, tasks: Callable[..., LeasingTask], forwarded: list[list[dict[str, Any]] | None]
) -> None:
    task = tasks(manager, GpuRequest(2))
    lease = task._acquire_gpu_lease(context("train"))
    task._finish_gpu_lease("success")
    assert lease.state == "released"
    assert manager.leases() == []
    (record,) = UsageLedger(manager.settings.usage_file).read()
    assert (record.lease_id, record.devices, record.outcome, record.pool) == (
        lease.lease_id,
        lease.devices,
        "success",
        "gpu_default",
    )
    assert forwarded == [[]]  # a shared budget ledger is sent the usage once the lease is gone
    task._finish_gpu_lease("success")  # a second finish (on_kill after execute) records nothing more
    assert _outcomes(manager) == ["success"]


@pytest.mark.parametrize(
    ("outcome", "sigterm", "recorded"),
    [
        ("failed", False, "failed"),
        ("skipped", False, "skipped"),
        ("failed", True, "killed"),
        ("skipped", True, "killed"),
        ("success", True, "success"),
    ],
)
def test_finishing_records_the_outcome_and_a_sigterm_makes_an_unsuccessful_one_killed(
    manager: LeaseManager, tasks: Callable[..., LeasingTask], outcome: str, sigterm: bool, recorded: str
) -> None:
    """After ``on_kill`` the work ended because of the SIGTERM, unless it had already succeeded."""
    task = tasks(manager)
    task._acquire_gpu_lease(context("train"))
    task._gpu_cancelled = sigterm
    task._finish_gpu_lease(outcome)
    assert manager.leases() == []
    assert _outcomes(manager) == [recorded]


def test_without_a_lease_finishing_leaving_it_and_the_lost_check_do_nothing(
    manager: LeaseManager, tasks: Callable[..., LeasingTask], forwarded: list[list[dict[str, Any]] | None]
) -> None:
    """A task that never got its lease (refused, or killed while waiting) has nothing to give back."""
    task = tasks(manager)
    task._finish_gpu_lease("failed")
    task._leave_lease_to_reclaim()
    task._raise_if_lost()
    assert forwarded == []
    assert not manager.settings.usage_file.exists()


def test_a_release_that_fails_is_logged_and_the_lease_can_be_released_later(
    manager: LeaseManager,
    tasks: Callable[..., LeasingTask],
    forwarded: list[list[dict[str, Any]] | None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lease error at release (here a damaged table; in production a SIGTERM while this thread held the
    table lock) must not replace the task's own outcome: it is logged, and the lease stays held."""
    task = tasks(manager)
    lease = task._acquire_gpu_lease(context("train"))
    table = manager.table_path.read_text()
    manager.table_path.write_text("not json")
    with caplog.at_level(logging.WARNING, logger=LOG_NAME):
        task._finish_gpu_lease("success")
    assert any(
        re.fullmatch(
            rf"GPU lease {lease.lease_id} not released now \(.*cannot be read.*\); it is released or "
            "reclaimed later",
            message,
            re.DOTALL,
        )
        for message in caplog.messages
    ), caplog.messages
    assert lease.state == "held"
    assert forwarded == [None]  # forwarded all the same
    manager.table_path.write_text(table)  # repaired
    task._finish_gpu_lease("success")
    assert manager.leases() == []
    assert _outcomes(manager) == ["success"]


def test_leaving_the_lease_to_the_reclaim_keeps_it_and_stops_its_heartbeat(
    manager: LeaseManager, tasks: Callable[..., LeasingTask], caplog: pytest.LogCaptureFixture
) -> None:
    """Work that survived SIGKILL still uses the devices: the lease is neither released nor renewed, so it
    is reclaimed (and that work killed) once the task process is gone."""
    task = tasks(manager, GpuRequest(2))
    lease = task._acquire_gpu_lease(context("train"))
    heartbeat = lease._heartbeat
    assert heartbeat is not None and heartbeat.is_alive()
    with caplog.at_level(logging.ERROR, logger=LOG_NAME):
        task._leave_lease_to_reclaim()
    assert not heartbeat.is_alive()
    assert lease.state == "held"
    assert [record["lease_id"] for record in manager.leases()] == [lease.lease_id]
    assert not manager.settings.usage_file.exists()
    (message,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert f"lease {lease.lease_id} on devices {list(lease.devices)} is kept" in message
    assert "reclaimed once this task process exits" in message


# -- lost ----------------------------------------------------------------------------------------------------
def test_a_held_lease_is_not_lost(manager: LeaseManager, tasks: Callable[..., LeasingTask]) -> None:
    task = tasks(manager)
    task._acquire_gpu_lease(context("train"))
    task._raise_if_lost()
    assert not task.lost.is_set()


def test_a_lease_reclaimed_while_the_task_runs_is_reported_by_the_heartbeat_and_raises_lease_lost(
    tmp_path: Path, tasks: Callable[..., LeasingTask]
) -> None:
    """The heartbeat the mixin starts finds the lease gone from the table (another worker reclaimed it)
    and calls the operator's ``_on_lease_lost``; the task then fails with :class:`LeaseLost` naming the
    lease, its devices and the fix, and its release records nothing more."""
    manager = _manager(tmp_path / "leases", ttl_s=30.0, heartbeat_s=0.05)
    task = tasks(manager, GpuRequest(2))
    lease = task._acquire_gpu_lease(context("train"))
    other_worker = _manager(tmp_path / "leases")
    assert other_worker.release(lease.lease_id, outcome="reclaimed")  # gone from the table
    assert task.lost.wait(30), "the heartbeat never found the lease lost"
    assert task.lost_leases == [lease] and lease.lost
    with pytest.raises(LeaseLost) as raised:
        task._raise_if_lost()
    message = str(raised.value)
    assert message.startswith(
        f"GPU lease {lease.lease_id} on devices {list(lease.devices)} was reclaimed while the task ran"
    )
    assert "[gpu_dag] lease_ttl" in message
    task._finish_gpu_lease("failed")
    assert _outcomes(manager) == ["reclaimed"]
