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
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_gpu_dag.gpu.usage import UsageLedger

pytestmark = pytest.mark.airflow_real

_WORK = Path(tempfile.mkdtemp(prefix="gpu-leases-real-"))
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
