"""Arguments a GPU pod shares with other tasks or takes from elsewhere, each a case it got wrong.

* one ``V1Affinity`` object shared by two tasks (a module constant) was written into: both pods then
  required every GPU type of both tasks and could never be scheduled.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import models as k8s

from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from tests.unit.test_kubernetes_operator import _build, _dag, _validate


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
    # Before: .partial() was KubernetesPodOperator's: default_pool, one slot, no hints, no checks.
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


def test_sizes_of_a_mode_not_asked_for_are_refused() -> None:
    import pytest

    from airflow_gpu_dag.operators.kubernetes import GpuPodConfigError

    with _dag():
        with pytest.raises(GpuPodConfigError, match="only apply with volcano=True"):
            GpuKubernetesPodOperator(task_id="a", image="x", gpus=1, volcano_gang_size=4)
        with pytest.raises(GpuPodConfigError, match="kueue_pod_group_size needs kueue_pod_group"):
            GpuKubernetesPodOperator(
                task_id="b", image="x", gpus=1, kueue=True, kueue_queue="q", kueue_pod_group_size=2
            )


def test_default_args_are_merged_with_the_gpu_parts_not_replaced() -> None:
    # Before: the operator gave the base class its own tolerations, affinity, resources, hints, labels
    # and annotations, so Airflow never filled them from default_args: all of them were lost.
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


def test_a_pod_templates_tolerations_affinity_and_resources_are_kept() -> None:
    # Before: the operator's own tolerations, affinity and resources replaced the template's, so the pod
    # lost its toleration of the tainted ML nodes and its 200Gi memory request.
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


def _pod(phase: str, state: k8s.V1ContainerState | None = None) -> k8s.V1Pod:
    import datetime as dt

    start = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    statuses = (
        [
            k8s.V1ContainerStatus(
                name="base", image="i", image_id="", ready=False, restart_count=0, state=state
            )
        ]
        if state
        else None
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name="train-abc",
            namespace="ml",
            uid="u1",
            labels={"dag_id": "k8s_gpu", "run_id": "r", "task_id": "train"},
        ),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="base", image="i")], node_name="n1"),
        status=k8s.V1PodStatus(phase=phase, start_time=start, container_statuses=statuses),
    )


def test_a_pod_ended_by_timeout_or_kill_is_charged_from_its_current_status() -> None:
    # The pod the operator holds can be the snapshot taken at creation (Pending, no container status):
    # before, a task ended by execution_timeout or killed while its container ran was charged nothing.
    import datetime as dt
    from unittest import mock

    running = _pod(
        "Running",
        k8s.V1ContainerState(
            running=k8s.V1ContainerStateRunning(started_at=dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
        ),
    )
    dag = _dag()
    with dag:
        op = GpuKubernetesPodOperator(task_id="train", image="i", namespace="ml", gpus=8)
    manager = mock.Mock()
    manager.read_pod.return_value = running
    op.__dict__["pod_manager"] = manager
    op.__dict__["client"] = mock.Mock()
    charged: list[Any] = []
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    def record(usage: Any) -> bool:
        charged.append(usage)
        return True

    with (
        mock.patch("airflow_gpu_dag.budget.charge.charge", side_effect=record),
        mock.patch.object(KubernetesPodOperator, "cleanup"),  # the provider's part (raises: pod failed)
        mock.patch.object(KubernetesPodOperator, "on_kill"),
    ):
        op.cleanup(_pod("Pending"), _pod("Pending"), context={"ti": None})  # an exception mid-run
        assert len(charged) == 1 and charged[0].gpu_seconds > 0 and len(charged[0].devices) == 8
        op.pod = _pod("Pending")
        op.on_kill()  # killed: charged before the provider deletes the pod
    assert len(charged) == 2 and charged[1].task_id == "train" and charged[1].gpu_seconds > 0
    assert manager.read_pod.call_count == 2
