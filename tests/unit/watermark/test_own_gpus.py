"""Capacity = healthy GPUs minus GPUs held by work that is not ours.

NVML with the real lease table: GPUs busy with our leased tasks still count, GPUs busy with a foreign
process do not (issue #12: 8 GPUs, 4 running our 1-GPU tasks, gave capacity 4 and 4 idle GPUs).
Prometheus/DCGM: busy GPUs on a host where our running task instances hold GPUs, or of our pods,
still count. Kubernetes: init containers, quantities, and the client from ``KubernetesHook``."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_gpu_dag import contract as contract_module
from airflow_gpu_dag.watermark.own_gpus import RunningTaskGpus, gpus_of_task_instance, normalize_host


def test_host_names_and_gpus_of_task_instances() -> None:
    assert normalize_host("GPU-A.example.com") == "gpu-a"
    assert normalize_host("gpu-a:9400") == "gpu-a"
    assert normalize_host("10.0.0.7:9400") == "10.0.0.7"
    assert normalize_host("[fe80::1]:9400") == "fe80::1"
    assert gpus_of_task_instance({"executor_config": "{'gpu_dag': {'gpus': 4}}", "pool": "x"}) == 4
    assert gpus_of_task_instance({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": 2}) == 2
    assert gpus_of_task_instance({"executor_config": "garbage(", "pool": "default_pool"}) == 0


def test_running_task_gpus_are_cached_per_tick() -> None:
    calls = []
    now = [0.0]

    def listing() -> list[dict[str, Any]]:
        calls.append(1)
        return [{"hostname": "h", "pool": "gpu_default", "pool_slots": 2, "executor_config": "{}"}]

    ours = RunningTaskGpus(list_running=listing, ttl=5, clock=lambda: now[0])
    assert ours.by_host() == ours.by_host() == {"h": 2} and len(calls) == 1
    now[0] = 6
    ours.by_host()
    assert len(calls) == 2


@pytest.mark.usefixtures("_fresh_task_contract")
def test_the_controller_reads_the_contract_it_gets_over_rest() -> None:
    """The controller gets executor_config as the REST API's ``str(dict)``: it reads the parsed
    contract, so a malformed GPU count (2.5) is no GPU request (the task's pool slots count), not 2."""
    from airflow_gpu_dag.executor_config import fallback_hint, map_length_hint
    from airflow_gpu_dag.watermark.own_gpus import gpus_of_task_instance

    malformed = {"executor_config": str({"gpu_dag": {"gpus": 2.5}}), "pool": "gpu_a100", "pool_slots": 3}
    assert gpus_of_task_instance(malformed) == 3
    rung = {"ladder": "train", "rung": "big", "index": 0, "rungs": 2, "start_within_s": 600, "watched": True}
    canonical = str(
        contract_module.parse({"gpus": 2, "map_length": 4, "fallback": rung}).to_executor_config()
    )
    assert gpus_of_task_instance({"executor_config": canonical, "pool": "gpu_a100"}) == 2
    assert map_length_hint(canonical) == 4
    assert fallback_hint(canonical) == {
        **rung,
        "start_within_s": 600.0,
        "assumed_index": 0,
        "assumed_rung": None,
    }
