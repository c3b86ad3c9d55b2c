"""Leases across processes: 8 workers hammering a 4-GPU host, and holders killed with -9 or stopped."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings, process_alive

INVENTORY = "4xa100:80GiB"
WORKERS = 8
ROUNDS = 15


def _settings(lease_dir: Path, **overrides: float) -> LeaseSettings:
    values: dict[str, Any] = {
        "ttl_s": 60.0,
        "heartbeat_s": 1.0,
        "poll_s": 0.01,
        "wait_timeout_s": 120.0,
        **overrides,
    }
    return LeaseSettings(lease_dir=lease_dir, **values)


def _hammer(lease_dir: str, worker: int, log_path: str) -> None:
    """Acquire/hold/release in a loop; log each holding interval and check exclusivity directly."""
    rng = random.Random(worker)
    manager = LeaseManager(_settings(Path(lease_dir)), parse_inventory(INVENTORY))
    claims = Path(lease_dir) / "claims"
    with open(log_path, "w") as log:
        for round_ in range(ROUNDS):
            request = GpuRequest(rng.choice((1, 1, 2, 3)))
            lease = manager.acquire(request, LeaseOwner("hammer", "r", f"w{worker}", try_number=round_))
            start = time.time()
            overlap = []
            for device in lease.devices:  # O_EXCL marker: fails if another holder has the device now
                try:
                    os.close(os.open(claims / str(device), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    overlap.append(device)
            time.sleep(rng.uniform(0, 0.01))
            for device in lease.devices:
                if device not in overlap:
                    os.unlink(claims / str(device))
            end = time.time()
            lease.release()
            record = {"worker": worker, "devices": list(lease.devices), "count": request.count}
            log.write(json.dumps({**record, "start": start, "end": end, "overlap": overlap}) + "\n")


def _disjoint(intervals: list[tuple[float, float]]) -> bool:
    intervals.sort()
    return all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(intervals))


def test_eight_processes_never_share_a_device(tmp_path: Path) -> None:
    lease_dir = tmp_path / "leases"
    (lease_dir / "claims").mkdir(parents=True)
    ctx = multiprocessing.get_context("spawn")
    logs = [tmp_path / f"worker{i}.jsonl" for i in range(WORKERS)]
    procs = [ctx.Process(target=_hammer, args=(str(lease_dir), i, str(logs[i]))) for i in range(WORKERS)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0, f"worker exited with {proc.exitcode}"

    entries = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
    assert len(entries) == WORKERS * ROUNDS
    assert all(not e["overlap"] for e in entries), [e for e in entries if e["overlap"]]
    assert all(len(e["devices"]) == e["count"] and set(e["devices"]) <= {0, 1, 2, 3} for e in entries)
    for device in range(4):  # the workers' own view of holding intervals
        assert _disjoint([(e["start"], e["end"]) for e in entries if device in e["devices"]])

    manager = LeaseManager(_settings(lease_dir), parse_inventory(INVENTORY))
    records = manager.ledger.read()  # the ledger: start/end taken under the table lock
    assert len(records) == WORKERS * ROUNDS
    assert {r.outcome for r in records} == {"success"}
    for device in range(4):
        assert _disjoint([(r.start, r.end) for r in records if device in r.devices])
    events = sorted(
        [(r.start, len(r.devices)) for r in records] + [(r.end, -len(r.devices)) for r in records]
    )
    in_use = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        in_use += delta
        peak = max(peak, in_use)
    assert peak <= 4, "more GPUs leased at once than the host has"
    assert manager.leases() == []


_HOLDER = """
import sys, subprocess, time
from pathlib import Path
from typing import Any
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
ttl = float(sys.argv[2])
settings = LeaseSettings(lease_dir=Path(sys.argv[1]), ttl_s=ttl, heartbeat_s=ttl / 4, poll_s=0.05)
manager = LeaseManager(settings, parse_inventory("4xa100:80GiB"))
lease = manager.acquire(GpuRequest(4), LeaseOwner("d", "r", "holder", try_number=1))
lease.start_heartbeat(on_lost=lambda held: print("LOST", flush=True))
work = subprocess.Popen(["sleep", "300"], start_new_session=True)  # the GPU command
lease.register_process(work.pid)
print("READY", work.pid, flush=True)
time.sleep(300)
"""


def _start_holder(lease_dir: Path, ttl: float) -> tuple[subprocess.Popen[str], int]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(lease_dir), str(ttl)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    line = holder.stdout.readline().split()
    assert line and line[0] == "READY", f"holder did not start: {line}"
    return holder, int(line[1])


def _cleanup(holder: subprocess.Popen[str], work_pid: int) -> None:
    if holder.poll() is None:
        holder.kill()
    holder.wait()
    if process_alive(work_pid, None):
        os.kill(work_pid, signal.SIGKILL)


def test_holder_killed_with_sigkill_is_reclaimed_within_the_ttl(tmp_path: Path) -> None:
    ttl = 4.0
    lease_dir = tmp_path / "leases"
    manager = LeaseManager(_settings(lease_dir, ttl_s=ttl, poll_s=0.1), parse_inventory(INVENTORY))
    holder, work_pid = _start_holder(lease_dir, ttl)
    try:
        assert manager.try_acquire(GpuRequest(1)) is None  # all 4 held
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        lease = manager.acquire(GpuRequest(4), LeaseOwner("d", "r", "next"), timeout=ttl + 1)
        assert sorted(lease.devices) == [0, 1, 2, 3]
        deadline = time.monotonic() + 10
        while process_alive(work_pid, None) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_alive(work_pid, None), "the killed holder's GPU command still runs"
        (reclaimed,) = [r for r in manager.ledger.read() if r.outcome == "reclaimed"]
        assert reclaimed.task_id == "holder" and "is gone" in reclaimed.extra["reclaim_reason"]
    finally:
        _cleanup(holder, work_pid)


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_stopped_holder_loses_its_lease_after_the_ttl(tmp_path: Path) -> None:
    ttl = 2.0
    lease_dir = tmp_path / "leases"
    manager = LeaseManager(
        _settings(lease_dir, ttl_s=ttl, heartbeat_s=0.5, poll_s=0.1), parse_inventory(INVENTORY)
    )
    holder, work_pid = _start_holder(lease_dir, ttl)
    try:
        holder.send_signal(signal.SIGSTOP)  # alive, but its heartbeat stops
        lease = manager.acquire(GpuRequest(4), LeaseOwner("d", "r", "next"), timeout=ttl + 5)
        assert sorted(lease.devices) == [0, 1, 2, 3]
        (reclaimed,) = [r for r in manager.ledger.read() if r.outcome == "reclaimed"]
        assert "no heartbeat" in reclaimed.extra["reclaim_reason"]
        holder.send_signal(signal.SIGCONT)
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "LOST"  # the holder learns it lost the lease
        assert manager.try_acquire(GpuRequest(1)) is None  # and does not get it back
    finally:
        _cleanup(holder, work_pid)
