"""Tests of ``airflow_gpu_dag.watermark.nvml_source``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.gpu.lease_view import HeldDevice
from airflow_gpu_dag.watermark import nvml_source
from airflow_gpu_dag.watermark.nvml_source import NvmlSource
from airflow_gpu_dag.watermark.sources import SourceError
from tests.unit.watermark.conftest import MIB, FakeNvml, N, _load, lease_manager


@pytest.mark.parametrize(("k", "j"), [(4, 0), (4, 2), (0, 3), (8, 0), (3, 5)])
def test_nvml_counts_gpus_of_our_leased_tasks_and_not_foreign_ones(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]], k: int, j: int
) -> None:
    """k GPUs busy with our leased tasks, j with a foreign process: capacity N - j."""
    manager = lease_manager(tmp_path)
    nvml = FakeNvml()
    leases = [manager.acquire(GpuRequest(1), LeaseOwner("train", "r1", f"t{i}")) for i in range(k)]
    for lease in leases:
        proc = _load(workers)
        lease.register_process(proc.pid)
        nvml.busy(lease.devices[0], proc.pid)
    free = [i for i in range(N) if i not in {lease.devices[0] for lease in leases}]
    for index in free[:j]:
        nvml.busy(index, _load(workers).pid)
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, lease_dir=str(tmp_path)).read()
    assert reading.gpus == N - j, reading.detail
    if k:
        assert f"{k} of them held by our tasks" in reading.detail
    # without the lease table every busy GPU is excluded: the double counting of issue #12
    blind = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, leases=False).read()
    assert blind.gpus == N - j - k


def test_a_child_of_the_lease_holder_is_ours(tmp_path: Path, workers: list[subprocess.Popen[bytes]]) -> None:
    """A CUDA process started by the task (a child of the lease holder, here this test process)
    counts as the lease's even when it was never registered."""
    manager = lease_manager(tmp_path)
    nvml = FakeNvml()
    lease = manager.acquire(GpuRequest(1), LeaseOwner("d", "r", "t"))
    nvml.busy(lease.devices[0], _load(workers).pid)
    source = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, lease_dir=str(tmp_path))
    assert source.read().gpus == N


def test_a_foreign_process_on_a_leased_gpu_is_judged_without_our_memory(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    manager = lease_manager(tmp_path)
    ours = manager.acquire(GpuRequest(1), LeaseOwner("d", "r", "ours"))
    worker = _load(workers)
    ours.register_process(worker.pid)
    stranger = subprocess.Popen(  # not a child of this process: start it through a shell that exits
        ["/bin/sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    foreign_pid = int(stranger.communicate(timeout=30)[0].decode().strip())
    try:
        nvml = FakeNvml()
        index = ours.devices[0]
        nvml.busy(index, worker.pid, used_mib=30000)
        nvml.busy(index, foreign_pid, used_mib=5000, util=50)  # small: room left without our memory
        source = NvmlSource(min_free_memory=40960, max_utilization=100, nvml=nvml, lease_dir=str(tmp_path))
        assert source.read().gpus == N
        nvml.busy(index, foreign_pid, used_mib=40000)  # now the stranger alone leaves too little
        reading = source.read()
        assert reading.gpus == N - 1
        assert f"foreign pid {foreign_pid} on a leased GPU" in reading.detail
    finally:
        os.kill(foreign_pid, 9)


def test_an_unreadable_lease_table_is_said_and_busy_gpus_are_excluded(tmp_path: Path) -> None:
    (tmp_path / "leases.json").write_text("{not json")
    nvml = FakeNvml()
    nvml.busy(0, 4242)
    reading = NvmlSource(min_free_memory=40960, nvml=nvml, lease_dir=str(tmp_path)).read()
    assert reading.gpus == N - 1 and "lease table unreadable" in reading.detail


MIB_sources = 1024 * 1024


# -- NVML -----------------------------------------------------------------------------------------
class FakeNvmlError(Exception):
    pass


class FakeNvml_sources:
    """The pynvml functions the source uses, over a list of fake GPUs."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self, gpus: list[dict[str, Any]], init_fails: bool = False) -> None:
        self.gpus = gpus
        self.init_fails = init_fails
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        gpu = self.gpus[index]
        if gpu.get("lost"):
            raise FakeNvmlError("GPU is lost")
        return gpu

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(free=handle["free_mib"] * MIB_sources, total=80 * 1024 * MIB_sources)

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle["util"], memory=0)

    def nvmlDeviceGetTotalEccErrors(self, handle: dict[str, Any], kind: int, counter: int) -> int:
        if "ecc" not in handle:
            raise FakeNvmlError("Not Supported")
        return int(handle["ecc"])


@pytest.mark.usefixtures("_own_lease_dir")
def test_nvml_counts_healthy_gpus_within_thresholds() -> None:
    nvml = FakeNvml_sources(
        [
            {"free_mib": 80000, "util": 0},
            {"free_mib": 80000, "util": 95},  # busy
            {"free_mib": 1000, "util": 0},  # memory taken
            {"free_mib": 80000, "util": 0, "lost": True},  # fell off the bus
            {"free_mib": 80000, "util": 0, "ecc": 3},  # uncorrected ECC errors
            {"free_mib": 40960, "util": 10, "ecc": 0},  # exactly at the thresholds
        ]
    )
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read()
    assert reading.gpus == 2
    assert "gpu1 util 95% > 10%" in reading.detail
    assert "gpu2 free 1000MiB" in reading.detail
    assert "gpu3 unhealthy (GPU is lost)" in reading.detail
    assert "gpu4 unhealthy (3 uncorrected ECC" in reading.detail
    assert nvml.shutdowns == 1


@pytest.mark.usefixtures("_own_lease_dir")
def test_nvml_device_filter_and_init_failure() -> None:
    gpus = [{"free_mib": 80000, "util": 0}] * 4
    assert NvmlSource(devices=[0, 2], nvml=FakeNvml_sources(gpus)).read().gpus == 2
    with pytest.raises(SourceError, match="NVML init failed: Driver Not Loaded"):
        NvmlSource(nvml=FakeNvml_sources(gpus, init_fails=True)).read()
    nvml = FakeNvml_sources(gpus)
    with pytest.raises(SourceError, match=r"devices \[7, 9\] are not on this host \(NVML sees 4 GPU"):
        NvmlSource(devices=[0, 7, 9], nvml=nvml).read()  # was "ok, 1 usable": a typo read as capacity
    assert nvml.shutdowns == 1


@pytest.fixture
def workers_sources_per_pool() -> Iterator[list[Any]]:
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
    tmp_path: Path, host: tuple[LeaseManager, FakeNvml], workers_sources_per_pool: list[Any]
) -> None:
    manager, nvml = host
    # a task of pool gpu_a100 that names no GPU type is leased a T4 (best fit: the smallest GPU)
    lease = manager.acquire(GpuRequest(1), LeaseOwner("d", "r", "prep", pool="gpu_a100"))
    assert lease.devices == (2,)
    nvml.busy(2, _load(workers_sources_per_pool).pid)
    lease.register_process(workers_sources_per_pool[-1].pid)
    t4 = _source(tmp_path, nvml, [2, 3], "gpu_t4").read()
    assert t4.gpus == 1, t4.detail  # before: 2, and Airflow opened 2 slots on 1 free T4
    assert "gpu2 held by d.prep" in t4.detail and "of pool gpu_a100" in t4.detail
    a100 = _source(tmp_path, nvml, [0, 1, 2, 3], "gpu_a100").read()
    assert a100.gpus == 4 and "1 of them held by our tasks" in a100.detail  # its own lease counts
    unknown_pool = _source(tmp_path, nvml, [2, 3], None).read()
    assert unknown_pool.gpus == 2  # outside the controller (no pool named): every lease counts


# -- direct tests: NVML failures, lease matching, process lists -------------------------------------
def _held(
    index: int,
    uuid: str | None = None,
    pool: str | None = None,
    pids: frozenset[int] = frozenset(),
    same_pidns: bool = True,
) -> HeldDevice:
    """One GPU of a live lease, as :func:`~airflow_gpu_dag.gpu.lease_view.held_devices` returns it."""
    return HeldDevice(
        index=index,
        uuid=uuid,
        lease_id=f"lease-{index}",
        owner=LeaseOwner("d", "r", f"t{index}", pool=pool),
        pids=pids,
        pgids=frozenset(),
        same_pidns=same_pidns,
    )


@pytest.fixture
def leases(monkeypatch: pytest.MonkeyPatch) -> list[HeldDevice]:
    """The lease table the source sees: append :class:`HeldDevice` entries (no table on disk)."""
    table: list[HeldDevice] = []
    monkeypatch.setattr(nvml_source, "held_devices", lambda lease_dir=None: list(table))
    return table


class GraphicsNvml(FakeNvml):
    """:class:`FakeNvml` that also lists graphics processes (``graphics[index]``)."""

    def __init__(self, count: int = N) -> None:
        super().__init__(count)
        self.graphics: dict[int, list[SimpleNamespace]] = {}

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: dict[str, Any]) -> list[SimpleNamespace]:
        return list(self.graphics.get(handle["index"], []))


class BrokenNvml(FakeNvml):
    """:class:`FakeNvml` whose calls can be made to fail one by one."""

    def __init__(self, count: int = N) -> None:
        super().__init__(count)
        self.fail: set[str] = set()
        self.ecc: dict[int, int] = {}
        self.lost: set[int] = set()
        self.inits = self.shutdowns = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1
        if "shutdown" in self.fail:
            raise RuntimeError("Uninitialized")

    def nvmlDeviceGetCount(self) -> int:
        if "count" in self.fail:
            raise RuntimeError("Driver/library version mismatch")
        return super().nvmlDeviceGetCount()

    def nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> bytes:
        if "uuid" in self.fail:
            raise RuntimeError("Not Supported")
        return super().nvmlDeviceGetUUID(handle)

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        if handle["index"] in self.lost:
            raise RuntimeError("GPU is lost")
        return super().nvmlDeviceGetMemoryInfo(handle)

    def nvmlDeviceGetTotalEccErrors(self, handle: dict[str, Any], kind: int, counter: int) -> int:
        return self.ecc.get(handle["index"], 0)


def test_pynvml_not_installed_is_a_source_error_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(SourceError, match=r"pynvml is not installed \(pip install nvidia-ml-py\)"):
        NvmlSource(leases=False).read()


def test_a_failing_device_count_is_a_source_error_and_nvml_is_shut_down() -> None:
    nvml = BrokenNvml()
    nvml.fail.add("count")
    with pytest.raises(SourceError, match="NVML device count failed: Driver/library version mismatch"):
        NvmlSource(nvml=nvml, leases=False).read()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_a_failing_shutdown_does_not_cost_the_reading() -> None:
    nvml = BrokenNvml(2)
    nvml.fail.add("shutdown")
    reading = NvmlSource(nvml=nvml, leases=False).read()
    assert reading.gpus == 2 and reading.detail == "nvml 2/2 usable"


def test_a_host_without_gpus_reads_zero_not_an_error() -> None:
    reading = NvmlSource(nvml=FakeNvml(0), leases=False).read()
    assert (reading.gpus, reading.detail) == (0, "nvml 0/0 usable")


def test_free_memory_is_judged_in_whole_mib() -> None:
    """One byte short of ``min_free_memory`` is short: free memory is rounded down to MiB."""
    exact = FakeNvml(1)
    exact.gpus[0]["free_mib"] = 40960
    short = FakeNvml(1)
    short.gpus[0]["free_mib"] = 40960 - 1 / MIB  # 40 GiB less one byte
    assert NvmlSource(min_free_memory=40960, nvml=exact, leases=False).read().gpus == 1
    reading = NvmlSource(min_free_memory=40960, nvml=short, leases=False).read()
    assert reading.gpus == 0 and "gpu0 free 40959MiB < 40960MiB" in reading.detail


def test_leases_off_never_reads_the_lease_table(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(lease_dir: Any = None) -> list[HeldDevice]:
        raise AssertionError("the lease table was read with leases=False")

    monkeypatch.setattr(nvml_source, "held_devices", unreadable)
    reading = NvmlSource(nvml=FakeNvml(2), leases=False).read()
    assert reading.gpus == 2 and "lease table" not in reading.detail


def test_the_lease_table_is_read_from_lease_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(nvml_source, "held_devices", lambda lease_dir=None: seen.append(lease_dir) or [])
    NvmlSource(nvml=FakeNvml(1), lease_dir=str(tmp_path)).read()
    NvmlSource(nvml=FakeNvml(1)).read()
    assert seen == [tmp_path, None]  # None: the table of [gpu_dag] lease_dir


def test_a_leased_gpu_counts_when_nvml_cannot_list_its_processes(leases: list[HeldDevice]) -> None:
    nvml = FakeNvml(2, list_processes=False)
    nvml.busy(0, os.getppid())  # a process that is not the lease's, but NVML does not say so
    leases.append(_held(0, "GPU-0000", pids=frozenset({os.getpid()})))
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read()
    assert reading.gpus == 2 and "1 of them held by our tasks" in reading.detail


def test_a_lease_of_another_pid_namespace_is_trusted(leases: list[HeldDevice]) -> None:
    """NVML reports host pids that a containerised controller cannot tell apart: the lease is trusted."""
    nvml = FakeNvml(2)
    nvml.busy(1, os.getppid())
    leases.append(_held(1, "GPU-0001", same_pidns=False))
    assert NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read().gpus == 2


def test_a_foreign_process_keeping_a_leased_gpu_busy_excludes_it(leases: list[HeldDevice]) -> None:
    nvml = FakeNvml(2)
    nvml.busy(0, os.getpid(), used_mib=1000, util=5)
    nvml.busy(0, os.getppid(), used_mib=1000, util=90)  # not ours: the thresholds apply
    leases.append(_held(0, "GPU-0000", pids=frozenset({os.getpid()})))
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read()
    assert reading.gpus == 1
    assert f"gpu0 util 90% > 10% (foreign pid {os.getppid()} on a leased GPU)" in reading.detail


def test_a_foreign_graphics_process_on_a_leased_gpu_is_seen(leases: list[HeldDevice]) -> None:
    nvml = GraphicsNvml(2)
    nvml.gpus[0]["free_mib"] = 1000
    nvml.graphics[0] = [SimpleNamespace(pid=os.getppid(), usedGpuMemory=79000 * MIB)]
    leases.append(_held(0, "GPU-0000", pids=frozenset({os.getpid()})))
    reading = NvmlSource(min_free_memory=40960, nvml=nvml).read()
    assert reading.gpus == 1 and f"foreign pid {os.getppid()} on a leased GPU" in reading.detail


def test_our_process_in_both_process_lists_keeps_its_memory(leases: list[HeldDevice]) -> None:
    """Our task's process has a compute and a graphics context; the graphics list does not report its
    memory (``usedGpuMemory`` None, as on drivers that cannot). Its 70 GiB must still be given back
    before the thresholds are applied for a small foreign process."""
    nvml = GraphicsNvml(2)
    nvml.busy(0, os.getpid(), used_mib=70000, util=5)
    nvml.busy(0, os.getppid(), used_mib=1000, util=5)
    nvml.graphics[0] = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=None)]
    leases.append(_held(0, "GPU-0000", pids=frozenset({os.getpid()})))
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read()
    assert reading.gpus == 2, reading.detail  # 80000 - 1000 MiB free without our process


def test_a_process_whose_memory_nvml_cannot_report_does_not_fail_the_reading(
    leases: list[HeldDevice],
) -> None:
    nvml = FakeNvml(1)
    nvml.gpus[0]["procs"].append(SimpleNamespace(pid=os.getppid(), usedGpuMemory=None))
    nvml.gpus[0]["util"] = 50
    leases.append(_held(0, "GPU-0000", pids=frozenset({os.getpid()})))
    reading = NvmlSource(max_utilization=10, nvml=nvml).read()
    assert reading.gpus == 0 and "util 50% > 10% (foreign pid" in reading.detail


def test_a_lease_is_matched_by_uuid_when_nvml_numbers_gpus_otherwise(leases: list[HeldDevice]) -> None:
    """The lease recorded GPU-0002 as index 5 (another numbering): the busy GPU 2 is the leased one."""
    nvml = FakeNvml(8)
    nvml.busy(2, os.getpid())
    leases.append(_held(5, "GPU-0002", pids=frozenset({os.getpid()})))
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read()
    assert reading.gpus == 8 and "1 of them held by our tasks" in reading.detail


def test_a_lease_without_uuid_or_a_gpu_without_one_is_matched_by_index(leases: list[HeldDevice]) -> None:
    nvml = BrokenNvml(2)
    nvml.busy(1, os.getpid())
    leases.append(_held(1, None, pids=frozenset({os.getpid()})))
    assert NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read().gpus == 2
    leases[:] = [_held(1, "GPU-0001", pids=frozenset({os.getpid()}))]
    nvml.fail.add("uuid")  # NVML cannot say the UUID: the index decides
    assert NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read().gpus == 2


def test_an_idle_gpu_leased_by_another_pool_is_not_free(leases: list[HeldDevice]) -> None:
    leases.append(_held(0, "GPU-0000", pool="gpu_t4"))
    reading = NvmlSource(nvml=FakeNvml(2), pool="gpu_a100").read()
    assert reading.gpus == 1
    assert "gpu0 held by d.t0 (run r, try None) of pool gpu_t4" in reading.detail


def test_a_lease_that_names_no_pool_is_this_pools(leases: list[HeldDevice]) -> None:
    nvml = FakeNvml(2)
    nvml.busy(0, os.getpid())
    leases.append(_held(0, "GPU-0000", pool=None, pids=frozenset({os.getpid()})))
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, pool="gpu_a100").read()
    assert reading.gpus == 2 and "1 of them held by our tasks" in reading.detail


def test_a_leased_gpu_with_uncorrected_ecc_errors_or_lost_does_not_count(leases: list[HeldDevice]) -> None:
    """Health comes first: our task's lease does not make a broken GPU usable."""
    nvml = BrokenNvml(3)
    nvml.ecc[0] = 2
    nvml.lost.add(1)
    leases.extend(_held(i, f"GPU-{i:04d}", pids=frozenset({os.getpid()})) for i in range(3))
    reading = NvmlSource(nvml=nvml).read()
    assert reading.gpus == 1 and "1 of them held by our tasks" in reading.detail
    assert "gpu0 unhealthy (2 uncorrected ECC errors)" in reading.detail
    assert "gpu1 unhealthy (GPU is lost)" in reading.detail
