"""Kubernetes mapping of GPU tasks: pod GPU spec, Volcano PodGroups, Kueue queues.

The operator is :class:`airflow_gpu_dag.operators.kubernetes.GpuKubernetesPodOperator`; this
package holds the pieces it is built from, usable on their own (e.g. with the provider's
``KubernetesStartKueueJobOperator``).
"""

from __future__ import annotations

from airflow_gpu_dag.kubernetes.kueue import QUEUE_LABEL, KueueError, kueue_pod_metadata
from airflow_gpu_dag.kubernetes.pod_spec import (
    DATASET_LABEL_PREFIX,
    DEFAULT_GPU_PRODUCTS,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    GpuPodSpec,
    GpuPodSpecError,
    dataset_label,
)
from airflow_gpu_dag.kubernetes.volcano import (
    GROUP_NAME_ANNOTATION,
    VOLCANO_SCHEDULER,
    PodGroupError,
    ensure_podgroup,
    gang_podgroup_name,
    podgroup_manifest,
    validate_podgroup,
)

__all__ = [
    "DATASET_LABEL_PREFIX",
    "DEFAULT_GPU_PRODUCTS",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "GROUP_NAME_ANNOTATION",
    "QUEUE_LABEL",
    "VOLCANO_SCHEDULER",
    "GpuPodSpec",
    "GpuPodSpecError",
    "KueueError",
    "PodGroupError",
    "dataset_label",
    "ensure_podgroup",
    "gang_podgroup_name",
    "kueue_pod_metadata",
    "podgroup_manifest",
    "validate_podgroup",
]
