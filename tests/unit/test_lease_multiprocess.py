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


# -- a GPU task process killed with -9 while the processes it started run on ---------------------------
#: A GPU task process as Airflow's Task SDK runs one: the supervisor forks it into a process group of its
#: own (``setpgid``); here ``start_new_session=True`` does the same. Its work writes the pids of the task
#: process and of the processes it started to ``$WORK/pids.json``, then keeps running.
_TASK = """
import json, multiprocessing, os, signal, subprocess, sys, time
from types import SimpleNamespace
kind, work = sys.argv[1], sys.argv[2]

def started(*children):
    with open(os.path.join(work, "pids.tmp"), "w") as handle:
        json.dump({"task": os.getpid(), "children": list(children)}, handle)
    os.replace(os.path.join(work, "pids.tmp"), os.path.join(work, "pids.json"))

def train():
    # a trainer (torchrun, a DataLoader worker): one started with exec, one forked
    trainer = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    forked = multiprocessing.get_context("fork").Process(target=time.sleep, args=(300,), daemon=False)
    forked.start()
    started(trainer.pid, forked.pid)
    time.sleep(300)

ti = SimpleNamespace(dag_id="d", run_id="r", task_id="victim", map_index=-1, try_number=1)
context = {"ti": ti, "task_instance": ti}
if kind == "python":
    from airflow_gpu_dag.operators.gpu import GpuPythonOperator
    op = GpuPythonOperator(task_id="victim", python_callable=train, gpus=4)
elif kind == "decorator":
    from airflow.sdk import DAG
    from airflow_gpu_dag.decorators.gpu import gpu_task
    with DAG("d", schedule=None):
        op = gpu_task(gpus=4)(train)().operator
else:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator
    command = f"echo $$ > {work}/command.pid; exec sleep 300"
    op = GpuBashOperator(task_id="victim", bash_command=command, gpus=4)
    if kind == "bash":
        register = op._register_work_process
        def register_then_report(pid):
            register(pid)
            started(pid)
        op._register_work_process = register_then_report
    else:  # killed in the instant between starting its command and recording it in the lease
        def killed_before_recording(pid):
            started(pid)
            os.kill(os.getpid(), signal.SIGKILL)
        op._register_work_process = killed_before_recording
op.execute(context)
"""


def _task_env(lease_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW__GPU_DAG__INVENTORY_SOURCE": "static",
        "AIRFLOW__GPU_DAG__INVENTORY": INVENTORY,
        "AIRFLOW__GPU_DAG__LEASE_DIR": str(lease_dir),
        "AIRFLOW__GPU_DAG__LEASE_POLL_INTERVAL": "0.05",
        "AIRFLOW__GPU_DAG__LEASE_HEARTBEAT": "1s",
    }


def _wait_for_json(path: Path, task: subprocess.Popen[str], timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if task.poll() is not None and not path.exists():
            raise AssertionError(f"the task process exited with {task.returncode}: {task.communicate()}")
        assert time.monotonic() < deadline, "the GPU task did not start its work"
        time.sleep(0.05)
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _running(pid: int) -> bool:
    from airflow_gpu_dag.gpu.process import process_start_token

    return process_start_token(pid) is not None  # a zombie (killed, not reaped yet) is gone


@pytest.mark.parametrize("kind", ["python", "decorator", "bash", "bash_killed_before_recording"])
def test_the_processes_of_a_task_killed_with_sigkill_are_gone_before_its_gpus_are_leased_again(
    tmp_path: Path, kind: str
) -> None:
    # The OOM killer (or a person) kills a GPU task's process with -9 while the processes it started
    # run on: they are orphans now, still on the GPUs. Before, the reclaim freed the lease of the dead
    # holder at once for a Python task (its children were never recorded), and the next task was handed
    # the GPUs they still used.
    lease_dir, work = tmp_path / "leases", tmp_path / "work"
    work.mkdir()
    task = subprocess.Popen(
        [sys.executable, "-c", _TASK, kind, str(work)],
        env=_task_env(lease_dir),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children: list[int] = []
    try:
        pids = _wait_for_json(work / "pids.json", task)
        children = list(pids["children"])
        assert all(_running(pid) for pid in children)
        if task.poll() is None:
            os.kill(pids["task"], signal.SIGKILL)
        task.wait(timeout=30)
        assert task.returncode == -signal.SIGKILL
        assert all(_running(pid) for pid in children), "the orphans should still run before the reclaim"

        manager = LeaseManager(_settings(lease_dir), parse_inventory(INVENTORY))
        lease = manager.acquire(GpuRequest(4), LeaseOwner("d", "r", "next"), timeout=60)
        still = [pid for pid in children if _running(pid)]
        assert not still, f"GPUs {lease.devices} leased again while {still} of the killed task still run"
        (reclaimed,) = [r for r in manager.ledger.read() if r.outcome == "reclaimed"]
        assert reclaimed.task_id == "victim" and "is gone" in reclaimed.extra["reclaim_reason"]
    finally:
        if task.poll() is None:
            task.kill()
        task.wait()
        for pid in children:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
