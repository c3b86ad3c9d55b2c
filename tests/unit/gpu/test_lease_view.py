"""Tests of ``airflow_gpu_dag.gpu.lease_view``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.lease import LeaseOwner
from airflow_gpu_dag.gpu.lease_view import held_devices
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
