"""A GPU held by a task of *another* pool is not free for this one.

Airflow subtracts a running task's slots from its own pool only. Before, the nvml source counted any
leased GPU of the host as "ours" (and the prometheus source any running task's GPUs), so a pool that
shares a host with another pool was sized one GPU too large for each GPU the other pool's tasks held.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.watermark.config import SourceSpec
from airflow_gpu_dag.watermark.nvml_source import NvmlSource
from airflow_gpu_dag.watermark.own_gpus import RunningTaskGpus
from airflow_gpu_dag.watermark.sources import build_source
from tests.unit.test_sources_ours import FakeNvml, _load


@pytest.fixture
def workers() -> Iterator[list[Any]]:
    """Real processes standing for CUDA loads."""
    started: list[Any] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[tuple[LeaseManager, FakeNvml]]:
    """GPUs 0, 1 are A100 (pool gpu_a100), 2, 3 are T4 (pool gpu_t4), on one host."""
    inventory = GpuInventory(
        (
            GpuDevice(0, "a100", 81920, uuid="GPU-0000"),
            GpuDevice(1, "a100", 81920, uuid="GPU-0001"),
            GpuDevice(2, "t4", 16384, uuid="GPU-0002"),
            GpuDevice(3, "t4", 16384, uuid="GPU-0003"),
        )
    )
    yield LeaseManager(LeaseSettings(lease_dir=tmp_path, poll_s=0.1), inventory), FakeNvml(4)


def _source(tmp_path: Path, nvml: FakeNvml, devices: list[int], pool: str | None) -> NvmlSource:
    return NvmlSource(
        min_free_memory=8000,
        max_utilization=10,
        devices=devices,
        nvml=nvml,
        lease_dir=str(tmp_path),
        pool=pool,
    )


def test_a_gpu_leased_by_another_pools_task_is_held_not_free(
    tmp_path: Path, host: tuple[LeaseManager, FakeNvml], workers: list[Any]
) -> None:
    manager, nvml = host
    # a task of pool gpu_a100 that names no GPU type is leased a T4 (best fit: the smallest GPU)
    lease = manager.acquire(GpuRequest(1), LeaseOwner("d", "r", "prep", pool="gpu_a100"))
    assert lease.devices == (2,)
    nvml.busy(2, _load(workers).pid)
    lease.register_process(workers[-1].pid)
    t4 = _source(tmp_path, nvml, [2, 3], "gpu_t4").read()
    assert t4.gpus == 1, t4.detail  # before: 2, and Airflow opened 2 slots on 1 free T4
    assert "gpu2 held by d.prep" in t4.detail and "of pool gpu_a100" in t4.detail
    a100 = _source(tmp_path, nvml, [0, 1, 2, 3], "gpu_a100").read()
    assert a100.gpus == 4 and "1 of them held by our tasks" in a100.detail  # its own lease counts
    unknown_pool = _source(tmp_path, nvml, [2, 3], None).read()
    assert unknown_pool.gpus == 2  # outside the controller (no pool named): every lease counts


def test_prometheus_counts_only_its_own_pools_running_tasks() -> None:
    running = [
        {"hostname": "h1", "pool": "gpu_a100", "pool_slots": 2, "executor_config": "{}"},
        {"hostname": "h1", "pool": "gpu_t4", "pool_slots": 1, "executor_config": "{}"},
    ]
    ours = RunningTaskGpus(list_running=lambda: running)
    assert ours.by_host() == {"h1": 3}
    assert ours.by_host("gpu_t4") == {"h1": 1} and ours.by_host("gpu_a100") == {"h1": 2}
    spec = SourceSpec("prometheus", {"url": "http://prom:9090"})

    class Client:
        def task_instances(self, pools: Any, states: Any) -> list[dict[str, Any]]:
            return running

    source: Any = build_source(spec, Client(), pool="gpu_t4")
    assert source.our_work() == {"h1": 1}


def test_the_pools_prometheus_sources_share_one_read_of_the_running_tasks() -> None:
    from airflow_gpu_dag.watermark.config import PoolSpec
    from airflow_gpu_dag.watermark.sources import build_sources

    calls: list[int] = []

    class Client:
        def task_instances(self, pools: Any, states: Any) -> list[dict[str, Any]]:
            calls.append(1)
            return [
                {"hostname": "h1", "pool": "gpu_a100", "pool_slots": 2, "executor_config": "{}"},
                {"hostname": "h1", "pool": "gpu_t4", "pool_slots": 1, "executor_config": "{}"},
            ]

    spec = SourceSpec("prometheus", {"url": "http://prom:9090"})
    sources: Any = build_sources([PoolSpec("gpu_a100", spec), PoolSpec("gpu_t4", spec)], Client())
    assert sources["gpu_a100"].our_work() == {"h1": 2} and sources["gpu_t4"].our_work() == {"h1": 1}
    assert len(calls) == 1  # one REST read for both pools in a tick
