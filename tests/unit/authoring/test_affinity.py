"""Tests of ``airflow_gpu_dag.authoring.affinity``."""

from __future__ import annotations

import json

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import data_affinity, pin_to_queue
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from tests.unit.authoring.conftest import gpu_tasks_dag

QUEUES = {
    "host-gpu01": {
        "pool": "gpu01",
        "cpu_pool": "gpu01_cpu",
        "node_labels": {"kubernetes.io/hostname": "gpu01"},
    },
    "host-gpu02": "gpu02",
}


@pytest.fixture
def queues(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__QUEUES", json.dumps(QUEUES))


# -- affinity ------------------------------------------------------------------------------------------
def test_pin_to_queue_sets_queue_and_pool_together(queues: None) -> None:
    dag, bash, decorated = gpu_tasks_dag("aff")
    with dag:
        cpu = BashOperator(task_id="prep", bash_command="true")
        other = BashOperator(task_id="other", bash_command="true", pool="etl")
    pin_to_queue(bash, "host-gpu01")
    pin_to_queue(decorated, "host-gpu02")
    pin_to_queue(cpu, "host-gpu01")
    pin_to_queue(other, "host-gpu02")
    assert (bash.queue, bash.pool, bash.pool_slots) == ("host-gpu01", "gpu01", 1)
    t = dag.get_task("train_b")
    assert (t.queue, t.pool, t.pool_slots) == ("host-gpu02", "gpu02", 2)
    assert (cpu.queue, cpu.pool) == ("host-gpu01", "gpu01_cpu")  # a CPU task takes no GPU slot
    assert (other.queue, other.pool) == ("host-gpu02", "etl")  # no cpu_pool declared: pool kept


def test_pin_to_queue_places_pods_by_node_affinity(queues: None) -> None:
    with DAG("aff_pod", schedule=None):
        pod = GpuKubernetesPodOperator(task_id="pod", image="i", gpus=1, gpu_type="a100")
    pin_to_queue(pod, "host-gpu01")
    assert (pod.queue, pod.pool) == ("host-gpu01", "gpu01")
    terms = pod.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    exprs = {(e.key, e.operator, tuple(e.values)) for term in terms for e in term.match_expressions}
    assert ("kubernetes.io/hostname", "In", ("gpu01",)) in exprs
    assert any(key == "nvidia.com/gpu.product" for key, _, _ in exprs)  # the GPU type's affinity kept
    with DAG("aff_pod2", schedule=None):
        pod2 = GpuKubernetesPodOperator(task_id="pod2", image="i", gpus=1)
    with pytest.raises(
        ValueError, match="DAG 'aff_pod2', task 'pod2': a Kubernetes pod is placed by node affinity"
    ):
        pin_to_queue(pod2, "host-gpu02")


def test_affinity_to_an_unknown_queue_fails_at_parse_time(queues: None) -> None:
    _, bash, _ = gpu_tasks_dag("unknown_q")
    with pytest.raises(
        ValueError,
        match=r"DAG 'unknown_q', task 'train_a': queue 'host-gpu09' is unknown .*host-gpu01, host-gpu02.*Fix",
    ):
        pin_to_queue(bash, "host-gpu09")
    with pytest.raises(ValueError, match="queue 'host-gpu09' is unknown"):
        data_affinity(bash, "/mnt/gpu09/x", {"/mnt/gpu09": "host-gpu09"})
    assert data_affinity(bash, "/mnt/gpu01/corpus/x", {"/mnt/gpu01": "host-gpu01", "/mnt": "host-gpu02"}) == (
        "host-gpu01"
    )
    assert (bash.queue, bash.pool) == ("host-gpu01", "gpu01")
    with pytest.raises(ValueError, match=r"no location holds '/srv/x'"):
        data_affinity(bash, "/srv/x", {"/mnt": "host-gpu01"})


def test_without_declared_queues_the_pool_must_be_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__QUEUES", raising=False)
    _, bash, _ = gpu_tasks_dag("noconf")
    with pytest.raises(ValueError, match=r"\[gpu_dag\] queues is not set.*pass pool="):
        pin_to_queue(bash, "host-gpu01")
    pin_to_queue(bash, "host-gpu01", pool="gpu01")
    assert (bash.queue, bash.pool) == ("host-gpu01", "gpu01")


def test_malformed_queue_config_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__QUEUES", '{"q": {"pools": "x"}}')
    _, bash, _ = gpu_tasks_dag("malformed")
    with pytest.raises(ValueError, match=r"\[gpu_dag\] queues .*unknown keys \['pools'\]"):
        pin_to_queue(bash, "q")


def test_data_affinity_root_location_holds_every_absolute_path() -> None:
    with DAG("affinity_root", schedule=None):
        train = EmptyOperator(task_id="train")
        other = EmptyOperator(task_id="other")
        locations = {"/": "any-host", "/mnt/gpu01": "host-gpu01"}
        assert data_affinity(train, "/lake/corpus", locations, pool="p") == "any-host"
        assert data_affinity(other, "/mnt/gpu01/corpus", locations, pool="p") == "host-gpu01"
    assert train.queue == "any-host"
