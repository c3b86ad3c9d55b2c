"""Resource edges (exclusive/share) on GPU tasks and affinity (queue + pool + node affinity together)."""

from __future__ import annotations

import json

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.airflow.policy import validate_dag
from airflow_gpu_dag.authoring import data_affinity, exclusive, pin_to_queue, share
from airflow_gpu_dag.executor_config import gpu_hints, read_hints
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from tests.unit.authoring.conftest import gpu_tasks_dag


def test_exclusive_gpu_tasks_hold_the_whole_pool_and_import_cleanly() -> None:
    dag, bash, decorated = gpu_tasks_dag("excl")
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
    dag, bash, decorated = gpu_tasks_dag("shr")
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


def _two(dag_id: str) -> tuple[DAG, list[EmptyOperator]]:
    with DAG(dag_id, schedule=None) as dag:
        tasks = [EmptyOperator(task_id=f"b{i}") for i in (1, 2)]
    return dag, tasks


@pytest.mark.usefixtures("_no_configured_limits")
def test_exclusive_with_a_pool_size_other_than_the_configured_one_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", json.dumps({"gpu_node1": 8}))
    _, tasks = _two("excl_small")
    with pytest.raises(ValueError, match=r"DAG 'excl_small'.*pool_size=4.*'gpu_node1' has 8 slots") as err:
        exclusive(tasks, pool="gpu_node1", pool_size=4)  # before: b1 and b2 took 4 of 8 slots each
    assert "[gpu_dag] pools" in str(err.value) and "Fix: pool_size=8" in str(err.value)
    assert [t.pool for t in tasks] == ["default_pool"] * 2  # refused before anything changed
    assert exclusive(tasks, pool="gpu_node1", pool_size=8) == {"b1": 8, "b2": 8}


@pytest.mark.usefixtures("_no_configured_limits")
def test_share_with_a_pool_size_other_than_the_configured_one_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", json.dumps({"gpu_node1": 8}))
    _, tasks = _two("share_small")
    refused = r"DAG 'share_small'.*share\(pool='gpu_node1', pool_size=4\).*8 slots"
    with pytest.raises(ValueError, match=refused):
        share([(t, 0.5) for t in tasks], pool="gpu_node1", pool_size=4)


@pytest.mark.usefixtures("_no_configured_limits")
def test_the_static_inventory_gives_the_size_of_its_gpu_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "8xa100:80GiB")
    with DAG("inv", schedule=None):
        tasks = [GpuBashOperator(task_id=f"b{i}", bash_command="true", gpu_type="a100") for i in (1, 2)]
    with pytest.raises(ValueError, match=r"'gpu_a100' has 8 slots \(the static inventory"):
        exclusive(tasks, pool="gpu_a100", pool_size=4)


@pytest.mark.usefixtures("_no_configured_limits")
def test_two_claims_of_one_pool_in_a_dag_must_agree_on_its_size() -> None:
    with DAG("two_claims", schedule=None):
        first = [EmptyOperator(task_id=f"a{i}") for i in (1, 2)]
        second = [EmptyOperator(task_id=f"b{i}") for i in (1, 2)]
    exclusive(first, pool="gpu_node1", pool_size=8)
    with pytest.raises(ValueError, match=r"DAG 'two_claims'.*pool_size=4.*'a1'.*pool_size=8") as err:
        exclusive(second, pool="gpu_node1", pool_size=4)
    assert "one pool has one size" in str(err.value)


@pytest.mark.usefixtures("_deferring")
def test_resource_helpers() -> None:
    with DAG("r", schedule=None):
        a, b, c = (EmptyOperator(task_id=t) for t in "abc")
        exclusive([a, b], pool="gpu_node1", pool_size=8)
        assert (a.pool, a.pool_slots, b.pool_slots) == ("gpu_node1", 8, 8)
        assert share({a: 0.5, b: 0.25, c: 0.25}, pool="gpu", pool_size=8) == {"a": 4, "b": 2, "c": 2}
        with pytest.raises(ValueError, match=r"sum to 1.5"):
            share({a: 0.5, b: 1.0}, pool="gpu", pool_size=8)
        with pytest.raises(ValueError, match=r"task 'a': share 0"):
            share({a: 0}, pool="gpu", pool_size=8)
        with pytest.raises(ValueError, match=r"pool_size=0"):
            exclusive([a, b], pool="gpu", pool_size=0)
        assert pin_to_queue(c, "host-gpu01", pool="gpu01_cpu").queue == "host-gpu01"
        assert c.pool == "gpu01_cpu"
        assert (
            data_affinity(b, "/mnt/gpu02/corpus/x", {"/mnt/gpu01": "h1", "/mnt/gpu02": "h2"}, pool="p2")
            == "h2"
        )
        assert (b.queue, b.pool) == ("h2", "p2")
        with pytest.raises(ValueError, match=r"no location holds '/srv/x'"):
            data_affinity(b, "/srv/x", {"/mnt": "h"})
