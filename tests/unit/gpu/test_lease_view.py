"""Tests of ``airflow_gpu_dag.gpu.lease_view``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.lease import LeaseOwner
from airflow_gpu_dag.gpu.lease_errors import LeaseTableCorrupt
from airflow_gpu_dag.gpu.lease_table import TABLE_FILE
from airflow_gpu_dag.gpu.lease_view import HeldDevice, held_devices, parent_pid, process_group
from airflow_gpu_dag.gpu.process import HostIdentity
from airflow_gpu_dag.watermark.nvml_source import NvmlSource
from tests.unit.watermark.conftest import FakeNvml, N, _load, lease_manager


def test_stale_leases_do_not_count_and_other_namespaces_are_trusted(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    holder = _load(workers)
    manager = lease_manager(tmp_path)
    lease = manager.try_acquire(GpuRequest(1), LeaseOwner("d", "r", "t"), holder_pid=holder.pid)
    assert lease is not None
    nvml = FakeNvml()
    stranger = _load(workers)  # a child of this test process, not of the lease's holder
    nvml.busy(lease.devices[0], stranger.pid)
    source = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, lease_dir=str(tmp_path))
    assert source.read().gpus == N - 1  # the stranger is not the lease's: foreign
    unseen = FakeNvml()
    unseen.busy(lease.devices[0], 999_999)  # a pid this process cannot see (a host pid in a container)
    assert NvmlSource(min_free_memory=40960, nvml=unseen, lease_dir=str(tmp_path)).read().gpus == N
    other = HostIdentity("another-host", None, "other-ns")
    assert [d.same_pidns for d in held_devices(tmp_path, identity=other)] == [False]
    nvml_blind = FakeNvml(list_processes=False)
    nvml_blind.busy(lease.devices[0], stranger.pid)
    blind = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml_blind, lease_dir=str(tmp_path))
    assert blind.read().gpus == N  # processes cannot be listed: the lease is trusted
    holder.kill()
    holder.wait(10)
    assert held_devices(tmp_path) == []  # holder gone: stale, not ours any more
    assert source.read().gpus == N - 1


# -- held_devices, HeldDevice, parent_pid, process_group called directly -----------------------------
#: Above Linux's largest pid_max (2**22): no process ever has it.
DEAD_PID = 2**22 + 7


ME = HostIdentity.current()


def _write(lease_dir: Path, leases: dict[str, Any]) -> None:
    lease_dir.mkdir(parents=True, exist_ok=True)
    (lease_dir / TABLE_FILE).write_text(json.dumps({"version": 1, "leases": leases}))


def _lease(lease_id: str, holder: dict[str, Any], **fields: Any) -> dict[str, Any]:
    now = time.time()
    return {
        "lease_id": lease_id,
        "devices": [0],
        "holder": holder,
        "acquired_at": now,
        "heartbeat_at": now,
        "heartbeat_mono": time.monotonic(),
        **fields,
    }


def _device(pids: Iterable[int] = (), pgids: Iterable[int] = (), same_pidns: bool = True) -> HeldDevice:
    return HeldDevice(0, None, "a", LeaseOwner(), frozenset(pids), frozenset(pgids), same_pidns)


def test_without_a_table_nothing_is_held_and_the_lease_directory_is_not_created(tmp_path: Path) -> None:
    assert held_devices(tmp_path / "leases") == []
    assert not (tmp_path / "leases").exists()


def test_every_device_of_a_live_lease_is_held_with_its_uuid_owner_and_recorded_processes(
    tmp_path: Path,
) -> None:
    owner = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": 3, "try_number": 1, "pool": "gpu"}
    processes = [{"pid": 4242, "start": "1", "pgid": 4242}, {"pid": 4343, "start": None, "pgid": None}]
    record = _lease(
        "a", ME.holder(os.getpid()), devices=[2, 0], uuids=["GPU-2"], owner=owner, processes=processes
    )
    _write(tmp_path, {"a": record})
    expected_owner = LeaseOwner("d", "r", "t", map_index=3, try_number=1, pool="gpu")
    pids, pgids = frozenset({os.getpid(), 4242, 4343}), frozenset({4242})
    assert held_devices(tmp_path) == [  # in the lease's order of devices; a missing UUID is None
        HeldDevice(2, "GPU-2", "a", expected_owner, pids, pgids, same_pidns=True),
        HeldDevice(0, None, "a", expected_owner, pids, pgids, same_pidns=True),
    ]


def test_stale_and_reclaiming_leases_are_skipped_and_left_in_the_table_for_the_workers(
    tmp_path: Path,
) -> None:
    """The view writes nothing: reclaiming (and the usage record) stays the workers' job."""
    dead = {**ME.holder(os.getpid()), "pid": DEAD_PID, "start": "1"}
    remote = {"pid": 7, "start": "1", "host": "another-host", "boot_id": None, "pidns": None}
    leases = {
        "dead": _lease("dead", dead, devices=[0]),
        "live": _lease("live", ME.holder(os.getpid()), devices=[1]),
        "reclaiming": _lease(
            "reclaiming", ME.holder(os.getpid()), devices=[2], reclaim={"reason": "no heartbeat"}
        ),
        "expired": _lease("expired", remote, devices=[3], heartbeat_at=time.time() - 1000, ttl_s=60),
    }
    _write(tmp_path, leases)
    before = (tmp_path / TABLE_FILE).read_bytes()
    assert [(d.lease_id, d.index) for d in held_devices(tmp_path)] == [("live", 1)]
    assert (tmp_path / TABLE_FILE).read_bytes() == before
    assert not (tmp_path / "usage.jsonl").exists()


def test_a_lease_of_another_host_is_held_until_now_passes_its_ttl(tmp_path: Path) -> None:
    viewer = HostIdentity("viewer-host", "viewer-boot", "1")
    holder = {"pid": 7, "start": "1", "host": "gpu-01", "boot_id": "b", "pidns": "1"}
    _write(tmp_path, {"a": _lease("a", holder, heartbeat_at=1000.0, ttl_s=120)})
    (device,) = held_devices(tmp_path, identity=viewer, now=1100.0)
    assert device.lease_id == "a" and device.same_pidns is False
    assert device.owns(os.getpid()) is None  # its pids mean other processes here
    assert held_devices(tmp_path, identity=viewer, now=1200.0) == []


def test_a_lease_of_another_pid_namespace_is_held_but_cannot_say_whose_a_process_is(tmp_path: Path) -> None:
    """A holder in another container: judged by its heartbeat only, its pids not compared with ours."""
    holder = {**ME.holder(os.getpid()), "pid": DEAD_PID, "start": "1", "pidns": "another-namespace"}
    _write(tmp_path, {"a": _lease("a", holder)})
    (device,) = held_devices(tmp_path)
    assert device.same_pidns is False and device.owns(DEAD_PID) is None


def test_the_configured_lease_directory_is_read_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "configured"))
    _write(tmp_path / "configured", {"a": _lease("a", ME.holder(os.getpid()), devices=[5])})
    assert [d.index for d in held_devices()] == [5]


def test_a_table_that_cannot_be_read_is_a_corrupt_table(tmp_path: Path) -> None:
    tmp_path.joinpath(TABLE_FILE).write_text('{"version": 1, "leases": {"a": ')
    with pytest.raises(LeaseTableCorrupt, match="remove or repair"):
        held_devices(tmp_path)


def test_a_device_describes_its_gpu_and_owner() -> None:
    device = HeldDevice(3, None, "a", LeaseOwner("d", "r", "t", try_number=2), frozenset(), frozenset(), True)
    assert device.describe() == "gpu3 leased to d.t (run r, try 2)"


def test_a_recorded_process_owns_the_device_and_another_namespace_cannot_tell() -> None:
    assert _device(pids={os.getpid()}).owns(os.getpid()) is True
    assert _device(pids={os.getpid()}, same_pidns=False).owns(os.getpid()) is None


def test_a_pid_this_process_cannot_see_is_unknown_not_foreign() -> None:
    """NVML in a container without the host's pid namespace reports host pids."""
    assert _device(pids={os.getpid()}).owns(DEAD_PID) is None


def test_a_process_in_a_recorded_group_owns_the_device(workers: list[subprocess.Popen[bytes]]) -> None:
    command = subprocess.Popen(["sleep", "120"], start_new_session=True)  # a bash command's session
    workers.append(command)
    assert _device(pgids={command.pid}).owns(command.pid) is True
    assert _device(pgids={os.getpgid(0)}).owns(command.pid) is False  # left this process's group


def test_a_descendant_of_a_recorded_process_owns_the_device_within_the_ancestry_depth(
    workers: list[subprocess.Popen[bytes]],
) -> None:
    child = subprocess.Popen(["sleep", "120"])
    workers.append(child)
    assert _device(pids={os.getpid()}).owns(child.pid) is True
    assert _device(pids={os.getpid()}).owns(child.pid, ancestry_depth=0) is False


def test_a_process_unrelated_to_the_lease_does_not_own_the_device() -> None:
    assert _device(pids={DEAD_PID}).owns(os.getpid()) is False


def test_parent_pid_and_process_group(workers: list[subprocess.Popen[bytes]]) -> None:
    child = subprocess.Popen(["sleep", "120"], start_new_session=True)
    workers.append(child)
    assert parent_pid(child.pid) == os.getpid() and parent_pid(os.getpid()) == os.getppid()
    assert process_group(child.pid) == child.pid and process_group(os.getpid()) == os.getpgid(0)
    assert parent_pid(DEAD_PID) is None and process_group(DEAD_PID) is None
