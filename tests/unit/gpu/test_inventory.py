"""GPU inventory (static and NVML), pool naming and the GPU-seconds ledger."""

from __future__ import annotations

import json
import sys
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.core.model.pools import (
    DEFAULT_GPU_POOL,
    gpu_type_of_pool,
    is_gpu_pool,
    pool_for_gpu_type,
    pool_sizes_for_devices,
)
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu import inventory as inv
from airflow_gpu_dag.gpu.inventory import (
    MAX_INVENTORY_GPUS,
    GpuDevice,
    GpuInventory,
    InventoryError,
    InventoryUnavailable,
    gpu_type_from_name,
    load_inventory,
    parse_inventory,
)
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.gpu.usage import (
    UsageLedger,
    UsageRecord,
    gpu_seconds_by_dag_run,
    gpu_seconds_by_pool_day,
)


def _fake_pynvml(monkeypatch: pytest.MonkeyPatch, *, fail_init: bool = False) -> None:
    module = types.ModuleType("pynvml")

    class Mem:
        def __init__(self, total: int, free: int) -> None:
            self.total, self.free = total, free

    class Util:
        gpu = 37

    gib = 1024**3
    names = [b"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"]

    def init() -> None:
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def remapped(handle: int) -> tuple[int, int, int, int]:
        return (0, 0, 0, 1 if handle == 1 else 0)  # device 1: remapping failure

    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda h: names[h]  # type: ignore[attr-defined]
    module.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = lambda h: Mem(80 * gib, 70 * gib)  # type: ignore[attr-defined]
    module.nvmlDeviceGetUtilizationRates = lambda h: Util()  # type: ignore[attr-defined]
    module.nvmlDeviceGetRemappedRows = remapped  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", module)


# -- usage ledger -----------------------------------------------------------------------------------
def _ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


# -- static inventory -------------------------------------------------------------------------------
def test_shorthand_makes_indexed_devices_with_memory() -> None:
    inventory = parse_inventory("4xa100:80GiB")
    assert inventory.indices == [0, 1, 2, 3]
    assert inventory.types == {"a100"}
    assert {d.memory_total_mib for d in inventory.devices} == {80 * 1024}
    assert inventory.source == "static"


def test_shorthand_several_groups_and_decimal_memory() -> None:
    inventory = parse_inventory("2xa100:80G, 1xV100:16GiB, h100")
    assert [(d.index, d.gpu_type) for d in inventory.devices] == [
        (0, "a100"),
        (1, "a100"),
        (2, "v100"),
        (3, "h100"),
    ]
    assert inventory.device(0).memory_total_mib == 76294  # 80 GB (decimal) in MiB
    assert inventory.device(3).memory_total_mib is None  # unknown: not checked


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("4xa100:eighty", "eighty"),
        ("0xa100", "count of 0"),
        ("", "empty"),
        ("{not json", "JSON"),
        ('{"gpus": [{"index": 0}]}', "no 'type'"),
        ('{"gpus": [{"index": 0, "type": "a100"}, {"index": 0, "type": "a100"}]}', "unique"),
        ('{"gpus": [{"index": 0, "type": "a100", "colour": "red"}]}', "unknown keys"),
        ('{"gpus": "a100"}', "'gpus'"),
    ],
)
def test_bad_inventory_is_rejected_with_the_fix(spec: str, fragment: str) -> None:
    with pytest.raises(InventoryError) as err:
        parse_inventory(spec)
    assert fragment in str(err.value)
    assert "[gpu_dag] inventory" in str(err.value) or fragment == "eighty"


def test_json_inventory_with_explicit_fields() -> None:
    spec = {
        "gpus": [
            {"index": 3, "type": "A100", "memory": "80GiB", "uuid": "GPU-3"},
            {"index": 5, "name": "NVIDIA H100 80GB HBM3", "memory": 81559, "healthy": False},
        ]
    }
    inventory = parse_inventory(json.dumps(spec))
    assert inventory.indices == [3, 5]
    assert inventory.device(3).uuid == "GPU-3"
    assert inventory.device(5).gpu_type == "h100"
    assert not inventory.device(5).healthy
    assert not inventory.device(5).fits_now(None, None)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA GeForce RTX 4090", "rtx_4090"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA H200", "h200"),
    ],
)
def test_gpu_type_from_nvml_name(name: str, expected: str) -> None:
    assert gpu_type_from_name(name) == expected


def test_fit_checks_type_and_memory() -> None:
    inventory = parse_inventory("2xa100:80GiB,2xv100:16GiB")
    assert inventory.max_fitting(40 * 1024) == 2
    assert inventory.max_fitting(None, "v100") == 2
    assert inventory.why_impossible(2, 40 * 1024, "a100") is None
    assert "only 2" in (inventory.why_impossible(3, 40 * 1024) or "")
    assert "not in the inventory" in (inventory.why_impossible(1, None, "h100") or "")
    assert inventory.pool_sizes() == {"gpu_default": 4, "gpu_a100": 2, "gpu_v100": 2}


def test_live_free_memory_is_used_when_known() -> None:
    device = GpuDevice(index=0, gpu_type="a100", memory_total_mib=81920, memory_free_mib=1000)
    assert device.could_ever_fit(40960, "a100")
    assert not device.fits_now(40960, "a100")
    assert device.fits_now(500, None)


# -- selection --------------------------------------------------------------------------------------
def test_auto_falls_back_to_static_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_nvml() -> GpuInventory:
        raise InventoryUnavailable("NVML cannot be initialised: no driver")

    monkeypatch.setattr(inv, "nvml_inventory", no_nvml)
    assert load_inventory("auto", "2xa100:40GiB").count == 2
    with pytest.raises(InventoryUnavailable, match="no driver"):
        load_inventory("nvml", "2xa100:40GiB")
    with pytest.raises(InventoryUnavailable, match="no static inventory"):
        load_inventory("auto", "")


def test_auto_prefers_nvml_when_it_sees_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    real = GpuInventory((GpuDevice(0, "h100", 81559),), source="nvml")
    monkeypatch.setattr(inv, "nvml_inventory", lambda: real)
    assert load_inventory("auto", "4xa100").source == "nvml"
    assert load_inventory("static", "4xa100").count == 4


def test_inventory_from_configuration_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "3xl4:24GiB")
    inventory = load_inventory()
    assert (inventory.count, inventory.types) == (3, {"l4"})
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "magic")
    with pytest.raises(InventoryError, match="inventory_source"):
        load_inventory()


def test_nvml_inventory_reads_devices_and_health(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pynvml(monkeypatch)
    inventory = inv.nvml_inventory()
    assert inventory.source == "nvml"
    first, second = inventory.devices
    assert (first.index, first.gpu_type, first.uuid) == (0, "a100", "GPU-0")
    assert (first.memory_total_mib, first.memory_free_mib, first.utilization_pct) == (81920, 71680, 37.0)
    assert first.healthy and not second.healthy
    assert "remapping" in (second.health_reason or "")


def test_nvml_init_failure_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pynvml(monkeypatch, fail_init=True)
    with pytest.raises(InventoryUnavailable, match="Shared Library"):
        inv.nvml_inventory()


# -- pools ------------------------------------------------------------------------------------------
def test_pool_names() -> None:
    assert pool_for_gpu_type(None) == DEFAULT_GPU_POOL == "gpu_default"
    assert pool_for_gpu_type(" A100 ") == "gpu_a100"
    assert pool_for_gpu_type("RTX 4090") == "gpu_rtx_4090"
    assert gpu_type_of_pool("gpu_h100") == "h100"
    assert gpu_type_of_pool("gpu_default") is None
    assert gpu_type_of_pool("default_pool") is None
    assert is_gpu_pool("gpu_a100") and not is_gpu_pool("default_pool") and not is_gpu_pool("gpu_")
    assert pool_sizes_for_devices(["a100", "a100", "v100"]) == {
        "gpu_default": 3,
        "gpu_a100": 2,
        "gpu_v100": 1,
    }
    with pytest.raises(ValueError, match="letters or digits"):
        pool_for_gpu_type("--")


def test_ledger_sums_by_run_and_by_pool_day(tmp_path) -> None:
    ledger = UsageLedger(tmp_path / "usage.jsonl")
    ledger.append(
        UsageRecord(
            "d",
            "r1",
            "a",
            1,
            (0, 1),
            _ts("2026-11-29T23:00:00"),
            _ts("2026-11-30T01:00:00"),
            pool="gpu_default",
            lease_id="L1",
        )
    )
    ledger.append(
        UsageRecord(
            "d",
            "r1",
            "b",
            1,
            (2,),
            _ts("2026-11-30T02:00:00"),
            _ts("2026-11-30T02:30:00"),
            pool="gpu_a100",
            lease_id="L2",
        )
    )
    ledger.append(
        UsageRecord(
            "d",
            "r2",
            "a",
            1,
            (3,),
            _ts("2026-11-30T03:00:00"),
            _ts("2026-11-30T03:00:10"),
            pool="gpu_default",
            lease_id="L3",
        )
    )
    records = ledger.read()
    assert [r.gpu_seconds for r in records] == [14400.0, 1800.0, 10.0]
    assert gpu_seconds_by_dag_run(records) == {("d", "r1"): 16200.0, ("d", "r2"): 10.0}
    assert gpu_seconds_by_pool_day(records) == {
        ("gpu_default", "2026-11-29"): 7200.0,
        ("gpu_default", "2026-11-30"): 7210.0,
        ("gpu_a100", "2026-11-30"): 1800.0,
    }


def test_ledger_skips_torn_lines_and_duplicate_leases(tmp_path) -> None:
    path = tmp_path / "usage.jsonl"
    ledger = UsageLedger(path)
    record = UsageRecord("d", "r", "t", 1, (0,), 100.0, 160.0, lease_id="L1", outcome="success")
    ledger.append(record)
    ledger.append(UsageRecord("d", "r", "t", 1, (0,), 100.0, 150.0, lease_id="L1", outcome="reclaimed"))
    with path.open("a") as handle:
        handle.write('{"dag_id": "d", "start": 1')  # crash mid-write
    records = ledger.read()
    assert len(records) == 1
    assert records[0].outcome == "success" and records[0].gpu_seconds == 60.0
    assert json.loads(path.read_text().splitlines()[0])["gpu_seconds"] == 60.0


def test_a_worker_started_with_cuda_visible_devices_leases_only_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NVML lists every GPU of the host; before, a worker started with CUDA_VISIBLE_DEVICES=2,3 leased
    # GPUs 0 and 1 (another worker's) and replaced its own restriction in the task's environment.
    from airflow_gpu_dag.core.model.resources import GpuRequest
    from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory, InventoryError, visible_to
    from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseSettings

    host = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i}aaa-{i}") for i in range(4)), "nvml")
    assert visible_to(host, None) is host
    assert visible_to(host, "2,3").indices == [2, 3]
    assert visible_to(host, "GPU-3aaa,1").indices == [3, 1]  # a unique UUID prefix, any order
    assert visible_to(host, "").indices == []
    for bad, message in (
        ("MIG-1234", "names a MIG device"),
        ("7", "names no GPU"),
        ("GPU-", "more than one"),
    ):
        with pytest.raises(InventoryError, match=message):
            visible_to(host, bad)
    monkeypatch.setattr("airflow_gpu_dag.gpu.lease.load_inventory", lambda: host)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    manager = LeaseManager(LeaseSettings(lease_dir=tmp_path))
    lease = manager.acquire(GpuRequest(2))
    assert lease.devices == (2, 3) and lease.env()["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert manager.try_acquire(GpuRequest(1)) is None  # 0 and 1 are not this worker's


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("4xa100 80GiB", "put a colon before the memory: '4xa100:80GiB'"),  # was type 'a100_80gib', no memory
        (
            '{"gpus": [{"index": 0, "type": "a100", "healthy": "false"}]}',
            "must be true or false",
        ),  # was healthy
        ('{"gpus": [{"index": 0, "type": "a100", "utilization": "high"}]}', "must be a number"),  # ValueError
        ('{"gpus": [{"index": 0, "type": "!!"}]}', "has no letters or digits"),  # ValueError past the policy
    ],
)
def test_a_static_inventory_typo_is_an_inventory_error(spec: str, message: str) -> None:
    with pytest.raises(inv.InventoryError, match=message):
        parse_inventory(spec)


def test_a_gpu_type_of_several_words_still_parses() -> None:
    assert parse_inventory("2x rtx 4090:24GiB").describe() == "#0 rtx_4090 24GiB, #1 rtx_4090 24GiB"


# -- lease records that would free a live holder's devices -------------------------------------------
def _table_with(settings: LeaseSettings, **damage: Any) -> str:
    """A lease of GPU 0 held by this (live) process, with ``damage`` written over its record."""
    import json

    nvml = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i}") for i in range(2)), source="nvml")
    held = LeaseManager(settings, nvml).acquire(GpuRequest(1), LeaseOwner(task_id="a", dag_id="d"))
    table_path = settings.lease_dir / "leases.json"
    table = json.loads(table_path.read_text())
    table["leases"][held.lease_id].update(damage)
    table_path.write_text(json.dumps(table))
    return held.lease_id


# -- a lease directory whose lock file is writable but the directory is not --------------------------
_UNWRITABLE = """
import sys
from pathlib import Path
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseError, LeaseManager, LeaseOwner, LeaseSettings
m = LeaseManager(LeaseSettings(lease_dir=Path(sys.argv[1]), poll_s=0.05), parse_inventory("1xa100"))
try:
    m.acquire(GpuRequest(1), LeaseOwner(task_id="t", dag_id="d"), timeout=1)
except LeaseError as err:
    print("LeaseError", err)
"""


# -- two lease directories on one host ----------------------------------------------------------------
_ANNOUNCE = """
import sys
from pathlib import Path
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
settings = LeaseSettings(lease_dir=Path(sys.argv[1]), host_marker_dir=Path(sys.argv[2]), poll_s=0.05)
LeaseManager(settings, parse_inventory("1xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="a", dag_id="d"))
"""


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ({"uuids": "GPU-0"}, "'uuids' is not a list"),  # read as UUIDs 'G', 'P', ...: GPU-0 looked free
        ({"ttl_s": -1.0}, "'ttl_s' -1.0 is not a positive"),  # stale at once: a live holder's GPU freed
    ],
)
def test_a_lease_record_misread_as_free_devices_is_a_corrupt_table(
    tmp_path: Path, damage: dict[str, Any], reason: str
) -> None:
    from airflow_gpu_dag.gpu.lease import LeaseTableCorrupt

    settings = LeaseSettings(lease_dir=tmp_path / "leases", poll_s=0.05, wait_timeout_s=0.3)
    _table_with(settings, **damage)
    nvml = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i}") for i in range(2)), source="nvml")
    other = LeaseManager(settings, nvml)
    with pytest.raises(LeaseTableCorrupt, match="remove or repair") as err:
        other.try_acquire(GpuRequest(2), LeaseOwner(task_id="b", dag_id="d"))
    assert reason in str(err.value)


def test_a_lease_directory_that_cannot_be_written_names_the_fix(tmp_path: Path) -> None:
    # The lock file is shared (mode 666) but the directory belongs to another user: before, a bare
    # PermissionError from the table's temporary file, past the operators' `except LeaseError`.
    import os
    import shutil
    import subprocess
    import sys

    lease_dir = tmp_path / "leases"
    lease_dir.mkdir()
    (lease_dir / "lock").touch()
    os.chmod(lease_dir / "lock", 0o666)
    os.chmod(lease_dir, 0o555)
    command = [sys.executable, "-c", _UNWRITABLE, str(lease_dir)]
    if os.geteuid() == 0:  # root writes anywhere: run the worker without the override
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop CAP_DAC_OVERRIDE")
        drop = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", *command]
    try:
        worker = subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(lease_dir, 0o755)
    assert worker.returncode == 0, worker.stderr
    assert worker.stdout.startswith("LeaseError cannot write the GPU lease table"), worker.stdout
    assert (
        "[gpu_dag] lease_dir" in worker.stdout and "Fix: give the workers' user write access" in worker.stdout
    )


def test_a_worker_is_warned_when_another_worker_of_its_host_uses_another_lease_dir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Two workers of one host with different lease dirs each see only their own table and would both
    # hand out GPU 0, so each is warned of the other's dir.
    import logging
    import subprocess
    import sys

    markers = tmp_path / "markers"

    def worker(lease_dir: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _ANNOUNCE, str(tmp_path / lease_dir), str(markers)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stderr  # its log (Python's last-resort handler prints warnings there)

    assert "another worker" not in worker("leases-a")
    assert "another worker" not in worker("leases-a")  # the same directory: nothing to say

    other = LeaseSettings(lease_dir=tmp_path / "leases-b", host_marker_dir=markers, poll_s=0.05)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        LeaseManager(other, parse_inventory("1xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="c"))
    warning = caplog.text
    assert "another worker of this host" in warning and str(tmp_path / "leases-a") in warning, warning
    assert str(tmp_path / "leases-b") in warning and "Fix: set [gpu_dag] lease_dir" in warning
    assert str(tmp_path / "leases-b") in worker("leases-a")  # and the other way round


def test_a_static_inventory_of_an_absurd_gpu_count_is_refused_not_built() -> None:
    # "99999999999999999999xa100" is refused before one device object per GPU is built: the scheduler
    # (whose weights read the inventory) would hang until it ran out of memory.
    with pytest.raises(InventoryError, match=f"more than {MAX_INVENTORY_GPUS} GPUs"):
        parse_inventory("99999999999999999999xa100")
    with pytest.raises(InventoryError, match="more than"):
        parse_inventory(f"{MAX_INVENTORY_GPUS}xa100,1xh100")
    assert len(parse_inventory("8xa100:80GiB,8xh100").devices) == 16
