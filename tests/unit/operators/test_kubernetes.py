"""GpuKubernetesPodOperator: pods built without a cluster and validated against the Kubernetes OpenAPI schema.

Pods are built with the provider's own ``build_pod_request_obj(context)`` while its ``KubernetesHook`` is
patched (as the provider's tests do), serialized with ``ApiClient().sanitize_for_serialization`` and
validated with ``kubernetes_validate`` (Kubernetes 1.37 schema, strict: unknown fields are errors).
Nothing here talks to a cluster."""

from __future__ import annotations

import itertools
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
