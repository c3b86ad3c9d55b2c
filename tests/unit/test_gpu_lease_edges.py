"""Edges of the GPU request and the lease table: a GPU type that is not one name, a lease recorded
with UUIDs seen by a worker whose inventory has none, and a lease directory that cannot be used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory, parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseError, LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.operators.gpu import GpuBashOperator, GpuTaskError


@pytest.mark.parametrize("gpu_type", [["h100"], ("h100", "a100"), {"type": "a100"}, 100])
def test_a_gpu_type_that_is_not_one_name_is_refused(gpu_type: Any) -> None:
    # before: silently dropped, so the task ran on any GPU (an A100 for gpu_type=["h100"])
    with pytest.raises(EstimateError, match=r"one GPU type name"):
        GpuRequest.parse(1, None, gpu_type)
    with DAG("types", schedule=None), pytest.raises(GpuTaskError, match=r"task 't' in DAG 'types'"):
        GpuBashOperator(task_id="t", gpus=1, gpu_type=gpu_type, bash_command="true")


def test_the_cluster_policy_names_a_gpu_type_list_in_hints() -> None:
    from airflow.exceptions import AirflowClusterPolicyViolation

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE
    from airflow_gpu_dag.airflow.policy import dag_policy

    with DAG("hinted", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        hints = gpu_hints(gpus=1, gpu_type=["h100"], duration="1h")  # type: ignore[arg-type]  # the mistake
        EmptyOperator(task_id="t", executor_config=hints)
    with pytest.raises(AirflowClusterPolicyViolation, match=r"bad-gpu-request.*task 't'.*one GPU type name"):
        dag_policy(dag)


def test_names_of_real_gpu_types_still_parse() -> None:
    for name in ("a100", "H100 80GB HBM3", "a100-sxm4-80gb", "rtx_4090"):
        assert GpuRequest.parse(1, None, name).gpu_type == name.strip().lower()


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


def test_a_worker_is_warned_when_another_worker_of_its_host_uses_another_lease_dir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: each worker saw only its own table, and both handed out GPU 0, without a word.
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


def test_an_old_marker_of_another_lease_dir_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a worker reconfigured (or gone) long ago: only markers refreshed within twice the ttl count
    import json
    import logging
    import os
    import time

    markers = tmp_path / "markers"
    markers.mkdir()
    old = markers / "0123456789abcdef.json"
    old.write_text(json.dumps({"lease_dir": "/elsewhere", "pid": 1, "ttl_s": 60}))
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    settings = LeaseSettings(lease_dir=tmp_path / "leases", host_marker_dir=markers, ttl_s=60, poll_s=0.05)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        LeaseManager(settings, parse_inventory("1xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="a"))
    assert "another worker" not in caplog.text
    os.utime(old)  # refreshed now: the same marker is fresh
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        LeaseManager(settings, parse_inventory("2xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="b"))
    assert "/elsewhere" in caplog.text


def test_workers_announce_their_lease_dir_in_a_well_known_place_of_the_host(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import default_marker_dir

    settings = LeaseSettings.from_config(lease_dir=tmp_path / "leases")
    assert settings.host_marker_dir == default_marker_dir()
    assert LeaseSettings(lease_dir=tmp_path).host_marker_dir is None  # a library user opts in
