"""GpuKubernetesPodOperator: pods built without a cluster and validated against the Kubernetes OpenAPI schema.

Pods are built with the provider's own ``build_pod_request_obj(context)`` while its ``KubernetesHook`` is
patched (as the provider's tests do), serialized with ``ApiClient().sanitize_for_serialization`` and
validated with ``kubernetes_validate`` (Kubernetes 1.37 schema, strict: unknown fields are errors).
Nothing here talks to a cluster.
"""

from __future__ import annotations

import datetime
import itertools
from types import SimpleNamespace
from typing import Any
from unittest import mock

import kubernetes_validate
import pytest
from airflow.providers.cncf.kubernetes.operators.kueue import KubernetesStartKueueJobOperator
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchTimeoutException
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s

from airflow_gpu_dag.kubernetes.volcano import validate_podgroup
from airflow_gpu_dag.operators.fallback import FALLBACK_XCOM_KEY, NotStartedInTime
from airflow_gpu_dag.operators.kubernetes import (
    GpuKubernetesPodOperator,
    GpuPodConfigError,
    GpuPodNotScheduled,
    gpu_pod_kwargs,
)

K8S_VERSION = "1.37.0"
RUN_ID = "manual__2026-11-30T00:00:00+00:00"
HOOK = "airflow.providers.cncf.kubernetes.operators.pod.KubernetesHook"
SER = ApiClient().sanitize_for_serialization


def _context(dag: DAG, task_id: str, ti: Any = None) -> dict[str, Any]:
    ti = ti or SimpleNamespace(dag_id=dag.dag_id, task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "run_id": RUN_ID, "dag": dag}


def _build(op: Any, dag: DAG) -> dict[str, Any]:
    with mock.patch(HOOK) as hook:
        hook.return_value.is_in_cluster = False
        hook.return_value.get_namespace.return_value = "default"
        pod = op.build_pod_request_obj(_context(dag, op.task_id))
    return SER(pod)


def _validate(manifest: dict[str, Any]) -> None:
    assert kubernetes_validate.validate(manifest, K8S_VERSION, strict=True) == "1.37"


def _dag(dag_id: str = "k8s_gpu") -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1))


MODES: dict[str, dict[str, Any]] = {
    "plain": {},
    "volcano": {"volcano": True, "volcano_queue": "training"},
    "volcano_gang": {
        "volcano": True,
        "volcano_queue": "training",
        "volcano_gang": "workers",
        "volcano_gang_size": 4,
    },
    "volcano_existing_group": {"volcano": True, "volcano_pod_group": "nightly-eval"},
    "kueue": {"kueue": True, "kueue_queue": "team-a"},
    "kueue_group": {
        "kueue": True,
        "kueue_queue": "team-a",
        "kueue_pod_group": "g1",
        "kueue_pod_group_size": 2,
    },
}
GPU_TYPES = [None, "a100"]
DATA = [None, "prefer", "require"]
PRIORITY = [None, "explicit", "critical"]


@pytest.mark.parametrize(
    ("mode", "gpu_type", "data", "priority"), list(itertools.product(MODES, GPU_TYPES, DATA, PRIORITY))
)
def test_every_mode_builds_a_schema_valid_pod(mode, gpu_type, data, priority):
    kwargs: dict[str, Any] = dict(MODES[mode])
    if data:
        kwargs.update(datasets=["c4-en", "wiki_2026"], data_affinity=data)
    if priority == "explicit":
        kwargs["priority_class_name"] = "team-high"
    elif priority == "critical":
        kwargs.update(critical_priority_class="gpu-critical", noncritical_priority_class="gpu-batch")
    with _dag() as dag:
        op = GpuKubernetesPodOperator(
            task_id="train",
            image="ghcr.io/acme/train:1",
            cmds=["python", "train.py"],
            namespace="ml",
            gpus=4,
            gpu_memory="80GiB",
            gpu_type=gpu_type,
            duration="2h",
            labels={"team": "nlp"},
            **kwargs,
        )
    pod = _build(op, dag)
    _validate(pod)

    spec, meta = pod["spec"], pod["metadata"]
    (container,) = spec["containers"]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert meta["labels"]["team"] == "nlp"
    node_aff = spec["affinity"]["nodeAffinity"]
    required = [
        e
        for t in node_aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for e in t["matchExpressions"]
    ]
    keys = [e["key"] for e in required]
    assert "nvidia.com/gpu.memory" in keys
    assert ("nvidia.com/gpu.product" in keys) == (gpu_type is not None)
    preferred = [
        t["preference"]["matchExpressions"][0]["key"]
        for t in node_aff.get("preferredDuringSchedulingIgnoredDuringExecution", [])
    ]
    datasets = ["gpu-dag.io/dataset-c4-en", "gpu-dag.io/dataset-wiki_2026"]
    assert preferred == (datasets if data == "prefer" else [])
    assert all((k in keys) == (data == "require") for k in datasets)
    expected_priority = {None: None, "explicit": "team-high", "critical": "gpu-critical"}[priority]
    assert spec.get("priorityClassName") == expected_priority  # a lone task is critical
    annotations = meta.get("annotations") or {}
    if mode.startswith("volcano"):
        assert spec["schedulerName"] == "volcano"
        assert "scheduling.k8s.io/group-name" in annotations or mode == "volcano"
    else:
        assert "schedulerName" not in spec
        assert "scheduling.k8s.io/group-name" not in annotations
    if mode.startswith("kueue"):
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    else:
        assert "kueue.x-k8s.io/queue-name" not in meta["labels"]
    assert op.pool == ("gpu_a100" if gpu_type else "gpu_default") and op.pool_slots == 4
    hints = op.executor_config["gpu_dag"]
    assert hints == {
        "duration_s": 7200.0,
        "gpus": 4,
        "gpu_memory_mib": 81920,
        **({"gpu_type": "a100"} if gpu_type else {}),
    }


def test_gang_pods_share_a_schema_valid_podgroup_created_through_the_hook():
    with _dag("gang") as dag:
        ops = [
            GpuKubernetesPodOperator(
                task_id=f"worker_{i}",
                image="img",
                namespace="ml",
                gpus=8,
                gpu_type="h100",
                volcano=True,
                volcano_queue="training",
                volcano_gang="ddp",
                volcano_gang_size=2,
                critical_priority_class="gpu-critical",
                durable=False,
                log_events_on_startup=False,
            )
            for i in range(2)
        ]
    pods = [_build(op, dag) for op in ops]
    groups = {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods}
    assert len(groups) == 1
    manifest = ops[0].podgroup_manifest(_context(dag, "worker_0"), "ml")
    validate_podgroup(manifest)
    assert manifest["metadata"]["name"] == groups.pop()
    assert manifest["spec"] == {
        "minMember": 2,
        "queue": "training",
        "priorityClassName": "gpu-critical",
        "minResources": {"nvidia.com/gpu": "16"},
    }

    hook = mock.Mock()
    ops[0].__dict__["hook"] = hook
    pod_manager = mock.Mock()
    ops[0].__dict__["pod_manager"] = pod_manager
    request = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="p", namespace="ml"))
    ops[0].get_or_create_pod(request, _context(dag, "worker_0"))
    hook.create_custom_object.assert_called_once()
    assert hook.create_custom_object.call_args.kwargs["body"] == manifest
    assert hook.create_custom_object.call_args.kwargs["plural"] == "podgroups"
    pod_manager.create_pod.assert_called_once_with(pod=request)


def test_priority_class_follows_the_critical_path():
    with _dag("cp") as dag:
        long_op = GpuKubernetesPodOperator(
            task_id="pretrain",
            image="i",
            namespace="ml",
            gpus=8,
            duration="4h",
            critical_priority_class="gpu-critical",
            noncritical_priority_class="gpu-batch",
        )
        short_op = GpuKubernetesPodOperator(
            task_id="probe",
            image="i",
            namespace="ml",
            gpus=1,
            duration="10m",
            critical_priority_class="gpu-critical",
            noncritical_priority_class="gpu-batch",
        )
        join = GpuKubernetesPodOperator(task_id="eval", image="i", namespace="ml", gpus=1, duration="30m")
        [long_op, short_op] >> join
    assert _build(long_op, dag)["spec"]["priorityClassName"] == "gpu-critical"
    assert _build(short_op, dag)["spec"]["priorityClassName"] == "gpu-batch"
    assert "priorityClassName" not in _build(join, dag)["spec"]


def test_user_affinity_tolerations_resources_and_executor_config_are_merged_not_clobbered():
    with _dag() as dag:
        op = GpuKubernetesPodOperator(
            task_id="t",
            image="i",
            namespace="ml",
            gpus=2,
            gpu_type="a100",
            container_resources=k8s.V1ResourceRequirements(requests={"cpu": "8"}, limits={"memory": "64Gi"}),
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["eu-1"]}]}
                        ]
                    }
                }
            },
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            executor_config={"pod_override": {"x": 1}, "gpu_dag": {"inputs": ["s3://a"]}},
            pool="my_pool",
        )
    pod = _build(op, dag)
    _validate(pod)
    term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]
    assert [e["key"] for e in term["matchExpressions"]] == ["zone", "nvidia.com/gpu.product"]
    assert [t["key"] for t in pod["spec"]["tolerations"]] == ["dedicated", "nvidia.com/gpu"]
    res = pod["spec"]["containers"][0]["resources"]
    assert res == {
        "requests": {"cpu": "8", "nvidia.com/gpu": "2"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": "2"},
    }
    assert op.executor_config["pod_override"] == {"x": 1}
    assert (
        op.executor_config["gpu_dag"]["inputs"] == ["s3://a"] and op.executor_config["gpu_dag"]["gpus"] == 2
    )
    assert op.pool == "my_pool" and op.pool_slots == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gpus": 0}, r"k8s_gpu\.bad: GPU count 0 must be at least 1"),
        ({"gpus": -1}, "at least 1"),
        ({"gpus": 1, "gpu_type": "b300"}, r"unknown gpu_type 'b300'.*gpu_products="),
        ({"gpus": 1, "gpu_memory": "eighty gigs"}, "cannot be parsed"),
        ({"gpus": 1, "data_affinity": "always", "datasets": ["x"]}, "'prefer'"),
        ({"gpus": 1, "volcano": True}, "volcano_queue="),
        ({"gpus": 1, "volcano_queue": "q"}, "add volcano=True"),
        ({"gpus": 1, "volcano": True, "volcano_queue": "q", "volcano_gang_size": 3}, "volcano_gang="),
        (
            {"gpus": 1, "volcano": True, "volcano_queue": "q", "schedulername": "yunikorn"},
            "remove schedulername",
        ),
        (
            {"gpus": 1, "volcano": True, "volcano_gang": "g", "volcano_pod_group": "p", "volcano_queue": "q"},
            "not both",
        ),
        ({"gpus": 1, "kueue": True}, "kueue_queue="),
        ({"gpus": 1, "kueue_queue": "q"}, "add kueue=True"),
        ({"gpus": 1, "kueue": True, "kueue_queue": "bad queue"}, "label value"),
        ({"gpus": 1, "kueue": True, "kueue_queue": "q", "volcano": True, "volcano_queue": "q"}, "not both"),
        ({"gpus": 2, "container_resources": {"limits": {"nvidia.com/gpu": "4"}}}, "only through gpus="),
    ],
)
def test_bad_input_fails_at_parse_time_naming_dag_task_and_fix(kwargs, match):
    with _dag(), pytest.raises(GpuPodConfigError, match=match) as err:
        GpuKubernetesPodOperator(task_id="bad", image="i", **kwargs)
    assert "k8s_gpu.bad" in str(err.value)


def test_gpu_pod_kwargs_reuse_the_providers_kueue_job_operator():
    with _dag("kueue_job") as dag:
        op = KubernetesStartKueueJobOperator(
            queue_name="team-a",
            **gpu_pod_kwargs(
                task_id="train_job",
                image="i",
                namespace="ml",
                gpus=4,
                gpu_type="h100",
                datasets=["c4"],
                duration="1h",
            ),
        )
    hook = mock.Mock(is_in_cluster=False)
    op.__dict__["hook"] = hook
    job = SER(op.build_job_request_obj(_context(dag, op.task_id)))
    _validate(job)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    template = job["spec"]["template"]["spec"]
    assert template["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert op.pool == "gpu_h100" and op.pool_slots == 4


# -- a pod that is never scheduled ----------------------------------------------------------------


def _pending_pod(scheduled: bool) -> k8s.V1Pod:
    cond = k8s.V1PodCondition(
        type="PodScheduled",
        status="True" if scheduled else "False",
        reason=None if scheduled else "Unschedulable",
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="train-abc", namespace="ml"),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base", image="i")]),
        status=k8s.V1PodStatus(phase="Pending", conditions=[cond]),
    )


def _run_sync(scheduled: bool, on_finish_action: str = "keep_pod") -> tuple[Any, mock.Mock, Exception]:
    with _dag("unsched") as dag:
        op = GpuKubernetesPodOperator(
            task_id="train",
            image="i",
            namespace="ml",
            gpus=8,
            schedule_timeout_seconds=5,
            durable=False,
            log_events_on_startup=False,
            get_logs=False,
            on_finish_action=on_finish_action,
        )
    remote = _pending_pod(scheduled)
    pod_manager = mock.Mock()
    pod_manager.create_pod.side_effect = lambda pod: pod
    pod_manager.read_pod.return_value = remote

    async def never_scheduled(**kwargs: Any) -> None:
        raise PodLaunchTimeoutException(
            "Pod took too long to be scheduled on the cluster, giving up. More than 5s."
            if not scheduled
            else "Pod took too long to start. More than 120s."
        )

    pod_manager.await_pod_start.side_effect = never_scheduled
    op.__dict__["pod_manager"] = pod_manager
    op.__dict__["client"] = mock.Mock()
    ti = mock.Mock(dag_id="unsched", task_id="train", map_index=-1, try_number=1)
    with mock.patch(HOOK) as hook, mock.patch.object(type(op), "find_pod", return_value=remote):
        hook.return_value.is_in_cluster = False
        with pytest.raises(AirflowException) as err:
            op.execute(_context(dag, "train", ti=ti))
    return ti, pod_manager, err.value


def test_unscheduled_pod_is_deleted_and_fails_as_not_started_without_retry():
    ti, pod_manager, err = _run_sync(scheduled=False, on_finish_action="keep_pod")
    assert isinstance(err, GpuPodNotScheduled)
    assert isinstance(err, NotStartedInTime) and isinstance(err, AirflowFailException)  # no retries
    assert "was not scheduled within 5s" in str(err)
    pod_manager.delete_pod.assert_called_once()  # even with keep_pod: it must not start later
    marks = [c for c in ti.xcom_push.call_args_list if c.kwargs.get("key") == FALLBACK_XCOM_KEY]
    assert len(marks) == 1 and marks[0].kwargs["value"]["outcome"] == "not_started"


def test_scheduled_but_not_started_pod_keeps_the_providers_failure():
    ti, _, err = _run_sync(scheduled=True, on_finish_action="delete_pod")
    assert not isinstance(err, NotStartedInTime)
    assert not [c for c in ti.xcom_push.call_args_list if c.kwargs.get("key") == FALLBACK_XCOM_KEY]


def test_deferrable_timeout_of_an_unscheduled_pod_is_not_started():
    with _dag("unsched_defer") as dag:
        op = GpuKubernetesPodOperator(
            task_id="train",
            image="i",
            namespace="ml",
            gpus=2,
            deferrable=True,
            get_logs=False,
            on_finish_action="keep_pod",
        )
    remote = _pending_pod(False)
    hook = mock.Mock()
    hook.get_pod.return_value = remote
    op.__dict__["hook"] = hook
    pod_manager = mock.Mock()
    pod_manager.read_pod.return_value = remote
    op.__dict__["pod_manager"] = pod_manager
    op.__dict__["client"] = mock.Mock()
    ti = mock.Mock()
    event = {
        "name": "train-abc",
        "namespace": "ml",
        "status": "timeout",
        "message": "Pod took too long to be scheduled",
    }
    with pytest.raises(GpuPodNotScheduled):
        op.trigger_reentry(_context(dag, "train", ti=ti), event)
    pod_manager.delete_pod.assert_called_once()
    assert any(c.kwargs.get("key") == FALLBACK_XCOM_KEY for c in ti.xcom_push.call_args_list)


def test_reports_not_started_for_the_fallback_ladder():
    assert GpuKubernetesPodOperator.reports_not_started is True


def test_dag_with_gpu_pods_serializes_and_keeps_the_hints():
    from airflow.serialization.serialized_objects import DagSerialization

    with _dag("serial") as dag:
        GpuKubernetesPodOperator(
            task_id="train",
            image="i",
            namespace="ml",
            gpus=4,
            gpu_type="a100",
            duration="1h",
            datasets=["c4"],
            volcano=True,
            volcano_queue="training",
            volcano_gang="ddp",
            volcano_gang_size=2,
        )
    restored = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    task = restored.task_dict["train"]
    assert task.executor_config["gpu_dag"]["gpus"] == 4
    assert (task.pool, task.pool_slots) == ("gpu_a100", 4)
