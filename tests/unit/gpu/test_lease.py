"""GPU leases in one process: allocation, matching, waiting, release, reclaim, crash safety."""

from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory, parse_inventory
from airflow_gpu_dag.gpu.lease import (
    Lease,
    LeaseError,
    LeaseImpossible,
    LeaseManager,
    LeaseOwner,
    LeaseSettings,
    LeaseTableCorrupt,
    LeaseTimeout,
    _held_devices,
    process_alive,
    process_start_token,
)


def manager(tmp_path: Path, spec: str = "4xa100:80GiB", **settings: float) -> LeaseManager:
    values: dict[str, Any] = {
        "ttl_s": 60.0,
        "heartbeat_s": 5.0,
        "poll_s": 0.05,
        "wait_timeout_s": 5.0,
        **settings,
    }
    return LeaseManager(LeaseSettings(lease_dir=tmp_path / "leases", **values), parse_inventory(spec))


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def owner(task: str) -> LeaseOwner:
    return LeaseOwner(dag_id="d", run_id="r", task_id=task, try_number=1, pool="gpu_default")


def _stubborn_work() -> subprocess.Popen[str]:
    """A GPU command in a session of its own that ignores SIGTERM (a trainer busy saving)."""
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    work = subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    assert work.stdout is not None and work.stdout.readline().strip() == "ready"
    return work


_OWN_GROUP = """
import sys
from pathlib import Path
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseSettings
m = LeaseManager(LeaseSettings(lease_dir=Path(sys.argv[1]), poll_s=0.05), parse_inventory("1xa100:80GiB"))
m.try_acquire(GpuRequest(1), holder_pid=int(sys.argv[2]), work_groups=[__import__("os").getpgid(0)])
print("reclaimed", m.reclaim_stale(), flush=True)
print("alive", flush=True)
"""


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (the worker is not our child: init reaps it)."""
    from airflow_gpu_dag.gpu.process import process_start_token

    return process_start_token(pid) is not None


def _hold_the_lock(m: LeaseManager, seconds: float) -> subprocess.Popen[str]:
    """A process that holds the table lock for ``seconds`` (as a stopped or hung task would)."""
    m.dir.mkdir(parents=True, exist_ok=True)
    code = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(m.table.lock_path)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\n"
        f"time.sleep({seconds})\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_acquire_gives_distinct_devices_and_env(tmp_path: Path) -> None:
    m = manager(tmp_path)
    a = m.acquire(GpuRequest(2), owner("a"))
    b = m.acquire(GpuRequest(2), owner("b"))
    assert set(a.devices).isdisjoint(b.devices)
    assert sorted(a.devices + b.devices) == [0, 1, 2, 3]
    env = a.env()
    assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"] == ",".join(map(str, a.devices))
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert m.try_acquire(GpuRequest(1), owner("c")) is None  # host full
    assert a.release() and not a.release()  # idempotent
    c = m.acquire(GpuRequest(2), owner("c"))
    assert set(c.devices) == set(a.devices)
    records = {r["lease_id"]: r for r in m.leases()}
    assert set(records) == {b.lease_id, c.lease_id}
    assert records[c.lease_id]["holder"]["pid"] == os.getpid()
    assert records[c.lease_id]["owner"]["task_id"] == "c"


def test_type_and_free_memory_are_matched(tmp_path: Path) -> None:
    m = manager(tmp_path, "2xv100:16GiB,2xa100:80GiB")
    lease = m.acquire(GpuRequest(1, memory_mib=40 * 1024))
    assert lease.devices[0] in (2, 3)
    small = m.acquire(GpuRequest(1))  # best fit: a small GPU for a request without memory
    assert small.devices[0] in (0, 1)
    typed = m.acquire(GpuRequest(1, gpu_type="a100"))
    assert typed.devices[0] in (2, 3) and typed.devices != lease.devices
    assert m.try_acquire(GpuRequest(1, gpu_type="a100")) is None


def test_live_free_memory_excludes_a_busy_device(tmp_path: Path) -> None:
    inventory = GpuInventory(
        (
            GpuDevice(0, "a100", 81920, memory_free_mib=2000),  # used by something outside Airflow
            GpuDevice(1, "a100", 81920, memory_free_mib=81000),
        ),
        source="nvml",
    )
    m = LeaseManager(LeaseSettings(lease_dir=tmp_path, poll_s=0.05), inventory)
    assert m.acquire(GpuRequest(1, memory_mib=40960)).devices == (1,)
    assert m.try_acquire(GpuRequest(1, memory_mib=40960)) is None
    assert m.acquire(GpuRequest(1, memory_mib=1000)).devices == (0,)


def test_unhealthy_device_is_never_leased(tmp_path: Path) -> None:
    inventory = GpuInventory((GpuDevice(0, "a100", healthy=False), GpuDevice(1, "a100")))
    m = LeaseManager(LeaseSettings(lease_dir=tmp_path, poll_s=0.05, wait_timeout_s=0.2), inventory)
    assert m.acquire(GpuRequest(1)).devices == (1,)
    with pytest.raises(LeaseTimeout):
        m.acquire(GpuRequest(1))


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (GpuRequest(5), "only 4"),
        (GpuRequest(1, gpu_type="h100"), "not in the inventory"),
        (GpuRequest(1, memory_mib=100 * 1024), "with 100GiB"),
    ],
)
def test_impossible_request_fails_at_once(tmp_path: Path, request_: GpuRequest, fragment: str) -> None:
    m = manager(tmp_path, wait_timeout_s=600)
    started = time.monotonic()
    with pytest.raises(LeaseImpossible, match=fragment) as err:
        m.acquire(request_, owner("x"))
    assert time.monotonic() - started < 60  # did not wait for the 600 s timeout
    assert str(err.value).startswith(owner("x").describe()) and "Fix: route the task" in str(err.value)


def test_a_request_only_unhealthy_gpus_could_complete_says_so(tmp_path: Path) -> None:
    devices = [GpuDevice(i, "a100", 81920, uuid=f"GPU-{i}") for i in range(3)]
    devices.append(
        GpuDevice(3, "a100", None, uuid="GPU-3", healthy=False, health_reason="row remapping failed")
    )
    settings = LeaseSettings(lease_dir=tmp_path / "leases", poll_s=0.05, wait_timeout_s=0.2)
    m = LeaseManager(settings, GpuInventory(tuple(devices)))
    with pytest.raises(LeaseTimeout) as err:
        m.acquire(GpuRequest(4), owner("train"))
    message = str(err.value)
    assert "Only 3 such device(s) are healthy" in message and "repair or reset the unhealthy GPU" in message
    assert "row remapping failed" in message


def test_timeout_names_holders_and_the_fix(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.acquire(GpuRequest(4), owner("big"))
    with pytest.raises(LeaseTimeout) as err:
        m.acquire(GpuRequest(1), owner("small"), timeout=0.2)
    message = str(err.value)
    assert "d.small" in message and "d.big" in message and "Fix:" in message


def test_cancelled_wait_stops(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.acquire(GpuRequest(4))
    with pytest.raises(LeaseError, match="stopped while waiting"):
        m.acquire(GpuRequest(1), timeout=30, cancelled=lambda: True)


def test_release_records_usage(tmp_path: Path) -> None:
    m = manager(tmp_path)
    lease = m.acquire(GpuRequest(2), owner("t"))
    lease.release("success")
    (record,) = m.ledger.read()
    assert (record.dag_id, record.run_id, record.task_id, record.try_number) == ("d", "r", "t", 1)
    assert record.devices == lease.devices and record.outcome == "success"
    assert record.pool == "gpu_default"
    assert record.gpu_seconds == pytest.approx((record.end - record.start) * 2)


def test_context_manager_releases_on_error(tmp_path: Path) -> None:
    m = manager(tmp_path)
    with pytest.raises(RuntimeError), m.lease(GpuRequest(4), owner("boom")):
        raise RuntimeError("training crashed")
    assert m.leases() == []
    assert [r.outcome for r in m.ledger.read()] == ["failed"]


def test_dead_holder_is_reclaimed(tmp_path: Path) -> None:
    m = manager(tmp_path)
    ghost = m.acquire(GpuRequest(4), owner("ghost"), holder_pid=dead_pid())
    lease = m.acquire(GpuRequest(4), owner("next"), timeout=5)
    assert set(lease.devices) == {0, 1, 2, 3}
    reclaimed = [r for r in m.ledger.read() if r.outcome == "reclaimed"]
    assert [r.lease_id for r in reclaimed] == [ghost.lease_id]
    assert "is gone" in reclaimed[0].extra["reclaim_reason"]
    assert not ghost.heartbeat() and ghost.lost


def test_reused_pid_does_not_keep_a_lease(tmp_path: Path) -> None:
    m = manager(tmp_path)
    lease = m.acquire(GpuRequest(1), owner("a"))
    table = json.loads(m.table_path.read_text())
    table["leases"][lease.lease_id]["holder"]["start"] = "1"  # same pid, another process start
    m.table_path.write_text(json.dumps(table))
    assert [r["lease_id"] for r in m.reclaim_stale()] == [lease.lease_id]


def test_heartbeat_older_than_ttl_is_reclaimed(tmp_path: Path) -> None:
    m = manager(tmp_path, ttl_s=0.5, heartbeat_s=0.1)
    hung = m.acquire(GpuRequest(4), owner("hung"))  # holder alive (this process) but never heartbeats
    assert m.try_acquire(GpuRequest(1)) is None
    time.sleep(0.7)
    lease = m.acquire(GpuRequest(4), owner("next"), timeout=5)
    assert len(lease.devices) == 4
    assert not hung.heartbeat() and hung.lost
    assert not hung.release()  # nothing to release, no second usage record for it
    outcomes = sorted(r.outcome for r in m.ledger.read())
    assert outcomes == ["reclaimed"]


def test_heartbeat_thread_keeps_the_lease(tmp_path: Path) -> None:
    m = manager(tmp_path, ttl_s=1.5, heartbeat_s=0.1)  # a beat late by 1.4 s still keeps it (loaded CI)
    lease = m.acquire(GpuRequest(4), owner("alive"))
    lease.start_heartbeat()
    try:
        time.sleep(3.5)  # well past the ttl
        assert m.reclaim_stale() == []
        assert m.try_acquire(GpuRequest(1)) is None
    finally:
        assert lease.release()


def test_lost_lease_calls_back(tmp_path: Path) -> None:
    m = manager(tmp_path, ttl_s=0.6, heartbeat_s=0.1)
    lease = m.acquire(GpuRequest(1), owner("victim"))
    lost: list[str] = []
    lease.start_heartbeat(on_lost=lambda held: lost.append(held.lease_id))
    m2 = manager(tmp_path, ttl_s=0.6, heartbeat_s=0.1)
    table = json.loads(m2.table_path.read_text())
    del table["leases"][lease.lease_id]  # as if reclaimed by another worker
    m2.table_path.write_text(json.dumps(table))
    deadline = time.monotonic() + 10
    while not lost and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lost == [lease.lease_id] and lease.lost


def test_reclaim_kills_orphaned_work_processes(tmp_path: Path) -> None:
    m = manager(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    work = subprocess.Popen(["sleep", "60"], start_new_session=True)  # like the bash command
    try:
        lease = m.acquire(GpuRequest(1), owner("orphan"), holder_pid=holder.pid)
        lease.register_process(work.pid)
        assert m.reclaim_stale() == []  # holder alive
        holder.kill()
        holder.wait()
        assert [r["lease_id"] for r in m.reclaim_stale()] == [lease.lease_id]
        assert work.wait(timeout=10) == -signal.SIGTERM  # asked to stop first; sleep obeys at once
    finally:
        for proc in (holder, work):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_reclaim_kills_the_workers_a_command_left_in_its_process_group(tmp_path: Path) -> None:
    # The command's session leader exited and left a worker in its process group: before, reclaim
    # checked the leader only and the worker kept using the GPU.
    m = manager(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    command = subprocess.Popen(
        ["bash", "-c", "sleep 60 & echo $!"], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    worker = int(command.stdout.readline())  # type: ignore[union-attr]
    try:
        lease = m.acquire(GpuRequest(1), owner("orphan"), holder_pid=holder.pid)
        lease.register_process(command.pid)
        command.wait(timeout=10)  # the leader is gone, its worker runs on
        assert os.getpgid(worker) == command.pid
        holder.kill()
        holder.wait()
        assert [r["lease_id"] for r in m.reclaim_stale()] == [lease.lease_id]
        deadline = time.monotonic() + 10
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(worker)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if _running(worker):
            os.kill(worker, 9)


def test_work_that_ignores_sigterm_keeps_the_gpus_until_sigkill_after_the_grace(tmp_path: Path) -> None:
    # The reclaim gives the work a chance of a clean exit: SIGTERM, the devices held meanwhile, and
    # SIGKILL only once reclaim_grace_s has passed.
    m = manager(tmp_path, reclaim_grace_s=1.0)
    work = _stubborn_work()
    try:
        ghost = m.acquire(GpuRequest(4), owner("ghost"), holder_pid=dead_pid())
        ghost.register_process(work.pid)
        started = time.monotonic()
        assert m.try_acquire(GpuRequest(1), owner("next")) is None  # SIGTERM sent, ignored
        (record,) = m.leases()
        assert record["reclaim"]["signal"] == "SIGTERM" and "is gone" in record["reclaim"]["reason"]
        assert _running(work.pid)
        lease = m.acquire(GpuRequest(4), owner("next"), timeout=10)
        assert time.monotonic() - started >= 1.0
        assert work.wait(timeout=5) == -signal.SIGKILL
        assert sorted(lease.devices) == [0, 1, 2, 3]
        assert [r.outcome for r in m.ledger.read()] == ["reclaimed"]
    finally:
        if work.poll() is None:
            work.kill()
        work.wait()


def test_without_kill_orphans_a_reclaim_waits_for_the_work_to_exit(tmp_path: Path) -> None:
    settings = LeaseSettings(
        lease_dir=tmp_path / "leases", poll_s=0.05, wait_timeout_s=10, kill_orphans=False
    )
    m = LeaseManager(settings, parse_inventory("2xa100:80GiB"))
    work = subprocess.Popen(["sleep", "1.5"], start_new_session=True)
    try:
        ghost = m.acquire(GpuRequest(2), owner("ghost"), holder_pid=dead_pid())
        ghost.register_process(work.pid)
        assert m.try_acquire(GpuRequest(1), owner("next")) is None  # before: freed at once
        lease = m.acquire(GpuRequest(2), owner("next"), timeout=10)
        assert work.wait(timeout=1) == 0, "the work was signalled although kill_orphans is off"
        assert len(lease.devices) == 2
    finally:
        if work.poll() is None:
            work.kill()
        work.wait()


def test_a_lease_being_reclaimed_is_neither_renewed_nor_released_by_its_holder(tmp_path: Path) -> None:
    # The holder (this process) stopped renewing for longer than the ttl; its command ignores SIGTERM.
    # Waking up, the holder must not renew the lease nor free its devices while the command runs.
    m = manager(tmp_path, ttl_s=0.5, heartbeat_s=0.1, reclaim_grace_s=30)
    work = _stubborn_work()
    try:
        hung = m.acquire(GpuRequest(4), owner("hung"))
        hung.register_process(work.pid)
        time.sleep(0.7)
        assert m.try_acquire(GpuRequest(1), owner("next")) is None  # reclaim begun: SIGTERM, ignored
        assert not m.heartbeat(hung.lease_id) and not hung.heartbeat() and hung.lost
        assert not m.release(hung.lease_id)
        assert [r["lease_id"] for r in m.leases()] == [hung.lease_id]  # its devices still held
        work.kill()
        work.wait()
        assert m.try_acquire(GpuRequest(4), owner("next")) is not None
    finally:
        if work.poll() is None:
            work.kill()
        work.wait()


def test_a_reclaim_never_signals_its_own_process_group(tmp_path: Path) -> None:
    # A lease whose work group is the reclaimer's own (a child of the task reclaiming its lease): the
    # reclaim must not kill itself, and the group's devices stay held while it runs.
    probe = subprocess.run(
        [sys.executable, "-c", _OWN_GROUP, str(tmp_path / "leases"), str(dead_pid())],
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe
    assert probe.stdout.splitlines() == ["reclaimed []", "alive"], probe


def test_workers_that_number_the_gpus_differently_never_share_one(tmp_path: Path) -> None:
    # Two workers share the host's lease directory; B's container sees only host GPUs 2 and 3, which
    # NVML numbers 0 and 1 there. Leases are compared by UUID: by index, A would get GPU-host2 too.
    full = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-host{i}") for i in range(4)))
    subset = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-host{i + 2}") for i in range(2)))
    settings = LeaseSettings(lease_dir=tmp_path / "leases", poll_s=0.05, wait_timeout_s=0.5)
    worker_a, worker_b = LeaseManager(settings, full), LeaseManager(settings, subset)
    b = worker_b.acquire(GpuRequest(1), owner("b"))
    assert b.uuids == ("GPU-host2",)
    a = worker_a.acquire(GpuRequest(3), owner("a"))
    assert set(a.uuids) == {"GPU-host0", "GPU-host1", "GPU-host3"}
    assert worker_a.try_acquire(GpuRequest(1), owner("a2")) is None  # GPU-host2 is B's
    assert worker_b.try_acquire(GpuRequest(1), owner("b2")) is None  # its index 1 is GPU-host3: A's
    a.release()
    b2 = worker_b.try_acquire(GpuRequest(1), owner("b2"))
    assert b2 is not None and (b2.devices, b2.uuids) == ((1,), ("GPU-host3",))


def test_a_lock_held_too_long_ends_the_wait_with_the_lock_named(tmp_path: Path) -> None:
    # The table lock is taken with the caller's timeout: acquire(timeout=...) must not hang as long as
    # the lock's holder does.
    m = manager(tmp_path, poll_s=0.05)
    holder = _hold_the_lock(m, 30)
    try:
        started = time.monotonic()
        with pytest.raises(LeaseTimeout, match=r"lease table lock .* was held by another process"):
            m.acquire(GpuRequest(1), owner("waiting"), timeout=1.0)
        assert time.monotonic() - started < 20
    finally:
        holder.kill()
        holder.wait()


def test_waiting_for_the_lock_is_not_held_against_healthy_leases(tmp_path: Path) -> None:
    # While the lock was held nobody could renew: before, the next allocation reclaimed every live
    # lease whose heartbeat had passed its ttl meanwhile, and killed its work.
    m = manager(tmp_path, ttl_s=1.0, heartbeat_s=0.2)
    healthy = m.acquire(GpuRequest(1), owner("healthy"))  # held by this (live) process; no heartbeat
    holder = _hold_the_lock(m, 2.5)
    try:
        m.acquire(GpuRequest(1), owner("newcomer"), timeout=30)  # waits ~2.5 s for the lock
    finally:
        holder.kill()
        holder.wait()
    assert healthy.lease_id in {r["lease_id"] for r in m.leases()}


def test_corrupt_table_refuses_allocation(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.acquire(GpuRequest(1))
    m.table_path.write_text('{"version": 1, "leases": {')
    with pytest.raises(LeaseTableCorrupt, match="remove or repair"):
        m.try_acquire(GpuRequest(1))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ({"x": "oops"}, "lease 'x' is not an object"),
        ({"x": {"devices": [0], "holder": {"host": "h"}}}, "'holder' has no pid"),
        ({"x": {"devices": "0,1", "holder": {"pid": 1}}}, "'devices' is not a list"),
        ({"x": {"devices": [0], "holder": {"pid": 1}, "heartbeat_at": "soon"}}, "'heartbeat_at' is not"),
        # read one character per device, or stale at once: both handed a live holder's GPUs out again
        ({"x": {"devices": [0], "holder": {"pid": 1}, "uuids": "GPU-0"}}, "'uuids' is not a list"),
        ({"x": {"devices": [0], "holder": {"pid": 1}, "uuids": [7]}}, "'uuids' is not a list"),
        ({"x": {"devices": [0], "holder": {"pid": 1}, "ttl_s": -5}}, "'ttl_s' -5 is not a positive"),
        ({"x": {"devices": [0], "holder": {"pid": 1}, "owner": ["d", "t"]}}, "'owner' is not an object"),
        ({"x": {"devices": [0], "holder": {"pid": True}}}, "'holder' has no pid"),
        ({"x": {"devices": [0], "holder": {"pid": 1, "host": 5}}}, "holder's 'host' is not a string"),
        ({"x": {"devices": [0], "holder": {"pid": 1}, "processes": "7"}}, "'processes' is not a list"),
        ({"x": {"devices": [0], "holder": {"pid": 1}, "reclaim": "now"}}, "'reclaim' is not a reclaim"),
        (None, "Is a directory"),
    ],
)
def test_a_damaged_lease_record_is_a_corrupt_table_not_a_crash(
    tmp_path: Path, damage: dict[str, Any] | None, reason: str
) -> None:
    # A damaged record is a LeaseTableCorrupt that says what to do, not an AttributeError, KeyError,
    # ValueError or IsADirectoryError past the operators' `except LeaseError`.
    m = manager(tmp_path)
    m.dir.mkdir(parents=True)
    if damage is None:
        m.table_path.mkdir()
    else:
        m.table_path.write_text(json.dumps({"version": 1, "leases": damage}))
    with pytest.raises(LeaseTableCorrupt, match="remove or repair") as err:
        m.try_acquire(GpuRequest(1))
    assert reason in str(err.value)


def test_leftover_temp_file_of_a_crashed_writer_is_removed(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.dir.mkdir(parents=True)
    junk = m.dir / ".leases.json.crashed.tmp"
    junk.write_text('{"half": ')
    lease = m.acquire(GpuRequest(1))
    assert not junk.exists()
    assert [r["lease_id"] for r in m.leases()] == [lease.lease_id]


def test_process_tokens() -> None:
    assert process_start_token(os.getpid()) is not None
    assert process_alive(os.getpid(), process_start_token(os.getpid()))
    assert not process_alive(os.getpid(), "not-the-start-time")
    assert not process_alive(dead_pid(), None)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while process_start_token(zombie.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)  # exited but not reaped: a zombie counts as gone
    assert process_start_token(zombie.pid) is None
    zombie.wait()


def test_settings_validation_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="at most half"):
        LeaseSettings(lease_dir=tmp_path, ttl_s=10, heartbeat_s=6)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "x"))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_TTL", "90s")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_HEARTBEAT", "15s")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_WAIT_TIMEOUT", "1h")
    settings = LeaseSettings.from_config()
    assert (settings.lease_dir, settings.ttl_s, settings.heartbeat_s, settings.wait_timeout_s) == (
        tmp_path / "x",
        90.0,
        15.0,
        3600.0,
    )
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_TTL", "soon")
    with pytest.raises(ValueError, match="lease_ttl"):
        LeaseSettings.from_config()


# -- Leases across processes: 8 workers hammering a 4-GPU host, and holders killed with -9 or stopped.


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
        # the killed task's temporary folder (BashOperator's airflowtmp*) goes with tmp_path
        "TMPDIR": str(lease_dir.parent),
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


def _running_lease_multiprocess(pid: int) -> bool:
    from airflow_gpu_dag.gpu.process import process_start_token

    return process_start_token(pid) is not None  # a zombie (killed, not reaped yet) is gone


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


@pytest.mark.parametrize("kind", ["python", "decorator", "bash", "bash_killed_before_recording"])
def test_the_processes_of_a_task_killed_with_sigkill_are_gone_before_its_gpus_are_leased_again(
    tmp_path: Path, kind: str
) -> None:
    # The OOM killer (or a person) kills a GPU task's process with -9 while the processes it started
    # run on: they are orphans now, still on the GPUs. The reclaim stops them before it frees the dead
    # holder's lease, for a Python task too, so the next task is not handed GPUs they still use.
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
        assert all(_running_lease_multiprocess(pid) for pid in children)
        if task.poll() is None:
            os.kill(pids["task"], signal.SIGKILL)
        task.wait(timeout=30)
        assert task.returncode == -signal.SIGKILL
        assert all(_running_lease_multiprocess(pid) for pid in children), (
            "the orphans should still run before the reclaim"
        )

        manager = LeaseManager(_settings(lease_dir), parse_inventory(INVENTORY))
        lease = manager.acquire(GpuRequest(4), LeaseOwner("d", "r", "next"), timeout=60)
        still = [pid for pid in children if _running_lease_multiprocess(pid)]
        assert not still, f"GPUs {lease.devices} leased again while {still} of the killed task still run"
        (reclaimed,) = [r for r in manager.ledger.read() if r.outcome == "reclaimed"]
        assert reclaimed.task_id == "victim" and "is gone" in reclaimed.extra["reclaim_reason"]
    finally:
        if task.poll() is None:
            task.kill()
        task.wait()
        for pid in children:
            if _running_lease_multiprocess(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_lease_held_by_uuid_counts_for_an_inventory_without_uuids(tmp_path: Path) -> None:
    # one host, two workers: one reads NVML (UUIDs), one fell back to the static inventory. Before,
    # the static worker skipped the UUID'd lease and was handed the same two GPUs.
    settings = LeaseSettings(lease_dir=tmp_path / "leases", poll_s=0.05, wait_timeout_s=0.3)
    nvml = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i}") for i in range(2)), source="nvml")
    held = LeaseManager(settings, nvml).acquire(GpuRequest(2), LeaseOwner(task_id="a", dag_id="d"))
    assert held.devices == (0, 1)
    static = LeaseManager(settings, parse_inventory("2xa100:80GiB"))
    assert static.try_acquire(GpuRequest(1), LeaseOwner(task_id="b", dag_id="d")) is None
    held.release("success")
    assert static.try_acquire(GpuRequest(2), LeaseOwner(task_id="b", dag_id="d")) is not None


def test_a_lease_of_a_gpu_another_container_sees_is_still_skipped(tmp_path: Path) -> None:
    # with UUIDs on both sides, a UUID this worker does not know is a GPU it does not see
    settings = LeaseSettings(lease_dir=tmp_path / "leases", poll_s=0.05, wait_timeout_s=0.3)
    first = GpuInventory((GpuDevice(0, "a100", 81920, uuid="GPU-A"),), source="nvml")
    second = GpuInventory((GpuDevice(0, "a100", 81920, uuid="GPU-B"),), source="nvml")
    LeaseManager(settings, first).acquire(GpuRequest(1), LeaseOwner(task_id="a", dag_id="d"))
    other = LeaseManager(settings, second).try_acquire(GpuRequest(1), LeaseOwner(task_id="b", dag_id="d"))
    assert other is not None and other.uuids == ("GPU-B",)


def test_an_unusable_lease_directory_names_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    settings = LeaseSettings(lease_dir=blocker / "leases", poll_s=0.05, wait_timeout_s=0.3)
    manager = LeaseManager(settings, parse_inventory("2xa100"))
    with pytest.raises(LeaseError, match=r"GPU lease directory .*\[gpu_dag\] lease_dir.*Fix: set"):
        manager.acquire(GpuRequest(1), LeaseOwner(task_id="a", dag_id="d"))


# -- clock -------------------------------------------------------------------------------------------
def test_a_clock_jumping_forward_past_the_ttl_does_not_hand_a_live_lease_to_another_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wall clock was stepped an hour forward (NTP, a VM resumed) while the holder ran and renewed.
    # Its heartbeat must not look an hour old: the lease would be reclaimed (its command killed) and
    # its GPU handed to the next task.
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=60, heartbeat_s=5, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    lease = m.acquire(GpuRequest(1), LeaseOwner(task_id="a", dag_id="d"))
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert m.try_acquire(GpuRequest(1), LeaseOwner(task_id="b", dag_id="d")) is None
    assert m.reclaim_stale() == []
    assert lease.heartbeat() and not lease.lost
    assert lease.release()


def test_a_hung_holder_is_still_reclaimed_after_the_ttl(tmp_path: Path) -> None:
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=0.5, heartbeat_s=0.1, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    hung = m.acquire(GpuRequest(1), LeaseOwner(task_id="hung"))  # alive (this process), never renews
    time.sleep(0.8)
    assert m.try_acquire(GpuRequest(1), LeaseOwner(task_id="next")) is not None
    assert not hung.heartbeat() and hung.lost


# -- direct checks of the API's promises --------------------------------------------------------------
class _HeartbeatManager:
    """A manager whose ``heartbeat`` answers from a script (True, False, or an exception to raise)."""

    def __init__(self, *answers: bool | Exception) -> None:
        self.settings = SimpleNamespace(heartbeat_s=0.01)
        self.answers = list(answers)
        self.calls = 0

    def heartbeat(self, lease_id: str) -> bool:
        self.calls += 1
        answer = self.answers.pop(0) if self.answers else False
        if isinstance(answer, Exception):
            raise answer
        return answer


def _scripted_lease(*answers: bool | Exception) -> Lease:
    return Lease(_HeartbeatManager(*answers), "f" * 32, (0,), owner("t"), GpuRequest(1), 0.0)  # type: ignore[arg-type]


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def _heartbeat_threads(lease: Lease) -> list[threading.Thread]:
    name = f"gpu-lease-heartbeat-{lease.lease_id[:8]}"
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def test_env_names_the_lease_and_nothing_but_its_devices(tmp_path: Path) -> None:
    lease = manager(tmp_path).acquire(GpuRequest(2), owner("t"))
    ids = ",".join(map(str, lease.devices))
    assert lease.visible_devices == ids
    assert lease.env() == {
        "CUDA_VISIBLE_DEVICES": ids,
        "NVIDIA_VISIBLE_DEVICES": ids,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "GPU_DAG_LEASE_ID": lease.lease_id,
        "GPU_DAG_DEVICES": ids,
    }
    assert repr(lease) == f"Lease({lease.lease_id!r}, devices={list(lease.devices)}, state='held')"


def test_to_dict_has_the_documented_keys_and_is_json(tmp_path: Path) -> None:
    """``gpu_lease`` given to a task is this dict: ``lease_id``, ``devices``, ``uuids``, ``acquired_at``,
    ``owner`` (docs/gpu-tasks.md); it crosses XCom and process boundaries as JSON."""
    inventory = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i}") for i in range(2)))
    m = LeaseManager(LeaseSettings(lease_dir=tmp_path / "leases", poll_s=0.05), inventory)
    lease = m.acquire(GpuRequest(1), owner("t"))
    data = json.loads(json.dumps(lease.to_dict()))
    assert set(data) == {"lease_id", "devices", "uuids", "acquired_at", "owner"}
    assert data["devices"] == list(lease.devices) and data["uuids"] == [f"GPU-{lease.devices[0]}"]
    assert data["owner"]["task_id"] == "t" and data["acquired_at"] == lease.acquired_at


def test_best_fit_takes_the_smallest_devices_and_returns_them_sorted(tmp_path: Path) -> None:
    sizes = (81920, 16384, 16384, 81920)
    inventory = GpuInventory(tuple(GpuDevice(i, "a100", mib) for i, mib in enumerate(sizes)))
    m = LeaseManager(LeaseSettings(lease_dir=tmp_path / "leases", poll_s=0.05), inventory)
    assert m.acquire(GpuRequest(2)).devices == (1, 2)  # the big ones are kept for big requests
    assert m.acquire(GpuRequest(2)).devices == (0, 3)


def test_try_acquire_records_the_work_groups_in_the_granting_write(tmp_path: Path) -> None:
    """A group whose leader runs (a session of its own: pid = pgid); this process's own group may have a
    leader that is gone, as under a pytest-xdist worker."""
    import subprocess
    import sys

    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        m = manager(tmp_path)
        lease = m.try_acquire(GpuRequest(1), owner("t"), work_groups=[leader.pid])
        assert lease is not None
        (record,) = json.loads(m.table_path.read_text())["leases"].values()
        start = process_start_token(leader.pid)
        assert start is not None
        assert record["processes"] == [{"pid": leader.pid, "start": start, "pgid": leader.pid}]
        assert record["request"] == {"gpus": 1, "memory_mib": None, "gpu_type": None}
    finally:
        leader.kill()
        leader.wait(timeout=10)


def test_a_process_registered_twice_is_recorded_once(tmp_path: Path) -> None:
    m = manager(tmp_path)
    lease = m.acquire(GpuRequest(1), owner("t"))
    lease.register_process(os.getpid())
    lease.register_process(os.getpid())
    (record,) = m.leases()
    assert [p["pid"] for p in record["processes"]] == [os.getpid()]
    assert record["processes"][0]["start"] == process_start_token(os.getpid())


def test_an_unknown_lease_is_neither_renewed_registered_nor_released(tmp_path: Path) -> None:
    m = manager(tmp_path)
    assert not m.heartbeat("nope")
    assert not m.register_process("nope", os.getpid())
    assert not m.release("nope")
    assert m.ledger.read() == [] and m.leases() == []


def test_a_heartbeat_renews_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = manager(tmp_path)
    lease = m.acquire(GpuRequest(1), owner("t"))
    later = time.time() + 30
    monkeypatch.setattr(time, "time", lambda: later)
    assert lease.heartbeat() and lease.state == "held"
    (record,) = m.leases()
    assert record["heartbeat_at"] == later and record["acquired_at"] == lease.acquired_at


def test_a_lease_as_context_manager_releases_with_the_outcome(tmp_path: Path) -> None:
    m = manager(tmp_path)
    with m.acquire(GpuRequest(1), owner("ok")) as lease:
        assert lease.state == "held"
    assert lease.state == "released"
    with pytest.raises(ValueError, match="bad batch"), m.acquire(GpuRequest(1), owner("bad")):
        raise ValueError("bad batch")
    assert [(r.task_id, r.outcome) for r in m.ledger.read()] == [("ok", "success"), ("bad", "failed")]
    assert m.leases() == []


def test_manager_lease_stops_its_heartbeat_thread_when_done(tmp_path: Path) -> None:
    m = manager(tmp_path)
    with m.lease(GpuRequest(1), owner("t")) as lease:
        assert len(_heartbeat_threads(lease)) == 1
    assert _heartbeat_threads(lease) == [] and lease.state == "released"
    assert [r.outcome for r in m.ledger.read()] == ["success"]


def test_starting_the_heartbeat_twice_runs_one_thread(tmp_path: Path) -> None:
    lease = manager(tmp_path).acquire(GpuRequest(1), owner("t"))
    lease.stop_heartbeat()  # before any start: nothing to stop
    lease.start_heartbeat()
    lease.start_heartbeat()
    try:
        assert len(_heartbeat_threads(lease)) == 1
    finally:
        assert lease.release()
    assert _heartbeat_threads(lease) == []


def test_a_failed_heartbeat_is_retried_and_a_lost_lease_calls_back_once() -> None:
    lease = _scripted_lease(True, OSError("disk full"), True, False, False)
    lost: list[Lease] = []
    lease.start_heartbeat(on_lost=lost.append)
    assert _until(lambda: bool(lost))
    assert _until(lambda: not _heartbeat_threads(lease))  # the thread ends once the lease is lost
    assert lost == [lease] and lease.lost and lease.manager.calls == 4  # type: ignore[attr-defined]
    assert not lease.release()  # nothing to release any more


def test_an_on_lost_callback_that_raises_or_releases_does_not_break_the_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = _scripted_lease(False)
    calls: list[bool] = []

    def on_lost(held: Lease) -> None:
        calls.append(held.release())
        held.stop_heartbeat()  # from the heartbeat thread itself: must not join itself
        raise RuntimeError("callback failed")

    with caplog.at_level("ERROR", logger="airflow_gpu_dag.gpu.lease"):
        lease.start_heartbeat(on_lost=on_lost)
        assert _until(lambda: bool(calls) and not _heartbeat_threads(lease))
    assert calls == [False] and lease.lost
    assert any("on_lost callback failed" in r.getMessage() for r in caplog.records)


def test_a_release_that_fails_keeps_the_lease_held_for_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = manager(tmp_path)
    lease = m.acquire(GpuRequest(1), owner("t"))
    real = m.table.record_usage
    failures = iter([OSError("ledger disk full")])

    def record_usage(*args: Any, **kwargs: Any) -> None:
        for err in failures:
            raise err
        real(*args, **kwargs)

    monkeypatch.setattr(m.table, "record_usage", record_usage)
    with pytest.raises(OSError, match="ledger disk full"):
        lease.release()
    assert lease.state == "held" and [r["lease_id"] for r in m.leases()] == [lease.lease_id]
    assert lease.release() and lease.state == "released"
    assert m.leases() == [] and len(m.ledger.read()) == 1


def test_a_live_inventory_is_read_again_for_every_attempt(tmp_path: Path) -> None:
    readings = iter([1000, 1000, 81000])

    def inventory() -> GpuInventory:
        free = next(readings, 81000)
        return GpuInventory((GpuDevice(0, "a100", 81920, memory_free_mib=free),), source="nvml")

    m = LeaseManager(LeaseSettings(lease_dir=tmp_path / "leases", poll_s=0.01, wait_timeout_s=5), inventory)
    assert m.acquire(GpuRequest(1, memory_mib=40960), owner("t")).devices == (0,)
    assert next(readings, None) is None  # it waited for the memory to be freed


def test_a_zero_timeout_fails_after_one_attempt(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.acquire(GpuRequest(4), owner("big"))
    attempts: list[bool] = []
    with pytest.raises(LeaseTimeout, match=r"waited 0s for 1 GPU\(s\)"):
        m.acquire(GpuRequest(1), owner("small"), timeout=0, cancelled=lambda: attempts.append(True) or False)
    assert attempts == [True]


def test_a_nan_timeout_is_refused_rather_than_waiting_for_ever(tmp_path: Path) -> None:
    """``nan <= 0`` is False, so the remaining time never runs out; a NaN must fail at once, naming it."""
    m = manager(tmp_path)
    m.acquire(GpuRequest(4), owner("big"))
    polls = itertools.count()

    def cancelled() -> bool:
        if next(polls) >= 20:
            raise AssertionError("still polling after 20 attempts: the wait has no end")
        return False

    with pytest.raises((ValueError, LeaseError), match=r"(?i)timeout"):
        m.acquire(GpuRequest(1), owner("small"), timeout=math.nan, cancelled=cancelled)


def test_an_impossible_request_without_an_owner_names_the_request_and_the_fix(tmp_path: Path) -> None:
    m = manager(tmp_path, "2xa100:80GiB")
    with pytest.raises(LeaseImpossible) as err:
        m.check_possible(GpuRequest(3))
    message = str(err.value)
    assert message.startswith("3x GPU can never be leased on ") and "Fix:" in message


def test_a_unicode_owner_survives_the_table_the_ledger_and_the_timeout_message(tmp_path: Path) -> None:
    m = manager(tmp_path, "1xa100:80GiB")
    who = LeaseOwner(dag_id="训练", run_id="manual__λ", task_id="モデル-ü", try_number=1, pool="gpu")
    lease = m.acquire(GpuRequest(1), who)
    (record,) = m.leases()
    assert record["owner"]["task_id"] == "モデル-ü"
    with pytest.raises(LeaseTimeout, match=r"训练\.モデル-ü"):
        m.acquire(GpuRequest(1), owner("next"), timeout=0)
    assert lease.release()
    (usage,) = m.ledger.read()
    assert (usage.dag_id, usage.task_id, usage.run_id) == ("训练", "モデル-ü", "manual__λ")


def test_held_devices_match_by_uuid_and_by_index_where_a_record_has_no_uuid() -> None:
    inventory = GpuInventory(tuple(GpuDevice(i, "a100", uuid=f"GPU-{i}") for i in range(4)))
    records = [
        {"devices": [0], "uuids": ["GPU-3"]},  # another container's index 0 is our 3
        {"devices": [1, 2], "uuids": ["GPU-9"]},  # 1: a GPU we do not see; 2: no UUID, by index
        {"devices": ["1"]},  # an index written as text
    ]
    assert _held_devices(inventory, records) == {3, 2, 1}


def test_threads_of_one_process_never_share_a_device(tmp_path: Path) -> None:
    """The table is "atomic across processes"; the workers' threads (one manager, a lease each) too."""
    m = manager(tmp_path)
    in_use: set[int] = set()
    guard = threading.Lock()
    overlaps: list[tuple[int, ...]] = []
    granted = itertools.count()

    def worker() -> None:
        for _ in range(15):
            lease = m.try_acquire(GpuRequest(2), owner("t"))
            if lease is None:
                continue
            next(granted)
            with guard:
                if in_use & set(lease.devices):
                    overlaps.append(lease.devices)
                in_use.update(lease.devices)
            with guard:
                in_use.difference_update(lease.devices)
            assert lease.release()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert overlaps == [] and next(granted) > 2
    assert m.leases() == []
