"""Real Airflow: concurrent DAG runs of GPU tasks on a static 4-GPU host never share a device.

Three runs of ``gpu_leases`` (tests/integration/dags/gpu_leases) are triggered at once. The
``gpu_default`` pool has 4 slots and the ``gpu_a100`` pool another 4, so the pools alone would let
more than 4 GPUs be asked for at once: the leases must make tasks wait for devices. From the usage
ledger (every lease, with devices and start/end taken under the table lock) and from what each task
saw in its environment:

* no device is held by two tasks at once, and never more than 4 devices are in use;
* every task saw ``CUDA_VISIBLE_DEVICES`` (and ``NVIDIA_VISIBLE_DEVICES``) with exactly its leased
  devices, as many as it declared;
* the scheduler used the provider's pools and ``pool_slots = GPUs``.

Then a Python GPU task whose lease is reclaimed while it runs (``gpu_lease_lost``) is stopped by its
lease heartbeat inside Airflow's task process (where SIGINT is ``SIG_DFL``) and fails with
``LeaseLost`` instead of working on for minutes on GPUs that are no longer its own.

Last, a ``@task.gpu`` task process killed with -9 while a child it started runs on (``gpu_lease_orphan``):
the next task on the same GPUs (``gpu_lease_orphan_next``) starts only once that child is gone.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.gpu.process import process_start_token
from airflow_gpu_dag.gpu.usage import UsageLedger

pytestmark = pytest.mark.airflow_real

_WORK = Path(tempfile.mkdtemp(prefix="gpu-leases-real-", dir=os.environ.get("GPU_DAG_TESTS_TMP")))
LEASE_DIR = _WORK / "leases"
TASK_LOG = _WORK / "seen"
TASK_LOG.mkdir(parents=True)

AIRFLOW_DAGS = "gpu_leases"
AIRFLOW_POOLS = {"gpu_default": 4, "gpu_a100": 4}
AIRFLOW_ENV = {
    "AIRFLOW__GPU_DAG__INVENTORY_SOURCE": "static",
    "AIRFLOW__GPU_DAG__INVENTORY": "4xa100:80GiB",
    "AIRFLOW__GPU_DAG__LEASE_DIR": str(LEASE_DIR),
    "AIRFLOW__GPU_DAG__LEASE_POLL_INTERVAL": "0.5s",
    "AIRFLOW__GPU_DAG__LEASE_WAIT_TIMEOUT": "10m",
    "AIRFLOW__GPU_DAG__LEASE_HEARTBEAT": "1s",
    "GPU_LEASE_TEST_LOG": str(TASK_LOG),
}
RUNS = 3
#: task_id -> (GPUs, pool, mapped instances)
DECLARED = {"prep": (1, "gpu_default", 1), "train": (2, "gpu_default", 1), "wide": (3, "gpu_default", 1)}
DECLARED["sweep"] = (1, "gpu_a100", 3)


@pytest.fixture(scope="module", autouse=True)
def _remove_work_dir() -> Iterator[None]:
    yield
    shutil.rmtree(_WORK, ignore_errors=True)


def _disjoint(intervals: list[tuple[float, float]]) -> bool:
    intervals.sort()
    return all(a[1] <= b[0] for a, b in itertools.pairwise(intervals))


def test_concurrent_runs_never_share_a_gpu(airflow_cluster) -> None:
    cluster = airflow_cluster
    cluster.wait_for_dag("gpu_leases")
    assert cluster.import_errors() == []
    run_ids = [cluster.trigger("gpu_leases") for _ in range(RUNS)]
    states = {run_id: cluster.wait_for_run("gpu_leases", run_id, timeout=600) for run_id in run_ids}
    assert set(states.values()) == {"success"}, (states, cluster.log_tails())

    # the scheduler saw the provider's pools and one slot per GPU
    for run_id in run_ids:
        tis = cluster.task_instances("gpu_leases", run_id)
        assert len(tis) == sum(n for _, _, n in DECLARED.values())
        for ti in tis:
            gpus, pool, _ = DECLARED[ti["task_id"]]
            assert (ti["state"], ti["pool"], ti["pool_slots"]) == ("success", pool, gpus), ti

    records = UsageLedger(LEASE_DIR / "usage.jsonl").read()
    expected = RUNS * sum(n for _, _, n in DECLARED.values())
    assert len(records) == expected
    assert {r.outcome for r in records} == {"success"}
    assert {r.run_id for r in records} == set(run_ids)

    # no device held by two tasks at once; never more than the inventory in use
    for device in range(4):
        assert _disjoint([(r.start, r.end) for r in records if device in r.devices]), device
    assert all(set(r.devices) <= {0, 1, 2, 3} for r in records)
    events = sorted(
        [(r.start, len(r.devices)) for r in records] + [(r.end, -len(r.devices)) for r in records]
    )
    in_use = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        in_use += delta
        peak = max(peak, in_use)
    assert peak <= 4

    # each task saw exactly its GPUs
    by_lease = {r.lease_id: r for r in records}
    seen = [json.loads(p.read_text()) for p in TASK_LOG.glob("*.json")]
    assert len(seen) == expected
    for item in seen:
        record = by_lease[item["lease_id"]]
        assert (record.task_id, record.run_id, record.map_index) == (
            item["task_id"],
            item["run_id"],
            item["map_index"],
        )
        devices = tuple(int(d) for d in item["cuda_visible_devices"].split(","))
        assert devices == record.devices
        assert item["nvidia_visible_devices"] == item["cuda_visible_devices"]
        assert len(devices) == DECLARED[item["task_id"]][0]


def test_python_task_whose_lease_is_reclaimed_is_stopped(airflow_cluster) -> None:
    cluster = airflow_cluster
    cluster.wait_for_dag("gpu_lease_lost")
    run_id = cluster.trigger("gpu_lease_lost")
    # the callable would work 300 s after dropping its lease; the heartbeat (every 1 s) must stop it.
    # The wait outlasts those 300 s: a run that was not stopped ends as a success and fails below, a
    # slow start on a loaded machine does not
    state = cluster.wait_for_run("gpu_lease_lost", run_id, timeout=600)
    log = cluster.task_log("gpu_lease_lost", run_id, "reclaimed")
    assert (TASK_LOG / "lost.started").exists(), (state, log, cluster.log_tails())
    assert state == "failed", (state, log)
    assert not (TASK_LOG / "lost.finished").exists(), "the callable ran to the end on a reclaimed lease"
    assert "reclaimed while the task ran" in log, log


def _wait_for_file(path: Path, cluster: Any, dag_id: str, run_id: str, timeout: float) -> None:
    """Wait for ``path``; fail with the task's log and the scheduler's view when the run ends first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        state = cluster.get_run(dag_id, run_id).get("state")
        if state in ("success", "failed") or time.monotonic() >= deadline:
            tis = cluster.task_instances(dag_id, run_id)
            logs = "\n".join(cluster.task_log(dag_id, run_id, ti["task_id"]) for ti in tis)
            raise AssertionError(
                f"{path.name} not written (run {state}); task instances {tis}\n{logs}\n{cluster.log_tails()}"
            )
        time.sleep(0.5)


def test_a_killed_python_tasks_child_is_gone_before_its_gpus_are_leased_again(airflow_cluster) -> None:
    # A @task.gpu callable starts a trainer child; the OOM killer then kills the task process with -9.
    # The child, an orphan now, still runs on the GPUs. The lease records the task process's group
    # from the start, and the reclaim stops the child first: reclaiming on the holder's death alone
    # would hand the next task the same GPUs while the child runs on.
    cluster = airflow_cluster
    cluster.wait_for_dags(["gpu_lease_orphan", "gpu_lease_orphan_next"])
    log = TASK_LOG / "orphan"
    run_id = cluster.trigger("gpu_lease_orphan")
    _wait_for_file(log / "orphan.json", cluster, "gpu_lease_orphan", run_id, timeout=300)
    info = json.loads((log / "orphan.json").read_text())
    try:
        # Airflow's task supervisor put the task process in a group of its own (setpgid)
        assert info["task_pgid"] == info["task_pid"], info
        assert process_start_token(info["child_pid"]) == info["child_start"], "the child did not start"
        os.kill(info["task_pid"], signal.SIGKILL)
        victim = cluster.wait_for_run("gpu_lease_orphan", run_id, timeout=300)
        victim_log = cluster.task_log("gpu_lease_orphan", run_id, "victim")
        assert victim == "failed", (victim, victim_log)

        next_run = cluster.trigger("gpu_lease_orphan_next")
        state = cluster.wait_for_run("gpu_lease_orphan_next", next_run, timeout=600)
        next_log = cluster.task_log("gpu_lease_orphan_next", next_run, "successor")
        assert state == "success", (state, next_log)
        seen = json.loads((log / "successor.json").read_text())
        assert seen["devices"] == info["devices"] == "0,1,2,3", (seen, info)
        assert not seen["child_running"], (
            f"the successor ran on GPUs the killed task's child still used\n{next_log}"
        )
        ended = float((log / "orphan.ended").read_text())  # the child was asked to stop (SIGTERM)
        assert ended <= seen["started"], (ended, seen)
        reclaimed = [
            r for r in UsageLedger(LEASE_DIR / "usage.jsonl").read() if r.lease_id == info["lease_id"]
        ]
        assert [r.outcome for r in reclaimed] == ["reclaimed"], reclaimed
        assert "is gone" in reclaimed[0].extra["reclaim_reason"], reclaimed
    finally:
        if process_start_token(info["child_pid"]) == info["child_start"]:
            os.kill(info["child_pid"], signal.SIGKILL)
