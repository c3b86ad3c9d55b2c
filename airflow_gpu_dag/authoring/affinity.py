"""Resource affinity: run a task where its data lives, with queue, pool and node affinity set together.

    pin_to_queue(train, "host-gpu01")          # queue + the host's pool (+ node affinity for pods)
    data_affinity(train, "/mnt/gpu01/corpus", {"/mnt/gpu01": "host-gpu01", "/mnt/gpu02": "host-gpu02"})

A host (or zone) is declared once, in ``[gpu_dag] queues``::

    AIRFLOW__GPU_DAG__QUEUES='{"host-gpu01": {"pool": "gpu01",
                                              "node_labels": {"kubernetes.io/hostname": "gpu01"}}}'

and :func:`pin_to_queue` sets, in one call, what must agree for the task to run there:

* ``queue``: the Celery workers of that host take it (``airflow celery worker -q host-gpu01``);
* ``pool``: a GPU task takes its GPUs from that host's pool (``pool_slots`` stays the GPU count), so
  the pool gates the GPUs the task will find on the host; a CPU task moves to ``cpu_pool`` when the
  host declares one (it would otherwise take GPU slots) and keeps its pool otherwise;
* for a Kubernetes pod (a ``KubernetesPodOperator``): a required node affinity on ``node_labels``,
  since the queue places only the process that launches the pod, not the pod.

A queue that is not declared is an error when the DAG file is parsed, naming the DAG, the task and
the fix; without ``[gpu_dag] queues`` pass ``pool=`` (and ``node_labels=`` for pods) at the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_gpu_dag.authoring._wiring import as_operator, where_of
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.settings import queue_sites

__all__ = ["data_affinity", "pin_to_queue"]


def _is_pod(task: Any) -> bool:
    try:  # start-up: importing the helpers must not load the pod operator (~2,000 modules with Kubernetes)
        from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    except ImportError:  # pragma: no cover - the provider is a dependency
        return False
    return isinstance(task, KubernetesPodOperator)


def _node_affinity(task: Any, labels: Mapping[str, str], where: str) -> None:
    from kubernetes.client import models as k8s  # start-up: only a pod loads the Kubernetes client

    from airflow_gpu_dag.kubernetes.pod_spec import merge_affinity  # start-up: it loads the client too

    required = [
        k8s.V1NodeSelectorRequirement(key=str(key), operator="In", values=[str(value)])
        for key, value in sorted(labels.items())
    ]
    existing = task.affinity if isinstance(task.affinity, k8s.V1Affinity) else None
    if task.affinity and existing is None:
        raise ValueError(
            f"{where}: its affinity is not a V1Affinity; cannot add the node affinity of the queue."
        )
    task.affinity = merge_affinity(existing, required, [])


def pin_to_queue(
    task: Any,
    queue: str,
    *,
    pool: str | None = None,
    node_labels: Mapping[str, str] | None = None,
) -> Any:
    """Run ``task`` on the host (or zone) of ``queue``: queue, pool and node affinity together.

    :param queue: an executor queue declared in ``[gpu_dag] queues`` (or any name with ``pool=``).
    :param pool: the host's pool, overriding ``[gpu_dag] queues`` (required without it).
    :param node_labels: node labels of the host's Kubernetes nodes (pods), overriding the config.
    :returns: the task.
    :raises ValueError: an unknown queue, a pod with no node labels to place it; the message names
        the DAG, the task and the fix.
    """
    task = as_operator(task)
    where = where_of(task)
    if not queue or not isinstance(queue, str):
        raise ValueError(f"{where}: queue={queue!r} must be a non-empty queue name.")
    sites = queue_sites()
    site: Mapping[str, Any] = {}
    if sites is not None:
        if queue not in sites:
            known = ", ".join(sorted(sites)) or "none"
            raise ValueError(
                f"{where}: queue {queue!r} is unknown ([gpu_dag] queues declares: {known}). Fix: use one of "
                f"them, or add {queue!r} with its pool to [gpu_dag] queues."
            )
        site = sites[queue]
    elif pool is None:
        raise ValueError(
            f"{where}: queue {queue!r} is unknown: [gpu_dag] queues is not set, so its pool is not known "
            f'either. Fix: declare it, e.g. AIRFLOW__GPU_DAG__QUEUES=\'{{"{queue}": {{"pool": '
            f"\"<pool of that host>\"}}}}', or pass pool='<pool of that host>'."
        )
    gpu_task = "gpus" in read_hints(getattr(task, "executor_config", None))
    target_pool = pool or (site.get("pool") if gpu_task else site.get("cpu_pool"))
    labels = dict(node_labels if node_labels is not None else site.get("node_labels") or {})
    if _is_pod(task):
        if not labels:
            raise ValueError(
                f"{where}: a Kubernetes pod is placed by node affinity, not by the queue; queue {queue!r} "
                "has no node_labels. Fix: add node_labels to it in [gpu_dag] queues, or pass "
                "node_labels={...}."
            )
        _node_affinity(task, labels, where)
    task.queue = queue
    if target_pool:
        task.pool = str(target_pool)
    return task


def data_affinity(
    task: Any,
    path: str,
    locations: Mapping[str, str],
    *,
    pool: str | None = None,
    node_labels: Mapping[str, str] | None = None,
) -> str:
    """Pin ``task`` (:func:`pin_to_queue`) to the queue of the longest location prefix holding
    ``path``; returns the queue.

    :raises ValueError: no location holds ``path`` (lists the known ones), or the queue is unknown.
    """
    task = as_operator(task)
    best: str | None = None
    best_length = -1  # the root location "/" (base "") holds every absolute path
    for prefix in locations:
        base = prefix.rstrip("/")
        if (path == base or path.startswith(base + "/")) and len(base) > best_length:
            best, best_length = prefix, len(base)
    if best is None:
        known = ", ".join(sorted(locations)) or "none"
        raise ValueError(
            f"{where_of(task)}: no location holds {path!r} (known: {known}); add it to locations."
        )
    pin_to_queue(task, locations[best], pool=pool, node_labels=node_labels)
    return locations[best]
