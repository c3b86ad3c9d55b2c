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
        EmptyOperator(task_id="t", executor_config=gpu_hints(gpus=1, gpu_type=["h100"], duration="1h"))
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
