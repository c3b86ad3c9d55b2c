"""Audit of the Kubernetes path: each test reproduces a defect found in GpuKubernetesPodOperator or
the pod pieces it is built from (no cluster; pods built with the provider's own code, as in
test_kubernetes_operator)."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any
from unittest import mock

import kubernetes_validate
import pytest
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s

from airflow_gpu_dag.kubernetes.pod_spec import merge_resources
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator, GpuPodConfigError

HOOK = "airflow.providers.cncf.kubernetes.operators.pod.KubernetesHook"
SER = ApiClient().sanitize_for_serialization
RUN_ID = "manual__2026-11-30T00:00:00+00:00"


def _dag(dag_id: str = "audit2", **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), **kwargs)


def _build(op: Any, context: dict[str, Any]) -> k8s.V1Pod:
    with mock.patch(HOOK) as hook:
        hook.return_value.is_in_cluster = False
        hook.return_value.get_namespace.return_value = "default"
        return op.build_pod_request_obj(context)


def test_dict_container_resources_keep_their_resource_claims() -> None:
    # Before: container_resources given as a dict lost its "claims" (a DRA claim of the container,
    # e.g. a GPU ResourceClaim); the V1ResourceRequirements form kept them.
    given = {"limits": {"cpu": "4"}, "claims": [{"name": "gpu-claim"}]}
    merged = SER(merge_resources(given, 2))
    assert merged["claims"] == [{"name": "gpu-claim"}]
    assert merged["limits"] == {"cpu": "4", "nvidia.com/gpu": "2"}
    with _dag() as dag:
        op = GpuKubernetesPodOperator(task_id="claims", image="i", gpus=2, container_resources=given)
    ti = SimpleNamespace(dag_id=dag.dag_id, task_id="claims", map_index=-1, try_number=1)
    pod = SER(_build(op, {"ti": ti, "run_id": RUN_ID, "dag": dag}))
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpu-claim"}]
    assert kubernetes_validate.validate(pod, "1.37.0", strict=True) == "1.37"


def test_a_gpu_type_without_letters_is_a_config_error_naming_the_task() -> None:
    # Before: gpu_type="!!!" (or such a gpu_products key) raised a bare ValueError from the pool
    # naming, without the DAG and task, instead of GpuPodConfigError.
    with _dag("bad_type"):
        with pytest.raises(GpuPodConfigError, match=r"bad_type\.t1: .*'!!!'"):
            GpuKubernetesPodOperator(task_id="t1", image="i", gpus=1, gpu_type="!!!")
        with pytest.raises(GpuPodConfigError, match=r"bad_type\.t2: .*'\?\?'"):
            GpuKubernetesPodOperator(
                task_id="t2", image="i", gpus=1, gpu_type="b200", gpu_products={"??": ["NVIDIA-B200"]}
            )


@pytest.mark.parametrize("name", ["Nightly_Eval", "nightly eval", "-eval", "x" * 254])
def test_an_existing_pod_group_name_that_cannot_exist_is_refused(name: str) -> None:
    # Before: volcano_pod_group="Nightly_Eval" was accepted and written into the pod's
    # scheduling.k8s.io/group-name annotation; no PodGroup can have that name, so the pod waited
    # until schedule_timeout_seconds and failed as "not scheduled" (and the fallback ladder moved on).
    with _dag("pg"), pytest.raises(GpuPodConfigError, match=r"pg\.t: volcano_pod_group"):
        GpuKubernetesPodOperator(task_id="t", image="i", gpus=1, volcano=True, volcano_pod_group=name)


def test_valid_existing_pod_group_names_are_kept() -> None:
    with _dag("pg_ok"):
        op = GpuKubernetesPodOperator(
            task_id="t", image="i", gpus=1, volcano=True, volcano_pod_group="nightly-eval.v2"
        )
    assert op.annotations["scheduling.k8s.io/group-name"] == "nightly-eval.v2"


def test_a_mapped_gpu_pod_keeps_the_dags_default_executor_config() -> None:
    # Before: .partial() set executor_config to the GPU hints only, so Airflow no longer filled it
    # from default_args: a mapped task lost the DAG's pod_override (an unmapped one kept it).
    override = k8s.V1Pod(metadata=k8s.V1ObjectMeta(labels={"team": "ml"}))
    with _dag("mapped_ec", default_args={"executor_config": {"pod_override": override}}):
        mapped = GpuKubernetesPodOperator.partial(task_id="m", image="i", gpus=2, gpu_type="a100").expand(
            arguments=[["a"], ["b"]]
        )
        plain = GpuKubernetesPodOperator(task_id="u", image="i", gpus=2, gpu_type="a100")
    config = mapped.partial_kwargs["executor_config"]
    assert config["pod_override"] is override
    assert config["gpu_dag"] == plain.executor_config["gpu_dag"]
    assert mapped.partial_kwargs["pool"] == "gpu_a100" and mapped.partial_kwargs["pool_slots"] == 2
    # a task-level default_args wins over the DAG's, as in Airflow
    other = k8s.V1Pod(metadata=k8s.V1ObjectMeta(labels={"team": "other"}))
    with _dag("mapped_ec2", default_args={"executor_config": {"pod_override": override}}):
        own = GpuKubernetesPodOperator.partial(
            task_id="m", image="i", gpus=1, default_args={"executor_config": {"pod_override": other}}
        ).expand(arguments=[["a"]])
    assert own.partial_kwargs["executor_config"]["pod_override"] is other


def test_a_killed_pod_is_charged_to_its_run_map_index_and_try() -> None:
    # Before: on_kill charged the pod with the ids read from its labels, which the provider
    # sanitizes (run_id 'manual__2026-11-30T0000000000-<hash>') and which carry no try number:
    # the GPU time went to a run that does not exist, as map index -1, so the run's budget never saw it.
    with _dag("killed") as dag:
        op = GpuKubernetesPodOperator(task_id="train", image="i", namespace="ml", gpus=4)
    ti = SimpleNamespace(dag_id="killed", task_id="train", run_id=RUN_ID, map_index=3, try_number=2)
    context = {"ti": ti, "run_id": RUN_ID, "dag": dag}
    pod = _build(op, context)
    assert pod.metadata.labels["run_id"] != RUN_ID  # what the old code charged
    started = datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC)
    running = k8s.V1Pod(
        metadata=pod.metadata,
        spec=pod.spec,
        status=k8s.V1PodStatus(
            phase="Running",
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="base",
                    image="i",
                    image_id="",
                    ready=True,
                    restart_count=0,
                    state=k8s.V1ContainerState(running=k8s.V1ContainerStateRunning(started_at=started)),
                )
            ],
        ),
    )
    manager = mock.Mock()
    manager.read_pod.return_value = running
    op.__dict__["pod_manager"] = manager
    op.__dict__["client"] = mock.Mock()
    charged: list[Any] = []

    def provider_execute(self: Any, context: Any) -> None:
        self.pod = pod  # created; the kill arrives while the provider waits for it

    with (
        mock.patch("airflow_gpu_dag.budget.charge.charge", side_effect=lambda r: charged.append(r) or True),
        mock.patch.object(KubernetesPodOperator, "execute", provider_execute),
        mock.patch.object(KubernetesPodOperator, "on_kill"),
    ):
        op.execute(context)
        op.on_kill()
    assert len(charged) == 1
    record = charged[0]
    assert (record.dag_id, record.run_id, record.task_id) == ("killed", RUN_ID, "train")
    assert (record.map_index, record.try_number) == (3, 2)
    assert record.gpu_seconds > 0 and len(record.devices) == 4


def test_a_kueue_pod_group_is_one_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kueue_pod_group="g1"`` put the pods of every run into one Kueue pod group: two overlapping runs of
    the DAG made a group of four pods declaring a total count of two. The label now names the run's
    group, as a Volcano gang's PodGroup does; the pods of one run share it."""
    from tests.unit.test_kubernetes_operator import _build, _dag, _validate

    with _dag("kueue_runs") as dag:
        ops = [
            GpuKubernetesPodOperator(
                task_id=f"worker_{i}",
                image="img",
                namespace="ml",
                gpus=2,
                kueue=True,
                kueue_queue="team-a",
                kueue_pod_group="g1",
                kueue_pod_group_size=2,
            )
            for i in range(2)
        ]
    first = [_build(op, dag) for op in ops]
    for pod in first:
        _validate(pod)
    groups = {pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for pod in first}
    assert len(groups) == 1 and next(iter(groups)).startswith("kueue-runs-g1-")
    assert {pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for pod in first} == {"2"}

    import tests.unit.test_kubernetes_operator as operator_tests

    real_context = operator_tests._context

    def other_run(dag: Any, task_id: str) -> Any:
        context = real_context(dag, task_id)
        context["run_id"] = "manual__2026-12-03T10:00:00+00:00"
        return context

    monkeypatch.setattr(operator_tests, "_context", other_run)
    second = _build(ops[0], dag)
    assert second["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] not in groups


def test_an_unknown_built_in_type_says_gpu_products_replaced_the_built_ins() -> None:
    """``gpu_products={"b200": [...]}`` with ``gpu_type="a100"``: the error told the user to add a100 one
    key at a time, never that the task's gpu_products had replaced the built-in mapping."""
    with pytest.raises(GpuPodConfigError, match=r"replaces the built-in types.*DEFAULT_GPU_PRODUCTS"):
        GpuKubernetesPodOperator(
            task_id="c", image="x", gpus=8, gpu_type="a100", gpu_products={"b200": ["NVIDIA-B200"]}
        )
    with pytest.raises(GpuPodConfigError, match=r"Pass gpu_products=\{'mi300'"):
        GpuKubernetesPodOperator(task_id="d", image="x", gpus=8, gpu_type="mi300")
