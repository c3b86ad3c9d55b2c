"""Shared fakes and helpers of the tests under ``tests/unit/operators/``."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any
from unittest import mock

import kubernetes_validate
import pendulum
from airflow.sdk import DAG
from kubernetes.client import ApiClient
from kubernetes.client import models as k8s


def make_dag(dag_id: str = "gpu_dag") -> Any:
    from airflow.sdk import DAG

    return DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1))


# -- execution --------------------------------------------------------------------------------------------
def context(task_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="gpu_dag", run_id="run1", task_id=task_id, map_index=-1, try_number=1)
    return {"ti": ti, "task_instance": ti}


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


def pod_dag(dag_id: str = "audit2", **kwargs: Any) -> DAG:
    """A DAG without a schedule (from 2026-01-01) to hold the operators under test; ``kwargs`` go to the
    DAG (``default_args``)."""
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), **kwargs)


def build_pod(op: Any, context: dict[str, Any]) -> k8s.V1Pod:
    """The pod ``op`` requests in ``context``, built with the provider's Kubernetes hook patched out."""
    with mock.patch(HOOK) as hook:
        hook.return_value.is_in_cluster = False
        hook.return_value.get_namespace.return_value = "default"
        return op.build_pod_request_obj(context)


def finished_pod(
    started: datetime.datetime | None, finished: datetime.datetime | None, phase: str = "Succeeded"
) -> Any:
    """Pod ``train-abc`` of run ``r7`` on ``node-7``: its container ran from ``started`` (and ended at
    ``finished``, exit code 0), the pod in ``phase``."""
    state = k8s.V1ContainerState(
        terminated=k8s.V1ContainerStateTerminated(exit_code=0, started_at=started, finished_at=finished)
        if finished
        else None,
        running=k8s.V1ContainerStateRunning(started_at=started) if started and not finished else None,
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="train-abc", namespace="ml", uid="u-1", labels={"run_id": "r7"}),
        spec=k8s.V1PodSpec(containers=[], node_name="node-7"),
        status=k8s.V1PodStatus(
            phase=phase,
            start_time=started,
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="base", image="i", image_id="", ready=False, restart_count=0, state=state
                )
            ],
        ),
    )


def pending_pod(scheduled: bool) -> k8s.V1Pod:
    """Pod ``train-abc``, pending: scheduled to a node, or unschedulable."""
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


#: Another executor's settings in a DAG's default ``executor_config``: the GPU operators keep them.
OVERRIDE: dict[str, Any] = {"pod_override": "team-ml", "KubernetesExecutor": {"request_memory": "1Gi"}}


def assert_keeps_default(config: Any, gpus: int) -> None:
    """``config`` kept :data:`OVERRIDE` and added the GPU hints of ``gpus`` GPUs."""
    assert config["pod_override"] == "team-ml"
    assert config["KubernetesExecutor"] == {"request_memory": "1Gi"}
    assert config["gpu_dag"]["gpus"] == gpus
