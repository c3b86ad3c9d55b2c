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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_gpu_dag.core.resources import GpuRequest  # noqa: E402
from airflow_gpu_dag.gpu.inventory import InventoryUnavailable, nvml_inventory  # noqa: E402
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings  # noqa: E402

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
    finally:
        shutil.rmtree(lease_dir, ignore_errors=True)

    summary = {"passed": all(r["ok"] for r in results), "results": results, "inventory": inventory.to_dict()}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    print(json.dumps({"passed": summary["passed"], "checks": len(results)}))
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
