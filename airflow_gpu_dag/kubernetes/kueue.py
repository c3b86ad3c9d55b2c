"""Kueue admission for GPU pods: the queue label and pod-group metadata.

Kueue admits *workloads* into a ``LocalQueue`` (which feeds a ``ClusterQueue`` with GPU quotas).
The cncf-kubernetes provider already runs suspended Jobs through Kueue
(:class:`~airflow.providers.cncf.kubernetes.operators.kueue.KubernetesStartKueueJobOperator`, which
sets ``kueue.x-k8s.io/queue-name`` and ``suspend=True``); use it, with
:func:`airflow_gpu_dag.operators.kubernetes.gpu_pod_kwargs`, when you want a Job. For plain pods
(the ``KubernetesPodOperator`` path) Kueue's *pod integration* must be enabled (the ``"pod"``
framework in Kueue's ``Configuration.integrations.frameworks``); then the same label on the pod is
enough: Kueue's webhook gates the pod
(``schedulingGates: kueue.x-k8s.io/admission``) until the workload is admitted. Several pods that
must be admitted together form a pod group: label ``kueue.x-k8s.io/pod-group-name`` plus
annotation ``kueue.x-k8s.io/pod-group-total-count``.

A gated pod is "not scheduled": the operator's ``schedule_timeout_seconds`` covers the wait for
admission, so the fallback ladder reacts to a queue that has no GPU quota left.
"""

from __future__ import annotations

from airflow_gpu_dag.kubernetes.labels import is_label_value

__all__ = [
    "POD_GROUP_LABEL",
    "POD_GROUP_TOTAL_COUNT_ANNOTATION",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_LABEL",
    "KueueError",
    "kueue_pod_metadata",
]

#: Label naming the LocalQueue (the same key the provider's Kueue job operator sets).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Label naming a Kueue pod group (several pods admitted as one workload).
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
#: Annotation with the number of pods in the Kueue pod group.
POD_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
#: Label naming a Kueue ``WorkloadPriorityClass``.
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


class KueueError(ValueError):
    """Kueue metadata that cannot be valid."""


def _check_value(what: str, value: str) -> str:
    if not is_label_value(value):
        raise KueueError(
            f"{what} {value!r} must be a label value: at most 63 characters of [A-Za-z0-9-_.], starting "
            "and ending with a letter or digit"
        )
    return value


def kueue_pod_metadata(
    queue_name: str,
    *,
    pod_group: str | None = None,
    pod_group_size: int | None = None,
    workload_priority_class: str | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """``(labels, annotations)`` that put a pod into Kueue's ``queue_name``.

    :param pod_group: name shared by pods admitted together; requires ``pod_group_size``.
    :param workload_priority_class: a Kueue ``WorkloadPriorityClass`` (``kueue.x-k8s.io/priority-class``).
    """
    labels = {QUEUE_LABEL: _check_value("Kueue queue name", queue_name)}
    annotations: dict[str, str] = {}
    if pod_group is not None:
        if isinstance(pod_group_size, bool) or not isinstance(pod_group_size, int) or pod_group_size < 1:
            raise KueueError(
                f"Kueue pod group {pod_group!r} needs pod_group_size >= 1 (the number of pods in the group)"
            )
        labels[POD_GROUP_LABEL] = _check_value("Kueue pod group", pod_group)
        annotations[POD_GROUP_TOTAL_COUNT_ANNOTATION] = str(pod_group_size)
    elif pod_group_size is not None:
        raise KueueError(
            f"pod_group_size={pod_group_size!r} needs pod_group='<name shared by the group's pods>'"
        )
    if workload_priority_class:
        labels[PRIORITY_CLASS_LABEL] = _check_value("Kueue workload priority class", workload_priority_class)
    return labels, annotations
