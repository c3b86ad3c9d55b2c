"""Capacity = healthy GPUs minus GPUs held by work that is not ours.

NVML with the real lease table: GPUs busy with our leased tasks still count, GPUs busy with a foreign
process do not (issue #12: 8 GPUs, 4 running our 1-GPU tasks, gave capacity 4 and 4 idle GPUs).
Prometheus/DCGM: busy GPUs on a host where our running task instances hold GPUs, or of our pods,
still count. Kubernetes: init containers, quantities, and the client from ``KubernetesHook``."""

from __future__ import annotations

import threading
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


# -- direct tests: host names, GPUs of a task instance, the cached listing ---------------------------
@pytest.mark.parametrize(
    ("name", "host"),
    [
        (None, ""),
        ("", ""),
        ("  GPU-A.Example.COM \n", "gpu-a"),
        ("gpu-a.", "gpu-a"),
        ("localhost:8793", "localhost"),
        ("fe80::1", "fe80::1"),  # a bare IPv6 address: its colons are not a port
        ("::1", "::1"),
        ("[FE80::1]", "fe80::1"),
        ("[::ffff:10.0.0.7]:9400", "::ffff:10.0.0.7"),
        ("10.0.0.7", "10.0.0.7"),  # an IPv4 address is not cut at its first dot
        ("GPÜ-Knoten.example", "gpü-knoten"),
        (42, "42"),
    ],
)
def test_normalize_host_spells_a_host_as_both_sides_do(name: object, host: str) -> None:
    assert normalize_host(name) == host


@pytest.mark.parametrize(
    ("ti", "gpus"),
    [
        # gpus 0 is no valid request (>= 1): its pool slots count
        ({"executor_config": str({"gpu_dag": {"gpus": 0}}), "pool": "gpu_a100", "pool_slots": 4}, 4),
        ({"executor_config": str({"gpu_dag": {"gpus": 2}}), "pool": "default_pool", "pool_slots": 1}, 2),
        ({"executor_config": "{}", "pool": "gpu_a100"}, 1),  # no pool_slots: Airflow's default 1
        ({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": None}, 1),
        ({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": "2"}, 2),
        ({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": -3}, 0),
        ({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": "many"}, 0),
        ({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": float("nan")}, 0),
        ({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": [2]}, 0),
        ({"executor_config": "{}", "pool": "default_pool", "pool_slots": 4}, 0),  # not a GPU pool
        ({"executor_config": "{}", "pool": None, "pool_slots": 4}, 0),
        ({}, 0),
    ],
)
def test_gpus_of_task_instance_edge_cases(ti: dict[str, Any], gpus: int) -> None:
    assert gpus_of_task_instance(ti) == gpus


@pytest.mark.parametrize("slots", [float("inf"), float("-inf")])
def test_an_infinite_pool_slots_is_no_count_not_a_crash(slots: float) -> None:
    """NaN already reads as 0 GPUs; an infinity raised out of ``by_host``, and the prometheus source then
    treated every busy GPU of every host as foreign ("our running tasks unknown")."""
    assert gpus_of_task_instance({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": slots}) == 0
    running = [
        {"hostname": "h1", "pool": "gpu_a100", "pool_slots": 2, "executor_config": "{}"},
        {"hostname": "h2", "pool": "gpu_a100", "pool_slots": slots, "executor_config": "{}"},
    ]
    assert RunningTaskGpus(list_running=lambda: running).by_host() == {"h1": 2}


def test_running_task_gpus_needs_a_client_or_a_listing() -> None:
    with pytest.raises(ValueError, match="needs a REST client or list_running"):
        RunningTaskGpus()


def test_running_task_gpus_lists_running_task_instances_of_every_pool() -> None:
    class Client:
        def __init__(self) -> None:
            self.calls: list[tuple[Any, Any]] = []

        def task_instances(self, pools: Any, states: Any) -> list[dict[str, Any]]:
            self.calls.append((pools, states))
            return [{"hostname": "h", "pool": "gpu_x", "pool_slots": 1, "executor_config": "{}"}]

    client = Client()
    assert RunningTaskGpus(client).by_host() == {"h": 1}
    assert client.calls == [([], ("running",))]


def test_gpus_are_summed_per_normalised_host_and_tasks_without_a_host_are_skipped() -> None:
    running = [
        {"hostname": "GPU-A.example.com", "pool": "gpu_a100", "pool_slots": 2},
        {"hostname": "gpu-a:8793", "pool": "gpu_a100", "executor_config": str({"gpu_dag": {"gpus": 3}})},
        {"hostname": None, "pool": "gpu_a100", "pool_slots": 4},  # queued on no host yet
        {"hostname": "", "pool": "gpu_a100", "pool_slots": 4},
        {"hostname": "cpu-1", "pool": "default_pool", "pool_slots": 1},  # holds no GPU
    ]
    assert RunningTaskGpus(list_running=lambda: running).by_host() == {"gpu-a": 5}


def test_by_host_of_a_pool_without_running_tasks_is_empty() -> None:
    running = [{"hostname": "h", "pool": "gpu_a100", "pool_slots": 2}]
    assert RunningTaskGpus(list_running=lambda: running).by_host("gpu_t4") == {}
    assert RunningTaskGpus(list_running=list).by_host() == {}


def test_a_failed_listing_is_not_cached() -> None:
    """A REST failure raises (the source says why) and the next call lists again, within the ttl."""
    answers: list[Any] = [
        ConnectionError("api-server down"),
        [{"hostname": "h", "pool": "gpu_a", "pool_slots": 1}],
    ]

    def listing() -> list[dict[str, Any]]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    ours = RunningTaskGpus(list_running=listing, ttl=60, clock=lambda: 0.0)
    with pytest.raises(ConnectionError, match="api-server down"):
        ours.by_host()
    assert ours.by_host() == {"h": 1}


def test_a_listing_that_returns_a_generator_is_kept_whole_for_the_ttl() -> None:
    def listing() -> Any:
        return iter([{"hostname": "h", "pool": "gpu_a", "pool_slots": 2}])

    ours = RunningTaskGpus(list_running=listing, ttl=60, clock=lambda: 0.0)
    assert ours.by_host() == ours.by_host("gpu_a") == {"h": 2}


def test_a_zero_ttl_lists_on_every_call() -> None:
    calls: list[int] = []
    ours = RunningTaskGpus(list_running=lambda: calls.append(1) or [], ttl=0, clock=lambda: 0.0)
    ours.by_host()
    ours.by_host()
    assert len(calls) == 2


def test_concurrent_readers_share_one_listing() -> None:
    """Every pool's source reads it in the same tick, from the controller's worker threads."""
    calls: list[int] = []
    gate = threading.Event()

    def listing() -> list[dict[str, Any]]:
        calls.append(1)
        gate.wait(5)
        return [{"hostname": "h", "pool": "gpu_a", "pool_slots": 1}]

    ours = RunningTaskGpus(list_running=listing, ttl=60, clock=lambda: 0.0)
    results: list[dict[str, int]] = []
    threads = [threading.Thread(target=lambda: results.append(ours.by_host())) for _ in range(6)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(30)
    assert results == [{"h": 1}] * 6 and len(calls) == 1
