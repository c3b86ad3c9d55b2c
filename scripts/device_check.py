#!/usr/bin/env python
"""Check the local-GPU support on a real GPU machine (a few seconds; needs an NVIDIA driver).

    .venv/bin/python scripts/device_check.py [--json out.json]

1. NVML inventory (airflow_gpu_dag.gpu.inventory.nvml_inventory) matches ``nvidia-smi``: same
   count, and per index the same UUID, name and total memory.
2. A leased subprocess sees only its GPU: lease one device (private lease directory), start a child
   with the lease's environment, and in the child ask the CUDA driver (libcuda through ctypes, no
   framework needed) how many devices it sees and their PCI bus id: exactly one, the leased one.
3. With two or more GPUs: two leases held at once get different devices, and each child sees
   only its own.
4. Capacity counts our own work (issue #12): the ``nvml`` capacity source with a free-memory
   threshold, over this host's real GPUs and a private lease table. A child holding a lease runs a
   CUDA load (a context and a large allocation through libcuda): the pool does not shrink, while the
   same source without the lease table does (the load is visible). A foreign process (no lease)
   allocating on another GPU (on the leased one when there is only one GPU) shrinks it by one.

Prints one line per check and a JSON summary; exit status 0 when every check passed, 1 otherwise,
2 when there is no GPU/driver here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_gpu_dag.core.model.resources import GpuRequest  # noqa: E402
from airflow_gpu_dag.gpu.inventory import InventoryUnavailable, nvml_inventory  # noqa: E402
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings  # noqa: E402
from airflow_gpu_dag.watermark.nvml_source import NvmlSource  # noqa: E402

#: Run in the child: what the CUDA driver shows under the inherited CUDA_VISIBLE_DEVICES.
CHILD = r"""
import ctypes, json, os
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit failed"
count = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
buses = []
for i in range(count.value):
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), i) == 0
    buf = ctypes.create_string_buffer(64)
    assert cuda.cuDeviceGetPCIBusId(buf, 64, dev) == 0
    buses.append(buf.value.decode().lower())
print(json.dumps({"count": count.value, "pci_bus_ids": buses,
                  "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}))
"""


#: Run in a child: a CUDA load on the first visible GPU (a context and ``sys.argv[1]`` MiB allocated),
#: held until the child is killed. Prints "ready" once the memory is allocated.
CUDA_LOAD = r"""
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit failed"
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0, "cuCtxCreate failed"
rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(sys.argv[1]) * 1024 * 1024))
assert rc == 0, f"cuMemAlloc failed: {rc}"
import os
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(1)
"""


_children: dict[int, subprocess.Popen[str]] = {}


def start_load(env: dict[str, str], mib: int, detached: bool = False) -> int:
    """Start a child holding ``mib`` MiB on the first GPU ``env`` makes visible; returns its pid once
    the memory is allocated. ``detached``: through ``setsid -f``, so the load is no descendant of this
    process (which holds the leases): a foreign process."""
    argv = [sys.executable, "-c", CUDA_LOAD, str(mib)]
    proc = subprocess.Popen(
        ["setsid", "-f", *argv] if detached else argv,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    words = (proc.stdout.readline() if proc.stdout else "").split()
    if not words or words[0] != "ready":
        proc.kill()
        detail = proc.stderr.read()[-500:] if proc.stderr else ""
        raise RuntimeError(f"CUDA load did not start: {' '.join(words)} {detail}")
    if detached:
        proc.wait(30)  # setsid has forked the load and exited
    else:
        _children[int(words[1])] = proc
    return int(words[1])


def stop(pid: int | None) -> None:
    """Kill a load started by :func:`start_load` (by its pid)."""
    if pid is None:
        return
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        return
    child = _children.pop(pid, None)
    if child is not None:
        child.wait(30)
        return
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.1)


def capacity_check(check: Any, inventory: Any, lease_dir: Path) -> None:
    """Check 4: a leased CUDA load does not shrink the nvml source's capacity; a foreign one does."""
    free = {d.index: d.memory_free_mib or d.memory_total_mib or 0 for d in inventory.devices}
    load_mib = max(1024, min(16384, min(free.values()) // 3))
    threshold = min(free.values()) - load_mib // 2  # idle GPUs pass, one holding the load does not
    manager = LeaseManager(LeaseSettings(lease_dir=lease_dir, poll_s=0.1, wait_timeout_s=10), inventory)
    source = NvmlSource(min_free_memory=threshold, lease_dir=str(lease_dir))
    blind = NvmlSource(min_free_memory=threshold, leases=False)
    baseline = source.read()
    check("capacity baseline", baseline.gpus == len(inventory.devices), baseline.detail)
    lease = manager.acquire(GpuRequest(1), LeaseOwner(dag_id="device_check", task_id="ours"))
    ours = foreign = None
    try:
        ours = start_load(lease.env(), load_mib)
        lease.register_process(ours)
        time.sleep(2)
        with_lease, without = source.read(), blind.read()
        check(
            "leased CUDA load keeps the pool",
            with_lease.gpus == baseline.gpus and without.gpus == baseline.gpus - 1,
            {"with leases": with_lease.detail, "without the lease table": without.detail},
        )
        others = [d.index for d in inventory.devices if d.index not in lease.devices]
        target = others[0] if others else lease.devices[0]
        visible = {"CUDA_VISIBLE_DEVICES": str(target), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        foreign = start_load(visible, load_mib, detached=True)
        time.sleep(2)
        reading = source.read()
        check(
            f"foreign CUDA load on gpu{target} shrinks the pool",
            reading.gpus == baseline.gpus - 1,
            {"reading": reading.detail, "same GPU as the lease": not others},
        )
    finally:
        stop(foreign)
        stop(ours)
        lease.release()


def _norm_bus(bus: str) -> str:
    """NVML gives ``00000000:3B:00.0``, CUDA ``0000:3b:00.0``: compare the last 12 characters."""
    return bus.lower()[-12:]


def nvml_pci_buses() -> dict[int, str]:
    import pynvml

    pynvml.nvmlInit()
    try:
        out = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            bus = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId
            out[i] = bus.decode() if isinstance(bus, bytes) else str(bus)
        return out
    finally:
        pynvml.nvmlShutdown()


def nvidia_smi() -> list[dict[str, Any]]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    rows = []
    for line in out.strip().splitlines():
        index, uuid, name, memory = (part.strip() for part in line.split(","))
        rows.append({"index": int(index), "uuid": uuid, "name": name, "memory_mib": int(memory)})
    return rows


def child_view(env: dict[str, str]) -> dict[str, Any]:
    full = {**os.environ, **env}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=full, capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the summary here as well")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: Any) -> None:
        results.append({"check": name, "ok": bool(ok), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

    try:
        inventory = nvml_inventory()
    except InventoryUnavailable as err:
        print(f"SKIP no NVML here: {err}")
        return 2
    smi = nvidia_smi()
    check(
        "count", len(inventory.devices) == len(smi), f"nvml {len(inventory.devices)} vs nvidia-smi {len(smi)}"
    )
    for row in smi:
        dev = inventory.device(row["index"])
        same = (
            dev.uuid == row["uuid"]
            and dev.name == row["name"]
            and dev.memory_total_mib is not None
            and abs(dev.memory_total_mib - row["memory_mib"]) <= 1
        )
        check(f"device {row['index']}", same, {"nvml": dev.to_dict(), "nvidia-smi": row})
    check("health", all(d.healthy for d in inventory.devices), [d.describe() for d in inventory.devices])

    buses = nvml_pci_buses()
    lease_dir = Path(tempfile.mkdtemp(prefix="gpu-dag-device-check-"))
    try:
        manager = LeaseManager(LeaseSettings(lease_dir=lease_dir, poll_s=0.1, wait_timeout_s=10), inventory)
        count = min(2, len(inventory.devices))
        leases = [manager.acquire(GpuRequest(1), LeaseOwner(task_id=f"check{i}")) for i in range(count)]
        devices = [lease.devices[0] for lease in leases]
        check("leases disjoint", len(set(devices)) == len(devices), devices)
        for lease in leases:
            view = child_view(lease.env())
            expected = _norm_bus(buses[lease.devices[0]])
            ok = view["count"] == 1 and [_norm_bus(b) for b in view["pci_bus_ids"]] == [expected]
            check(f"child of lease {lease.devices}", ok, {"child": view, "expected_pci_bus": expected})
        for lease in leases:
            lease.release()
        check("ledger", len(manager.ledger.read()) == count, [r.devices for r in manager.ledger.read()])
        capacity_check(check, nvml_inventory(), lease_dir / "capacity")
    finally:
        shutil.rmtree(lease_dir, ignore_errors=True)

    summary = {"passed": all(r["ok"] for r in results), "results": results, "inventory": inventory.to_dict()}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    print(json.dumps({"passed": summary["passed"], "checks": len(results)}))
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
