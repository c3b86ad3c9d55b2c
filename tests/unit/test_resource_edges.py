"""Resource edges (exclusive/share) on GPU tasks and affinity (queue + pool + node affinity together)."""

from __future__ import annotations

import json

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

from airflow_gpu_dag.airflow.policy import validate_dag
from airflow_gpu_dag.authoring import data_affinity, exclusive, pin_to_queue, share
from airflow_gpu_dag.executor_config import gpu_hints, read_hints
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator

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


def _gpu_dag(dag_id: str) -> tuple[DAG, GpuBashOperator, object]:
    with DAG(dag_id, schedule=None) as dag:
        bash = GpuBashOperator(
            task_id="train_a", bash_command="true", gpus=1, gpu_memory="40GiB", duration="1h"
        )

        @task.gpu(gpus=2, duration="1h")
        def train_b() -> None:
            pass

        decorated = train_b()
    return dag, bash, decorated


def test_exclusive_gpu_tasks_hold_the_whole_pool_and_import_cleanly() -> None:
    dag, bash, decorated = _gpu_dag("excl")
    slots = exclusive([bash, decorated], pool="gpu_node1", pool_size=4)
    assert slots == {"train_a": 4, "train_b": 4}
    for task_id in ("train_a", "train_b"):
        t = dag.get_task(task_id)
        assert (t.pool, t.pool_slots) == ("gpu_node1", 4)
        assert read_hints(t.executor_config)["gpus"] == 4  # the lease gets the whole group
        assert t.gpu_request.count == 4
    assert read_hints(bash.executor_config)["gpu_memory_mib"] == 40 * 1024  # the rest of the request kept
    assert read_hints(bash.executor_config)["duration_s"] == 3600
    report = validate_dag(dag)
    assert not [f for f in report.errors if f.code == "pool-slots-mismatch"], report.errors
    assert report.errors == []


def test_share_gives_gpu_tasks_their_fraction_as_gpus() -> None:
    dag, bash, decorated = _gpu_dag("shr")
    assert share([(bash, 0.5), (decorated, 0.5)], pool="gpu_node1", pool_size=4) == {
        "train_a": 2,
        "train_b": 2,
    }
    for task_id in ("train_a", "train_b"):
        t = dag.get_task(task_id)
        assert (t.pool_slots, read_hints(t.executor_config)["gpus"], t.gpu_request.count) == (2, 2, 2)
    assert validate_dag(dag).errors == []


def test_share_refuses_more_slots_than_the_pool_after_rounding_up() -> None:
    # 6 tasks x 0.1 of a 4-slot pool: one slot each (6 > 4) although the fractions sum to 0.6.
    with DAG("shr_round", schedule=None):
        tasks = [EmptyOperator(task_id=f"t{i}") for i in range(6)]
    with pytest.raises(ValueError, match=r"6 tasks need 6 slots of pool 'gpu_node1' \(4 in all\)"):
        share([(t, 0.1) for t in tasks], pool="gpu_node1", pool_size=4)
    assert all(t.pool == "default_pool" for t in tasks)  # nothing changed
    assert share([(t, 0.1) for t in tasks[:4]], pool="gpu_node1", pool_size=4) == {
        f"t{i}": 1 for i in range(4)
    }


def test_resource_edges_on_a_gpu_pod_change_its_gpu_limits() -> None:
    with DAG("pods", schedule=None):
        a = GpuKubernetesPodOperator(task_id="a", image="i", gpus=1)
        b = GpuKubernetesPodOperator(task_id="b", image="i", gpus=2)
    exclusive([a, b], pool="gpu_node1", pool_size=8)
    for pod in (a, b):
        assert (
            pod.container_resources.limits["nvidia.com/gpu"] == "8"
            or pod.container_resources.limits["nvidia.com/gpu"] == 8
        )
        assert (pod.pool, pod.pool_slots, pod.gpus) == ("gpu_node1", 8, 8)
        assert read_hints(pod.executor_config)["gpus"] == 8


def test_plain_tasks_keep_slot_semantics() -> None:
    with DAG("plain", schedule=None):
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        c = BashOperator(task_id="c", bash_command="true", executor_config=gpu_hints(gpus=1))
    exclusive([a, b], pool="gpu_node1", pool_size=8)
    assert (a.pool, a.pool_slots) == ("gpu_node1", 8)
    share({c: 0.25}, pool="gpu_node1", pool_size=8)
    assert (c.pool_slots, read_hints(c.executor_config)["gpus"]) == (2, 2)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda a, b: exclusive([a, a], pool="p", pool_size=2),
            r"DAG 'bad', task 'a': exclusive\(\) lists it twice",
        ),
        (lambda a, b: exclusive([a], pool="p", pool_size=2), r"got 1 task\(s\) \('a'\).*at least two"),
        (lambda a, b: exclusive([a, b], pool="p", pool_size=0), r"pool_size=0 must be the pool's slot count"),
        (lambda a, b: share({a: 0.5, b: 1.0}, pool="p", pool_size=8), r"sum to 1.5 > 1"),
        (lambda a, b: share({a: 0}, pool="p", pool_size=8), r"DAG 'bad', task 'a': share 0 must be"),
    ],
)
def test_impossible_resource_edges_fail_at_parse_time(build: object, message: str) -> None:
    with DAG("bad", schedule=None):
        a = GpuBashOperator(task_id="a", bash_command="true")
        b = GpuBashOperator(task_id="b", bash_command="true")
    with pytest.raises(ValueError, match=message):
        build(a, b)  # type: ignore[operator]


def test_exclusive_beyond_the_largest_host_names_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", "4")
    with DAG("big", schedule=None):
        a = GpuBashOperator(task_id="a", bash_command="true")
        b = GpuBashOperator(task_id="b", bash_command="true")
        with pytest.raises(
            ValueError, match=r"(?s)'a' in DAG 'big'.*needs 8 GPUs.*exclusive\(pool='node'\) gives it 8"
        ):
            exclusive([a, b], pool="node", pool_size=8)


# -- affinity ------------------------------------------------------------------------------------------
def test_pin_to_queue_sets_queue_and_pool_together(queues: None) -> None:
    dag, bash, decorated = _gpu_dag("aff")
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
    _, bash, _ = _gpu_dag("unknown_q")
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
    _, bash, _ = _gpu_dag("noconf")
    with pytest.raises(ValueError, match=r"\[gpu_dag\] queues is not set.*pass pool="):
        pin_to_queue(bash, "host-gpu01")
    pin_to_queue(bash, "host-gpu01", pool="gpu01")
    assert (bash.queue, bash.pool) == ("host-gpu01", "gpu01")


def test_malformed_queue_config_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__QUEUES", '{"q": {"pools": "x"}}')
    _, bash, _ = _gpu_dag("malformed")
    with pytest.raises(ValueError, match=r"\[gpu_dag\] queues .*unknown keys \['pools'\]"):
        pin_to_queue(bash, "q")
