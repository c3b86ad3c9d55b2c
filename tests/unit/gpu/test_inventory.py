"""GPU inventory (static and NVML), pool naming and the GPU-seconds ledger."""

from __future__ import annotations

import functools
import json
import logging
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


# -- the shorthand: edge cases ------------------------------------------------------------------------
def test_the_shorthand_takes_star_and_capital_x_as_the_multiplier() -> None:
    assert parse_inventory("2*a100").indices == [0, 1]
    assert parse_inventory("3 X h100 : 80GiB").describe() == "#0 h100 80GiB, #1 h100 80GiB, #2 h100 80GiB"


def test_a_count_of_exactly_the_maximum_is_built() -> None:
    inventory = parse_inventory(f"{MAX_INVENTORY_GPUS}xa100")
    assert inventory.count == MAX_INVENTORY_GPUS and inventory.indices[-1] == MAX_INVENTORY_GPUS - 1


def test_a_gpu_count_too_long_to_read_is_an_inventory_error() -> None:
    with pytest.raises(InventoryError, match=f"more than {MAX_INVENTORY_GPUS} GPUs"):
        parse_inventory("9" * 5000 + "xa100")


@pytest.mark.parametrize(
    ("part", "fragment"),
    [
        ("2xa100:-1GiB", "'-1GiB' cannot be parsed"),
        ("2xa100:nanGiB", "'nanGiB' cannot be parsed"),
        ("2xa100:infGiB", "'infGiB' cannot be parsed"),
        ("2xa100:80", "has no unit; write '80MiB' or '80GiB'"),
        ("2xa100:80GiB:4", "cannot be parsed"),
        ("-2xa100", "cannot be parsed"),
        ("4\u00d7a100", "cannot be parsed"),  # the multiplication sign, not an x
    ],
)
def test_a_malformed_shorthand_part_is_refused_naming_the_part(part: str, fragment: str) -> None:
    with pytest.raises(InventoryError) as err:
        parse_inventory(f"1xh100, {part}")
    assert f"inventory part {part!r}" in str(err.value) and fragment in str(err.value)


def test_a_non_ascii_gpu_type_in_the_shorthand_is_refused_with_the_ascii_spelling() -> None:
    with pytest.raises(InventoryError, match=r"not ASCII.*write 'a100a'"):
        parse_inventory("2xa100ä:80GiB")


def test_a_shorthand_of_only_commas_is_refused_as_empty() -> None:
    """``""`` is refused as empty; ``" , "`` (what is left of a list whose items were deleted) is no
    better a description of the workers."""
    with pytest.raises(InventoryError, match="empty"):
        parse_inventory(" , ,")


# -- the JSON form: edge cases ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gpu", "fragment"),
    [
        ({"index": -1, "type": "a100"}, "GPU index -1 must be >= 0"),
        ({"index": 1.0, "type": "a100"}, "index 1.0 must be an integer"),
        ({"index": "0", "type": "a100"}, "index '0' must be an integer"),
        ({"index": True, "type": "a100"}, "index True must be an integer"),
        ({"type": "a100", "memory": -5}, "must be a finite size >= 0"),
        ({"type": "a100", "memory": 0}, "memory must be more than 0"),
        ({"type": "a100", "memory": "80GiB", "free_memory": "lots"}, "'lots' cannot be parsed"),
    ],
)
def test_a_malformed_json_gpu_is_refused_naming_what_is_wrong(gpu: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InventoryError, match=fragment):
        parse_inventory(json.dumps({"gpus": [gpu]}))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_a_json_memory_that_is_not_finite_is_refused(number: str) -> None:
    """Python's JSON reader takes NaN and Infinity: they must not become a device size."""
    for key in ("memory", "free_memory"):
        with pytest.raises(InventoryError, match=r"inventory GPU #0: GPU memory .* must be a finite size"):
            parse_inventory(f'{{"gpus": [{{"type": "a100", "{key}": {number}}}]}}')


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-5", "500"])
def test_a_utilization_that_is_no_percent_is_refused(number: str) -> None:
    with pytest.raises(InventoryError, match="utilization"):
        parse_inventory(f'{{"gpus": [{{"type": "a100", "utilization": {number}}}]}}')


@pytest.mark.parametrize(
    "gpu",
    [
        {"type": ["a100", "h100"]},  # was GPU type 'a100_h100'
        {"type": {"family": "a100"}},  # was 'family_a100'
        {"name": ["NVIDIA A100"]},  # was 'nvidia_a100'
    ],
)
def test_a_json_gpu_type_or_name_that_is_not_a_string_is_refused(gpu: dict[str, Any]) -> None:
    with pytest.raises(InventoryError, match="inventory GPU #0"):
        parse_inventory(json.dumps({"gpus": [gpu]}))


def test_json_gpus_must_be_a_list_of_objects() -> None:
    for spec in ("{}", '{"gpus": null}', '{"gpus": {"0": {"type": "a100"}}}'):
        with pytest.raises(InventoryError, match="must list GPUs under 'gpus'"):
            parse_inventory(spec)
    with pytest.raises(InventoryError, match="inventory GPU #1 must be an object"):
        parse_inventory('{"gpus": [{"type": "a100"}, "a100"]}')
    with pytest.raises(InventoryError, match="JSON cannot be parsed"):
        parse_inventory('{"gpus": []} and more')


def test_a_top_level_json_list_and_a_parsed_value_are_read_like_the_text() -> None:
    text = parse_inventory('[{"type": "a100", "memory": "40GiB"}, {"type": "h100"}]', host="n1")
    value = parse_inventory([{"type": "a100", "memory": "40GiB"}, {"type": "h100"}], host="n1")
    assert text == value and text.describe() == "#0 a100 40GiB, #1 h100" and text.host == "n1"


def test_duplicate_uuids_are_refused_and_empty_uuids_do_not_count() -> None:
    with pytest.raises(InventoryError, match=r"GPU UUIDs must be unique, got \['GPU-1', 'GPU-1'\]"):
        parse_inventory('[{"type": "a100", "uuid": "GPU-1"}, {"type": "a100", "uuid": "GPU-1"}]')
    inventory = parse_inventory('[{"type": "a100", "uuid": ""}, {"type": "a100", "uuid": ""}]')
    assert [d.uuid for d in inventory.devices] == [None, None]


def test_a_gpu_marked_unhealthy_says_so_and_never_fits() -> None:
    device = parse_inventory('[{"type": "a100", "memory": "80GiB", "healthy": false}]').device(0)
    assert device.health_reason == "marked unhealthy in the static inventory"
    assert device.could_ever_fit(1024, "a100") and not device.fits_now(None, None)
    assert device.describe() == "#0 a100 80GiB UNHEALTHY: marked unhealthy in the static inventory"


# -- devices and inventories --------------------------------------------------------------------------
def test_a_device_describes_its_free_memory_only_when_it_differs() -> None:
    assert GpuDevice(0, "a100", 81920, 81920).describe() == "#0 a100 80GiB"
    assert GpuDevice(1, "a100", 81920, 1024).describe() == "#1 a100 80GiB (free 1GiB)"
    assert GpuDevice(2, "t4").describe() == "#2 t4"
    assert GpuDevice(3, "t4", healthy=False).describe() == "#3 t4 UNHEALTHY: unknown"


def test_a_device_of_unknown_memory_fits_any_memory_request() -> None:
    """docs/gpu-tasks.md: a static device without memory is not checked against memory requests."""
    inventory = parse_inventory("2xa100")
    assert inventory.max_fitting(10**6, "a100") == 2
    assert inventory.why_impossible(2, 10**6, "A100") is None
    assert inventory.device(0).fits_now(10**6, None)


def test_why_impossible_on_an_empty_inventory_names_no_types() -> None:
    empty = GpuInventory(())
    assert empty.describe() == "no GPUs" and len(empty) == 0
    assert "(types here: none)" in (empty.why_impossible(1, None, "a100") or "")
    assert "only 0 such device(s) (inventory: no GPUs)" in (empty.why_impossible(1) or "")


def test_asking_for_an_index_that_is_not_there_names_the_indices_present() -> None:
    inventory = GpuInventory((GpuDevice(0, "a100"), GpuDevice(2, "a100")))
    with pytest.raises(KeyError, match=r"no GPU with index 1 in the inventory \(\[0, 2\]\)"):
        inventory.device(1)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA RTX A6000", "rtx_a6000"),
        ("Quadro RTX 8000", "rtx_8000"),
        ("NVIDIA A100 80GB PCIe", "a100"),
        ("  NVIDIA   H100  ", "h100"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("", "gpu"),
        ("NVIDIA Ä100", "gpu"),  # not ASCII: no type can be made of it
    ],
)
def test_gpu_type_from_more_nvml_names(name: str, expected: str) -> None:
    assert gpu_type_from_name(name) == expected


# -- visible_to -----------------------------------------------------------------------------------------
def _host_of_four() -> GpuInventory:
    return GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i}abc-{i}") for i in range(4)), "nvml")


def test_visible_devices_named_twice_spaced_or_in_another_case_are_one_device_each() -> None:
    host = _host_of_four()
    seen = inv.visible_to(host, " 2 , ,2, gpu-2ABC, 0 ")
    assert seen.indices == [2, 0]
    assert seen.source == "nvml" and seen.extra["cuda_visible_devices"] == " 2 , ,2, gpu-2ABC, 0 "


def test_a_visible_device_that_is_not_on_the_host_names_the_fix() -> None:
    host = GpuInventory((GpuDevice(0, "a100", uuid="GPU-a"), GpuDevice(2, "a100", uuid="GPU-b")), "nvml")
    with pytest.raises(InventoryError) as err:
        inv.visible_to(host, "0,1")
    message = str(err.value)
    assert "CUDA_VISIBLE_DEVICES='0,1': '1' names no GPU of this host (#0 a100, #2 a100)" in message
    assert "Fix: give the worker NVML indices or GPU UUIDs" in message and "unset the variable" in message


def test_a_mig_device_in_any_case_is_refused() -> None:
    with pytest.raises(InventoryError, match=r"names a MIG device.*Fix: start the worker with whole GPUs"):
        inv.visible_to(_host_of_four(), "0,mig-GPU-0abc/1/0")


# -- NVML -----------------------------------------------------------------------------------------------
def _nvml(monkeypatch: pytest.MonkeyPatch, calls: list[str] | None = None, **overrides: Any) -> None:
    """A fake ``pynvml`` with one healthy 80 GiB A100, ``overrides`` replacing its functions."""
    module = types.ModuleType("pynvml")
    record = calls if calls is not None else []
    functions: dict[str, Any] = {
        "nvmlInit": lambda: record.append("init"),
        "nvmlShutdown": lambda: record.append("shutdown"),
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: "NVIDIA A100-SXM4-80GB",
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}",
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(total=80 * 1024**3, free=80 * 1024**3),
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=0),
        "nvmlDeviceGetRemappedRows": lambda h: (0, 0, 0, 0),
    }
    functions.update(overrides)
    for name, function in functions.items():
        setattr(module, name, function)
    monkeypatch.setitem(sys.modules, "pynvml", module)


def _raise(message: str) -> Any:
    def fail(*args: object) -> Any:
        raise RuntimeError(message)

    return fail


def test_without_pynvml_nvml_is_unavailable_and_the_message_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(
        InventoryUnavailable, match=r"pip install nvidia-ml-py \(extra airflow-gpu-dag\[nvml\]\)"
    ):
        inv.nvml_inventory()


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"nvmlDeviceGetHandleByIndex": _raise("GPU is lost")}, "no handle: GPU is lost"),
        ({"nvmlDeviceGetName": _raise("Unknown Error")}, "identity unreadable (Unknown Error)"),
        ({"nvmlDeviceGetMemoryInfo": _raise("Unknown Error")}, "memory unreadable (Unknown Error)"),
        ({"nvmlDeviceGetUtilizationRates": _raise("GPU is lost")}, "utilisation unreadable (GPU is lost)"),
        ({"nvmlDeviceGetName": lambda h: b"\xff\xfe"}, "identity unreadable"),  # not UTF-8
    ],
)
def test_a_device_nvml_cannot_read_is_unhealthy_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, override: dict[str, Any], reason: str
) -> None:
    _nvml(monkeypatch, **override)
    (device,) = inv.nvml_inventory().devices
    assert not device.healthy and reason in (device.health_reason or "")
    assert not device.fits_now(None, None)


def test_utilisation_that_is_not_supported_leaves_the_device_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    _nvml(
        monkeypatch,
        nvmlDeviceGetUtilizationRates=_raise("Not Supported"),
        nvmlDeviceGetRemappedRows=_raise("Not Supported"),
    )
    (device,) = inv.nvml_inventory().devices
    assert device.healthy and device.utilization_pct is None and device.gpu_type == "a100"


def test_nvml_is_shut_down_even_when_the_device_count_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    _nvml(monkeypatch, calls, nvmlDeviceGetCount=_raise("GPU is lost"))
    with pytest.raises((RuntimeError, InventoryUnavailable)):
        inv.nvml_inventory()
    assert calls == ["init", "shutdown"]


def test_a_failing_device_count_is_nvml_unavailable_and_auto_falls_back_to_static(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nvml_inventory promises InventoryUnavailable when NVML cannot be used; ``auto`` then uses the
    static inventory. A driver that fails nvmlDeviceGetCount (a GPU fell off the bus) broke both."""
    _nvml(monkeypatch, nvmlDeviceGetCount=_raise("GPU is lost"))
    assert load_inventory("auto", "2xa100").source == "static"
    with pytest.raises(InventoryUnavailable, match="GPU is lost"):
        inv.nvml_inventory()


# -- choosing the source --------------------------------------------------------------------------------
def test_auto_when_nvml_sees_no_gpus_uses_the_static_inventory_or_says_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _nvml(monkeypatch, nvmlDeviceGetCount=lambda: 0)
    assert load_inventory("auto", "1xl4").types == {"l4"}
    assert load_inventory("NVML", "1xl4").source == "nvml"  # asked for NVML: its (empty) answer
    with pytest.raises(InventoryUnavailable, match=r"no GPUs found \(NVML sees no GPUs\) and no static"):
        load_inventory("auto", "")


def test_the_static_source_never_asks_nvml_and_records_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def no_nvml() -> GpuInventory:
        raise AssertionError("NVML must not be read")

    monkeypatch.setattr(inv, "nvml_inventory", no_nvml)
    inventory = load_inventory(" static ".strip().upper(), "2xa100")
    assert inventory.host == socket.gethostname() and inventory.count == 2
    with pytest.raises(InventoryError, match="inventory source 'cuda' must be one of auto, nvml, static"):
        load_inventory("cuda", "2xa100")


def test_the_configured_source_and_spec_are_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "  NVML ")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "   ")
    assert inv.configured_inventory_source() == "nvml"
    assert inv.configured_inventory_spec() is None
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", " 2xa100 ")
    assert inv.configured_inventory_source() == "auto"
    assert inv.configured_inventory_spec() == "2xa100"


def test_inventory_problem_names_the_option_that_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "auto")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:80GiB")
    assert inv.inventory_problem() is None
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:80XB")
    option, problem = inv.inventory_problem() or ("", "")
    assert option == "inventory" and problem.startswith("'4xa100:80XB' cannot be read: ")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "gpu")
    assert inv.inventory_problem() == ("inventory_source", "'gpu' is not one of auto, nvml, static")


# -- what DAG files are checked against ------------------------------------------------------------------
@pytest.fixture
def _fresh_parse_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parse-time inventory cache and config-error log of this test's own."""
    from airflow_gpu_dag import settings
    from airflow_gpu_dag.log_once import LogOnce

    monkeypatch.setattr(
        inv, "_parse_time_for", functools.lru_cache(maxsize=8)(inv._parse_time_for.__wrapped__)
    )
    monkeypatch.setattr(settings, "_config_errors", LogOnce(settings.log, level=logging.ERROR))
    settings.conf_get("inventory", None)  # Airflow configures its logging on first use: before caplog


@pytest.mark.usefixtures("_fresh_parse_time")
def test_at_parse_time_auto_is_the_static_inventory_and_nvml_is_never_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_nvml() -> GpuInventory:
        raise AssertionError("the parsing host's GPUs must not be read with auto")

    monkeypatch.setattr(inv, "nvml_inventory", no_nvml)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "auto")
    monkeypatch.delenv("AIRFLOW__GPU_DAG__INVENTORY", raising=False)
    assert inv.parse_time_inventory() is None
    assert inv.parse_time_inventory_summary() is None and inv.parse_time_pool_sizes() is None
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "2xa100:80GiB,1xh100")
    assert inv.parse_time_inventory() == parse_inventory("2xa100:80GiB,1xh100", host=inv.socket.gethostname())
    assert inv.parse_time_pool_sizes() == {"gpu_default": 3, "gpu_a100": 2, "gpu_h100": 1}


@pytest.mark.usefixtures("_fresh_parse_time")
def test_the_parse_time_pool_sizes_come_only_from_a_static_inventory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inv, "nvml_inventory", lambda: GpuInventory((GpuDevice(0, "t4"),), source="nvml"))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "nvml")
    assert inv.parse_time_inventory() is not None and inv.parse_time_pool_sizes() is None


@pytest.mark.usefixtures("_fresh_parse_time")
def test_an_unreadable_inventory_at_parse_time_is_logged_once_and_checked_against_none(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", '{"gpus": [{"type": "a100", "healthy": "no"}]}')
    with caplog.at_level(logging.ERROR):
        assert inv.parse_time_inventory() is None
        assert inv.parse_time_inventory_summary() is None
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "[gpu_dag] inventory" in errors[0] and "must be true or false" in errors[0]
    assert "AIRFLOW__GPU_DAG__INVENTORY" in errors[0]


@pytest.mark.usefixtures("_fresh_parse_time")
def test_parse_time_inventory_never_raises_even_on_an_unreadable_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both promise never to raise: a DAG file must not fail its import on the configuration."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "9" * 5000 + "xa100")
    assert inv.parse_time_inventory() is None
    assert (inv.inventory_problem() or ("",))[0] == "inventory"
