"""GpuKubernetesPodOperator: pods built without a cluster and validated against the Kubernetes OpenAPI schema.

Pods are built with the provider's own ``build_pod_request_obj(context)`` while its ``KubernetesHook`` is
patched (as the provider's tests do), serialized with ``ApiClient().sanitize_for_serialization`` and
validated with ``kubernetes_validate`` (Kubernetes 1.37 schema, strict: unknown fields are errors).
Nothing here talks to a cluster."""

from __future__ import annotations

import itertools
import re
from typing import Any
from unittest import mock

import pytest
from kubernetes.client import models as k8s

from airflow_gpu_dag.operators.fallback import FALLBACK_XCOM_KEY
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator, GpuPodNotScheduled
from tests.unit.operators.conftest import _build, _context, _dag, _validate, pending_pod, pod_dag

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
    remote = pending_pod(False)
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


def test_valid_existing_pod_group_names_are_kept() -> None:
    with pod_dag("pg_ok"):
        op = GpuKubernetesPodOperator(
            task_id="t", image="i", gpus=1, volcano=True, volcano_pod_group="nightly-eval.v2"
        )
    assert op.annotations["scheduling.k8s.io/group-name"] == "nightly-eval.v2"


def test_a_mapped_gpu_pod_keeps_the_dags_default_executor_config() -> None:
    # .partial() leaves executor_config to Airflow, which fills it from default_args: a mapped task
    # keeps the DAG's pod_override just as an unmapped one does.
    override = k8s.V1Pod(metadata=k8s.V1ObjectMeta(labels={"team": "ml"}))
    with pod_dag("mapped_ec", default_args={"executor_config": {"pod_override": override}}):
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
    with pod_dag("mapped_ec2", default_args={"executor_config": {"pod_override": override}}):
        own = GpuKubernetesPodOperator.partial(
            task_id="m", image="i", gpus=1, default_args={"executor_config": {"pod_override": other}}
        ).expand(arguments=[["a"]])
    assert own.partial_kwargs["executor_config"]["pod_override"] is other


def test_a_kueue_pod_group_is_one_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kueue_pod_group="g1"`` put the pods of every run into one Kueue pod group: two overlapping runs of
    the DAG made a group of four pods declaring a total count of two. The label now names the run's
    group, as a Volcano gang's PodGroup does; the pods of one run share it."""
    from tests.unit.operators.conftest import _build as _build_manifest
    from tests.unit.operators.conftest import _dag as _k8s_dag
    from tests.unit.operators.conftest import _validate

    with _k8s_dag("kueue_runs") as dag:
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
    first = [_build_manifest(op, dag) for op in ops]
    for pod in first:
        _validate(pod)
    groups = {pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for pod in first}
    assert len(groups) == 1 and next(iter(groups)).startswith("kueue-runs-g1-")
    assert {pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for pod in first} == {"2"}

    import tests.unit.operators.conftest as operator_tests

    real_context = operator_tests._context

    def other_run(dag: Any, task_id: str) -> Any:
        context = real_context(dag, task_id)
        context["run_id"] = "manual__2026-12-03T10:00:00+00:00"
        return context

    monkeypatch.setattr(operator_tests, "_context", other_run)
    second = _build_manifest(ops[0], dag)
    assert second["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] not in groups


def _on_demand() -> k8s.V1Affinity:
    term = k8s.V1NodeSelectorTerm(
        match_expressions=[k8s.V1NodeSelectorRequirement(key="capacity", operator="In", values=["on-demand"])]
    )
    return k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(node_selector_terms=[term])
        )
    )


def _required(pod: dict) -> list[tuple[str, tuple[str, ...]]]:
    (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return [(e["key"], tuple(e.get("values") or ())) for e in term["matchExpressions"]]


TEMPLATE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "tpl"},
    "spec": {
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ml"]}]}
                    ]
                }
            }
        },
        "containers": [
            {
                "name": "base",
                "image": "x",
                "resources": {"requests": {"memory": "200Gi", "cpu": "32"}, "limits": {"memory": "200Gi"}},
            }
        ],
    },
}


def test_a_shared_affinity_object_is_not_written_into() -> None:
    shared = _on_demand()
    dag = _dag()
    with dag:
        a = GpuKubernetesPodOperator(task_id="a", image="x", gpus=1, gpu_type="a100", affinity=shared)
        b = GpuKubernetesPodOperator(task_id="b", image="x", gpus=1, gpu_type="h100", affinity=shared)
    pod_a, pod_b = _build(a, dag), _build(b, dag)
    for pod in (pod_a, pod_b):
        _validate(pod)
    products_a = [v for k, v in _required(pod_a) if k == "nvidia.com/gpu.product"]
    products_b = [v for k, v in _required(pod_b) if k == "nvidia.com/gpu.product"]
    assert len(products_a) == 1 and all("A100" in p for p in products_a[0])
    assert len(products_b) == 1 and all("H100" in p for p in products_b[0])
    assert ("capacity", ("on-demand",)) in _required(pod_a) and ("capacity", ("on-demand",)) in _required(
        pod_b
    )
    shared_terms = (
        shared.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    )
    assert [e.key for e in shared_terms[0].match_expressions] == ["capacity"]  # the user's object unchanged


def test_a_mapped_gpu_pod_is_scheduled_in_its_gpu_pool_and_checked_at_parse_time() -> None:
    # .partial() is the GPU operator's, not KubernetesPodOperator's (default_pool, one slot, no hints,
    # no checks): the mapped pod gets its GPU pool, slots and hints, and bad requests fail at parse time.
    import pytest

    from airflow_gpu_dag.executor_config import read_hints
    from airflow_gpu_dag.operators.kubernetes import GpuPodConfigError

    dag = _dag()
    with dag:
        GpuKubernetesPodOperator.partial(
            task_id="sweep", image="x", gpus=4, gpu_type="a100", duration="1h"
        ).expand(arguments=[["--lr", "0.1"], ["--lr", "0.01"]])
        with pytest.raises(GpuPodConfigError, match=r"k8s_gpu\.bad: unknown gpu_type 'b300'"):
            GpuKubernetesPodOperator.partial(task_id="bad", image="x", gpus=1, gpu_type="b300")
        with pytest.raises(GpuPodConfigError, match="volcano=True needs volcano_queue"):
            GpuKubernetesPodOperator.partial(task_id="v", image="x", gpus=1, volcano=True)
        with pytest.raises(GpuPodConfigError, match=r"give gpus= in \.partial"):
            GpuKubernetesPodOperator.partial(task_id="g", image="x")
    sweep = dag.get_task("sweep")
    hints = read_hints(sweep.partial_kwargs["executor_config"])
    assert (sweep.pool, sweep.pool_slots, hints["gpus"], hints["gpu_type"]) == ("gpu_a100", 4, 4, "a100")


def test_default_args_are_merged_with_the_gpu_parts_not_replaced() -> None:
    # The operator merges its tolerations, affinity, resources, hints, labels and annotations into
    # those of default_args; giving the base class its own would keep Airflow from filling them.
    defaults = {
        "pool": "team_cpu",  # a DAG-wide pool: the GPU pod keeps its GPU pool
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["eu-1"]}]}
                    ]
                }
            }
        },
        "container_resources": {"limits": {"memory": "64Gi"}, "requests": {"memory": "64Gi", "cpu": "8"}},
        "labels": {"team": "nlp"},
        "annotations": {"owner": "me"},
    }
    dag = _dag()
    dag.default_args = defaults
    with dag:
        op = GpuKubernetesPodOperator(task_id="train", image="x", gpus=4, gpu_type="a100")
    pod = _build(op, dag)
    _validate(pod)
    assert (op.pool, op.pool_slots) == ("gpu_a100", 4)
    assert {t["key"] for t in pod["spec"]["tolerations"]} == {"spot", "nvidia.com/gpu"}
    required = dict(_required(pod))
    assert required["zone"] == ("eu-1",) and "nvidia.com/gpu.product" in required
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "64Gi", "nvidia.com/gpu": "4"}
    assert resources["requests"]["cpu"] == "8" and resources["requests"]["nvidia.com/gpu"] == "4"
    assert pod["metadata"]["labels"]["team"] == "nlp" and pod["metadata"]["annotations"]["owner"] == "me"


def test_a_pod_templates_tolerations_affinity_and_resources_are_kept() -> None:
    # The operator's tolerations, affinity and resources add to the template's rather than replace
    # them: the pod keeps its toleration of the tainted ML nodes and its 200Gi memory request.
    dag = _dag()
    with dag:
        op = GpuKubernetesPodOperator(task_id="gpu", gpus=8, gpu_type="h100", pod_template_dict=TEMPLATE)
        explicit = GpuKubernetesPodOperator(
            task_id="explicit",
            gpus=1,
            pod_template_dict=TEMPLATE,
            tolerations=[k8s.V1Toleration(key="spot", operator="Exists", effect="NoSchedule")],
        )
    pod = _build(op, dag)
    _validate(pod)
    assert {t["key"] for t in pod["spec"]["tolerations"]} == {"dedicated", "nvidia.com/gpu"}
    required = dict(_required(pod))
    assert required["pool"] == ("ml",) and "nvidia.com/gpu.product" in required
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"memory": "200Gi", "cpu": "32", "nvidia.com/gpu": "8"}
    assert resources["limits"] == {"memory": "200Gi", "nvidia.com/gpu": "8"}
    # what the task gives itself still wins over the template, as in the provider
    given = _build(explicit, dag)
    assert {t["key"] for t in given["spec"]["tolerations"]} == {"spot", "nvidia.com/gpu"}


# -- "not scheduled in time", charging, PodGroups: the provider's own steps patched out ---------------------
def _op(dag_id: str = "k8s_gpu", **kwargs: Any) -> GpuKubernetesPodOperator:
    """Task ``train`` (2 GPUs, namespace ``ml``) with its pod manager and hook faked."""
    with _dag(dag_id):
        op = GpuKubernetesPodOperator(
            task_id="train", image="i", namespace="ml", gpus=2, get_logs=False, **kwargs
        )
    op.__dict__["pod_manager"] = mock.Mock()
    op.__dict__["hook"] = mock.Mock()
    op.__dict__["client"] = mock.Mock()
    return op


@pytest.fixture
def charged(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every ``charge_finished_pod`` call of the operator module, instead of charging."""
    import airflow_gpu_dag.operators.kubernetes as module

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(
        module, "charge_finished_pod", lambda pod, **kwargs: calls.append({"pod": pod, **kwargs})
    )
    return calls


def _phase(phase: str | None, conditions: list[Any] | None = None) -> k8s.V1Pod:
    return k8s.V1Pod(status=k8s.V1PodStatus(phase=phase, conditions=conditions))


@pytest.mark.parametrize(
    ("pod", "scheduled"),
    [
        (k8s.V1Pod(status=None), False),
        (_phase("Running"), True),
        (_phase("Succeeded"), True),
        (_phase("Failed"), True),
        (_phase("Pending"), False),
        (_phase(None), False),
        (_phase("Unknown"), False),
        (pending_pod(True), True),
        (pending_pod(False), False),
        (_phase("Pending", [k8s.V1PodCondition(type="Ready", status="True")]), False),
    ],
)
def test_a_pod_counts_as_scheduled_once_bound_to_a_node_or_past_pending(pod: Any, scheduled: bool) -> None:
    from airflow_gpu_dag.operators.kubernetes import _pod_scheduled

    assert _pod_scheduled(pod) is scheduled


def _launch_timeout(message: str = "Pod took too long to be scheduled on the cluster, giving up.") -> Any:
    from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchTimeoutException

    return PodLaunchTimeoutException(message)


def test_an_unscheduled_pod_at_the_timeout_is_not_started_naming_the_task_and_its_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    from airflow_gpu_dag.operators.fallback import NotStartedInTime

    op = _op(schedule_timeout_seconds=1200)
    op.pod_manager.read_pod.return_value = pending_pod(False)
    monkeypatch.setattr(KubernetesPodOperator, "await_pod_start", mock.Mock(side_effect=_launch_timeout()))
    with pytest.raises(GpuPodNotScheduled) as raised:
        op.await_pod_start(pending_pod(False))
    assert isinstance(raised.value, NotStartedInTime)
    message = str(raised.value)
    assert "pod train-abc of k8s_gpu.train (2 GPU) was not scheduled within 1200s" in message
    assert op._not_scheduled == message


def test_a_scheduled_pod_that_did_not_start_fails_as_in_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scheduled but not started (image pull, ...): retried as usual, not reported as "not started"."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    op = _op()
    op.pod_manager.read_pod.return_value = pending_pod(True)
    error = _launch_timeout("Pod took too long to start. More than 120s.")
    monkeypatch.setattr(KubernetesPodOperator, "await_pod_start", mock.Mock(side_effect=error))
    with pytest.raises(type(error)) as raised:
        op.await_pod_start(pending_pod(True))
    assert raised.value is error and op._not_scheduled is None


@pytest.mark.parametrize(
    ("message", "not_started"),
    [
        ("Pod took too long to be scheduled on the cluster, giving up. More than 600s.", True),
        ("Pod took too long to start. More than 120s.", False),
    ],
)
def test_without_the_api_the_providers_message_tells_unscheduled_from_not_started(
    monkeypatch: pytest.MonkeyPatch, message: str, not_started: bool
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    op = _op()
    op.pod_manager.read_pod.side_effect = RuntimeError("api-server unreachable")
    monkeypatch.setattr(
        KubernetesPodOperator, "await_pod_start", mock.Mock(side_effect=_launch_timeout(message))
    )
    with pytest.raises(GpuPodNotScheduled if not_started else type(_launch_timeout())):
        op.await_pod_start(pending_pod(False))
    assert (op._not_scheduled is not None) is not_started


def test_an_unscheduled_pod_is_deleted_even_when_asked_to_keep_it_and_is_not_charged(
    monkeypatch: pytest.MonkeyPatch, charged: list[dict[str, Any]]
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    provider_cleanup = mock.Mock()
    monkeypatch.setattr(KubernetesPodOperator, "cleanup", provider_cleanup)
    op = _op(on_finish_action="keep_pod")
    op._not_scheduled = "not scheduled"
    local, remote = pending_pod(False), pending_pod(False)
    op.cleanup(local, remote)
    op.pod_manager.delete_pod.assert_called_once_with(remote)
    provider_cleanup.assert_not_called()
    assert charged == []
    # the remote pod could not be read: the local one is deleted
    op.pod_manager.delete_pod.reset_mock()
    op.cleanup(local, None)  # type: ignore[arg-type]
    op.pod_manager.delete_pod.assert_called_once_with(local)


def test_a_failed_delete_of_an_unscheduled_pod_is_logged_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    op = _op()
    op._not_scheduled = "not scheduled"
    op.pod_manager.delete_pod.side_effect = RuntimeError("forbidden")
    op.cleanup(pending_pod(False), pending_pod(False))  # no exception: the task fails as not started
    op.pod_manager.delete_pod.assert_called_once()


def test_a_finished_pod_is_charged_before_the_providers_cleanup(
    monkeypatch: pytest.MonkeyPatch, charged: list[dict[str, Any]]
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    charges_seen: list[int] = []  # how many charges the provider's cleanup found made
    monkeypatch.setattr(
        KubernetesPodOperator, "cleanup", lambda *args, **kwargs: charges_seen.append(len(charged))
    )
    op = _op(gpu_type="a100")
    remote = pending_pod(True)
    context = {"ti": mock.Mock(), "run_id": "r1"}
    op.cleanup(pending_pod(True), remote, context=context)  # type: ignore[arg-type]
    assert charges_seen == [1]  # charged first: the provider's cleanup may delete the pod
    (call,) = charged
    assert call["pod"] is remote and call["context"] is context
    assert (call["gpus"], call["pool"], call["container"]) == (2, "gpu_a100", "base")
    # reading the pod again goes through the pod manager, and only when asked
    op.pod_manager.read_pod.assert_not_called()
    call["reread"](remote)
    op.pod_manager.read_pod.assert_called_once_with(remote)


def test_a_killed_or_never_created_pod_is_not_charged_at_cleanup(
    monkeypatch: pytest.MonkeyPatch, charged: list[dict[str, Any]]
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    provider_cleanup = mock.Mock()
    monkeypatch.setattr(KubernetesPodOperator, "cleanup", provider_cleanup)
    op = _op()
    op.cleanup(pending_pod(True), None)  # type: ignore[arg-type]
    op._killed = True  # on_kill charged it already
    op.cleanup(pending_pod(True), pending_pod(True))
    assert charged == [] and provider_cleanup.call_count == 2


def test_a_killed_task_charges_its_pod_with_executes_context_before_the_pod_is_deleted(
    monkeypatch: pytest.MonkeyPatch, charged: list[dict[str, Any]]
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    deleted: list[int] = []
    monkeypatch.setattr(KubernetesPodOperator, "on_kill", lambda self: deleted.append(len(charged)))
    op = _op()
    op.on_kill()  # no pod yet: nothing to charge
    assert charged == [] and deleted == [0]
    context = {"ti": mock.Mock(), "run_id": "r1"}
    op._run_context = context
    op.pod = pending_pod(True)
    op.on_kill()
    assert deleted == [0, 1]  # charged first, then the provider deletes the pod
    assert charged[0]["pod"] is op.pod and charged[0]["context"] is context


def test_execute_records_not_started_for_the_fallback_ladder(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    op = _op()
    ti = mock.Mock()
    context = _context(_dag(), "train", ti=ti)
    monkeypatch.setattr(
        KubernetesPodOperator, "execute", mock.Mock(side_effect=GpuPodNotScheduled("no node"))
    )
    with pytest.raises(GpuPodNotScheduled):
        op.execute(context)  # type: ignore[arg-type]
    ti.xcom_push.assert_called_once_with(
        key=FALLBACK_XCOM_KEY, value={"outcome": "not_started", "reason": "no node"}
    )
    assert op._run_context is context
    # any other failure is the provider's: no "not started" record
    ti.reset_mock()
    monkeypatch.setattr(KubernetesPodOperator, "execute", mock.Mock(side_effect=RuntimeError("OOMKilled")))
    with pytest.raises(RuntimeError):
        op.execute(context)  # type: ignore[arg-type]
    ti.xcom_push.assert_not_called()


@pytest.mark.parametrize(
    ("event_status", "remote", "not_started"),
    [
        ("timeout", pending_pod(False), True),
        ("timeout", pending_pod(True), False),  # scheduled, then did not start: the provider's failure
        ("error", pending_pod(False), False),  # only the trigger's timeout means "not scheduled in time"
    ],
)
def test_a_deferred_pod_is_not_started_only_when_its_timeout_finds_it_unscheduled(
    monkeypatch: pytest.MonkeyPatch, event_status: str, remote: k8s.V1Pod, not_started: bool
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from airflow.sdk.exceptions import AirflowException

    failure = AirflowException("Pod train-abc returned a failure")
    monkeypatch.setattr(KubernetesPodOperator, "trigger_reentry", mock.Mock(side_effect=failure))
    op = _op(deferrable=True)
    op.hook.get_pod.return_value = remote
    ti = mock.Mock()
    event = {"name": "train-abc", "namespace": "ml", "status": event_status}
    with pytest.raises(AirflowException) as raised:
        op.trigger_reentry(_context(_dag(), "train", ti=ti), event)
    assert isinstance(raised.value, GpuPodNotScheduled) is not_started
    assert ti.xcom_push.called is not_started


def test_a_deferred_timeout_whose_pod_cannot_be_read_is_the_providers_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from airflow.sdk.exceptions import AirflowException

    failure = AirflowException("Pod train-abc not found")
    monkeypatch.setattr(KubernetesPodOperator, "trigger_reentry", mock.Mock(side_effect=failure))
    op = _op(deferrable=True)
    op.hook.get_pod.side_effect = RuntimeError("api-server unreachable")
    with pytest.raises(AirflowException) as raised:
        op.trigger_reentry(
            _context(_dag(), "train", ti=mock.Mock()), {"name": "p", "namespace": "ml", "status": "timeout"}
        )
    assert raised.value is failure


def test_a_gangs_podgroup_is_created_before_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    import airflow_gpu_dag.operators.kubernetes as module

    order: list[str] = []
    ensure = mock.Mock(side_effect=lambda *args: order.append("podgroup") or True)
    monkeypatch.setattr(module, "ensure_podgroup", ensure)
    monkeypatch.setattr(
        KubernetesPodOperator, "get_or_create_pod", lambda self, pod, context: order.append("pod") or pod
    )
    op = _op(
        volcano=True,
        volcano_queue="training",
        volcano_gang="ddp",
        volcano_gang_size=4,
        priority_class_name="hi",
    )
    pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="train-abc", namespace="ml"))
    context = _context(_dag(), "train")
    assert op.get_or_create_pod(pod, context) is pod  # type: ignore[arg-type]
    assert order == ["podgroup", "pod"]
    hook, manifest, namespace = ensure.call_args.args
    assert hook is op.hook and namespace == "ml"
    assert manifest["metadata"]["name"] == op.pod_group_name(context)  # type: ignore[arg-type]
    assert manifest["spec"]["minMember"] == 4 and manifest["spec"]["queue"] == "training"
    assert manifest["spec"]["minResources"] == {"nvidia.com/gpu": "8"}  # 2 GPUs x 4 pods
    assert manifest["spec"]["priorityClassName"] == "hi"


def test_an_existing_podgroup_is_joined_not_created(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    import airflow_gpu_dag.operators.kubernetes as module

    ensure = mock.Mock()
    monkeypatch.setattr(module, "ensure_podgroup", ensure)
    monkeypatch.setattr(KubernetesPodOperator, "get_or_create_pod", lambda self, pod, context: pod)
    op = _op(volcano=True, volcano_pod_group="nightly-eval")
    pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="train-abc", namespace="ml"))
    op.get_or_create_pod(pod, _context(_dag(), "train"))  # type: ignore[arg-type]
    ensure.assert_not_called()
    assert op.podgroup_manifest(None, "ml") is None and op.pod_group_name(None) == "nightly-eval"
    assert _op().pod_group_name(None) is None  # not Volcano: no PodGroup


def test_a_podgroup_that_cannot_be_valid_fails_naming_the_dag_and_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.sdk.exceptions import AirflowException

    import airflow_gpu_dag.operators.kubernetes as module
    from airflow_gpu_dag.kubernetes.volcano import PodGroupError

    op = _op(volcano=True, volcano_queue="training", volcano_gang="ddp", volcano_gang_size=2)
    monkeypatch.setattr(
        module, "podgroup_manifest", mock.Mock(side_effect=PodGroupError("minMember 0 must be"))
    )
    pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="train-abc", namespace="ml"))
    with pytest.raises(AirflowException, match=r"^k8s_gpu\.train: minMember 0 must be"):
        op.get_or_create_pod(pod, _context(_dag(), "train"))  # type: ignore[arg-type]


def test_a_gangs_podgroup_is_one_per_run_and_named_for_kubernetes() -> None:
    op = _op(
        dag_id="Données_Nightly",
        volcano=True,
        volcano_queue="q",
        volcano_gang="DDP workers",
        volcano_gang_size=2,
    )
    first = op.pod_group_name({"run_id": "manual__2026-12-01T00:00:00+00:00"})  # type: ignore[arg-type]
    again = op.pod_group_name({"run_id": "manual__2026-12-01T00:00:00+00:00"})  # type: ignore[arg-type]
    other = op.pod_group_name({"run_id": "manual__2026-12-02T00:00:00+00:00"})  # type: ignore[arg-type]
    assert first == again and first != other
    for name in (first, other, op.pod_group_name(None)):
        assert name is not None and len(name) <= 63
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name


def test_a_failed_critical_path_analysis_falls_back_to_the_noncritical_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import airflow_gpu_dag.operators.kubernetes as module

    monkeypatch.setattr(module, "build_task_graph", mock.Mock(side_effect=ValueError("cycle")))
    op = _op(critical_priority_class="gpu-critical", noncritical_priority_class="gpu-batch")
    assert op._critical_priority_class() == "gpu-batch"
    assert _op()._critical_priority_class() is None  # no classes given: no analysis at all


# -- parse-time checks of the scheduler modes ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"volcano": True, "kueue": True, "volcano_queue": "q", "kueue_queue": "q"}, "choose Volcano"),
        ({"volcano_queue": "q"}, "only apply with volcano=True; add volcano=True"),
        ({"volcano_gang_size": 4}, "only apply with volcano=True; add volcano=True"),
        ({"volcano_gang_size": True}, "only apply with volcano=True; add volcano=True"),
        ({"kueue_queue": "q"}, "only apply with kueue=True; add kueue=True"),
        ({"kueue": True}, "kueue=True needs kueue_queue="),
        ({"kueue": True, "kueue_queue": "q", "kueue_pod_group_size": 2}, "needs kueue_pod_group="),
        ({"volcano": True}, "volcano=True needs volcano_queue="),
        (
            {"volcano": True, "volcano_queue": "q", "schedulername": "default-scheduler"},
            "remove schedulername=",
        ),
        (
            {"volcano": True, "volcano_queue": "q", "volcano_gang": "g", "volcano_pod_group": "pg"},
            "either volcano_gang .* or volcano_pod_group",
        ),
        (
            {"volcano": True, "volcano_queue": "q", "volcano_gang_size": 0},
            r"volcano_gang_size=0 must be an int >= 1",
        ),
        (
            {"volcano": True, "volcano_queue": "q", "volcano_gang_size": True},
            "volcano_gang_size=True must be",
        ),
        ({"volcano": True, "volcano_queue": "q", "volcano_gang_size": 2.0}, "volcano_gang_size=2.0 must be"),
        ({"volcano": True, "volcano_queue": "q", "volcano_gang_size": 2}, "needs volcano_gang="),
        (
            {"volcano": True, "volcano_queue": "q", "volcano_gang": "  "},
            "volcano_gang must be a non-empty name",
        ),
        ({"volcano": True, "volcano_pod_group": "Nightly"}, "cannot name a PodGroup"),
        ({"volcano": True, "volcano_pod_group": "nightly_eval"}, "cannot name a PodGroup"),
        ({"volcano": True, "volcano_pod_group": "évaluation"}, "cannot name a PodGroup"),
        ({"volcano": True, "volcano_pod_group": "a" * 254}, "cannot name a PodGroup"),
        ({"volcano": True, "volcano_pod_group": "nightly-"}, "cannot name a PodGroup"),
    ],
)
def test_a_bad_scheduler_mode_is_refused_at_parse_time_naming_the_task(
    kwargs: dict[str, Any], message: str
) -> None:
    from airflow_gpu_dag.operators.kubernetes import GpuPodConfigError

    with (
        _dag(),
        pytest.raises(GpuPodConfigError, match=r"^GpuKubernetesPodOperator k8s_gpu\.t: .*" + message),
    ):
        GpuKubernetesPodOperator(task_id="t", image="i", gpus=1, **kwargs)
    # .partial() checks the same
    with _dag(), pytest.raises(GpuPodConfigError, match=message):
        GpuKubernetesPodOperator.partial(task_id="t", image="i", gpus=1, **kwargs)


def test_a_pod_group_name_of_253_characters_is_accepted() -> None:
    name = ".".join(["a" * 63] * 4)[:253].rstrip(".")
    op = _op(volcano=True, volcano_pod_group=name)
    assert op.pod_group_name(None) == name


@pytest.mark.parametrize("size", [0, -2, "2", True])
def test_a_bad_kueue_pod_group_size_is_refused_naming_the_task(size: object) -> None:
    from airflow_gpu_dag.operators.kubernetes import GpuPodConfigError

    with (
        _dag(),
        pytest.raises(
            GpuPodConfigError, match=r"^GpuKubernetesPodOperator k8s_gpu\.t: .*pod_group_size >= 1"
        ),
    ):
        GpuKubernetesPodOperator(
            task_id="t",
            image="i",
            gpus=1,
            kueue=True,
            kueue_queue="q",
            kueue_pod_group="g",
            kueue_pod_group_size=size,
        )


@pytest.mark.filterwarnings("ignore:Task 't' was never mapped")
def test_a_bad_kueue_pod_group_size_is_refused_at_parse_time_in_partial_too() -> None:
    from airflow_gpu_dag.operators.kubernetes import GpuPodConfigError

    with _dag(), pytest.raises(GpuPodConfigError, match="pod_group_size >= 1"):
        GpuKubernetesPodOperator.partial(
            task_id="t",
            image="i",
            gpus=1,
            kueue=True,
            kueue_queue="q",
            kueue_pod_group="g",
            kueue_pod_group_size=0,
        )
