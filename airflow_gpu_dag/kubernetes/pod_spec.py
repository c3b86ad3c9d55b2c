"""The GPU parts of a Kubernetes pod: resources, GPU-type and data affinity, tolerations.

Everything here is built from a :class:`GpuPodSpec` (a validated, immutable description of what one
pod needs) into ``kubernetes.client`` models that the cncf-kubernetes ``KubernetesPodOperator``
accepts, and merged into what the user already gave the operator (nothing is clobbered):

- ``nvidia.com/gpu`` in both ``requests`` and ``limits`` (extended resources must be equal; the
  device plugin hands out whole GPUs);
- the GPU type as a *required* node affinity on the GPU feature discovery label
  ``nvidia.com/gpu.product`` (``"a100"`` -> the product strings of every A100 variant; the mapping
  is :data:`DEFAULT_GPU_PRODUCTS` and can be overridden per operator);
- the per-GPU memory as a required node affinity ``nvidia.com/gpu.memory > N-1`` (MiB, also a GPU
  feature discovery label), optional;
- data affinity: nodes that hold a dataset carry the label ``gpu-dag.io/dataset-<name>`` (any value;
  the platform team labels them, e.g. ``kubectl label node n1 gpu-dag.io/dataset-c4=true``); the pod
  *prefers* them (preferred term, weight 100) or *requires* them (required term, ``Exists``);
- the toleration of the usual GPU node taint ``nvidia.com/gpu`` (``Exists``, ``NoSchedule``).

Bad input raises :class:`GpuPodSpecError` naming what was wrong and how to fix it; the operator adds
the DAG and task id.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes.client import models as k8s

from airflow_gpu_dag.core.model.pools import normalize_gpu_type
from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest
from airflow_gpu_dag.kubernetes.labels import LABEL_MAX_LENGTH, is_label_value

__all__ = [
    "DATASET_LABEL_PREFIX",
    "DEFAULT_GPU_PRODUCTS",
    "GPU_MEMORY_LABEL",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "DataAffinity",
    "GpuPodSpec",
    "GpuPodSpecError",
    "dataset_label",
    "gpu_toleration",
    "merge_affinity",
    "merge_resources",
    "merge_tolerations",
]

#: The extended resource the NVIDIA device plugin advertises.
GPU_RESOURCE = "nvidia.com/gpu"
#: GPU feature discovery (GFD) node label with the GPU product name, e.g. ``NVIDIA-A100-SXM4-80GB``.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: GPU feature discovery node label with the memory of one GPU in MiB, e.g. ``81920``.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
#: Node label prefix marking nodes that hold a dataset locally: ``gpu-dag.io/dataset-<name>``.
DATASET_LABEL_PREFIX = "gpu-dag.io/dataset-"

#: Our GPU type names -> values of ``nvidia.com/gpu.product`` as GPU feature discovery writes them
#: (the marketing name with spaces replaced by ``-``). Override per operator with ``gpu_products=``
#: when your nodes report other strings (``kubectl get nodes -L nvidia.com/gpu.product``).
DEFAULT_GPU_PRODUCTS: Mapping[str, tuple[str, ...]] = {
    "a100": (
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-A100-SXM4-40GB",
        "NVIDIA-A100-80GB-PCIe",
        "NVIDIA-A100-PCIE-40GB",
    ),
    "h100": ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL"),
    "h200": ("NVIDIA-H200", "NVIDIA-H200-NVL"),
    "l40s": ("NVIDIA-L40S",),
    "l4": ("NVIDIA-L4",),
    "a10g": ("NVIDIA-A10G",),
    "t4": ("Tesla-T4",),
    "v100": ("Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB", "Tesla-V100-PCIE-16GB", "Tesla-V100-PCIE-32GB"),
}

DataAffinity = Literal["prefer", "require"]
_DATA_AFFINITY_MODES = ("prefer", "require")


class GpuPodSpecError(ValueError):
    """A GPU pod argument that cannot be turned into a valid pod; the message says how to fix it."""


def dataset_label(dataset: str) -> str:
    """The node label key that marks nodes holding ``dataset``: ``gpu-dag.io/dataset-<name>``."""
    name = f"{DATASET_LABEL_PREFIX.split('/', 1)[1]}{dataset}"
    if not isinstance(dataset, str) or not dataset or not is_label_value(name):
        room = LABEL_MAX_LENGTH - len(name) + len(str(dataset))  # what the name part leaves the dataset
        raise GpuPodSpecError(
            f"dataset name {dataset!r} cannot be part of the node label {DATASET_LABEL_PREFIX}<name>: use "
            f"at most {room} characters of [A-Za-z0-9-_.], starting and "
            "ending with a letter or digit (e.g. 'c4-en' or 'imagenet_2012')"
        )
    return DATASET_LABEL_PREFIX + dataset


def gpu_toleration() -> k8s.V1Toleration:
    """The toleration of the usual GPU node taint: ``nvidia.com/gpu`` Exists NoSchedule."""
    return k8s.V1Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")


@dataclass(frozen=True)
class GpuPodSpec:
    """What one pod needs from the cluster, validated on construction.

    Build it with :meth:`parse`, which validates and converts what a task declares.

    :param gpus: whole GPUs (>= 1); requests = limits = this.
    :param memory_mib: free memory per GPU in MiB, or None (``parse`` takes "80GiB", "40G", int MiB).
    :param gpu_type: one of the keys of ``gpu_products`` ("a100", "h100", ...) or None for any.
    :param products: the ``nvidia.com/gpu.product`` values of ``gpu_type`` (``parse`` maps the type
        through ``gpu_products``: our type names -> product values; None = defaults).
    :param datasets: datasets the pod reads; nodes holding them carry :func:`dataset_label`.
    :param data_affinity: ``"prefer"`` (schedule elsewhere if need be) or ``"require"``.
    :param gpu_memory_affinity: also require ``nvidia.com/gpu.memory`` >= the per-GPU memory.
    """

    gpus: int
    memory_mib: int | None = None
    gpu_type: str | None = None
    products: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    data_affinity: DataAffinity = "prefer"
    gpu_memory_affinity: bool = True

    def __post_init__(self) -> None:
        """The checks that make a spec built directly (not by :meth:`parse`) a valid pod: whole GPUs,
        a known data affinity (an unknown one would silently drop the datasets' affinity)."""
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise GpuPodSpecError(f"gpus {self.gpus!r} must be a whole number of GPUs >= 1, e.g. gpus=4")
        if self.data_affinity not in _DATA_AFFINITY_MODES:
            raise GpuPodSpecError(
                f"data_affinity {self.data_affinity!r} must be 'prefer' (run elsewhere if no node holds the "
                "data) or 'require' (only on nodes that hold it)"
            )

    @classmethod
    def parse(
        cls,
        gpus: object,
        gpu_memory: object = None,
        gpu_type: str | None = None,
        datasets: Iterable[str] | str = (),
        data_affinity: str = "prefer",
        gpu_products: Mapping[str, Sequence[str]] | None = None,
        gpu_memory_affinity: bool = True,
    ) -> GpuPodSpec:
        """Validate user input; raises :class:`GpuPodSpecError` with the fix."""
        if gpus is None:
            raise GpuPodSpecError("gpus is required: the number of whole GPUs the pod needs, e.g. gpus=4")
        try:
            request = GpuRequest.parse(gpus, gpu_memory, None)
        except EstimateError as err:
            raise GpuPodSpecError(str(err)) from None
        if gpu_products is not None and not isinstance(gpu_products, Mapping):
            raise GpuPodSpecError(
                f"gpu_products {gpu_products!r} must map our GPU types to node product labels, e.g. "
                "gpu_products={'a100': ['NVIDIA-A100-SXM4-80GB']}"
            )
        try:
            mapping = {
                normalize_gpu_type(k): (v,)
                if isinstance(v, str)
                else tuple(v)  # one product, not its letters
                for k, v in (gpu_products or DEFAULT_GPU_PRODUCTS).items()
            }
        except ValueError as err:
            raise GpuPodSpecError(f"gpu_products: {err}") from None
        products: tuple[str, ...] = ()
        gtype: str | None = None
        if gpu_type is not None:
            if not isinstance(gpu_type, str) or not gpu_type.strip():
                raise GpuPodSpecError(
                    f"gpu_type {gpu_type!r} must be a GPU type name such as 'a100', or None for any GPU"
                )
            try:
                gtype = normalize_gpu_type(gpu_type)
            except ValueError as err:  # no letters or digits: a GpuPodSpecError, so the task is named
                raise GpuPodSpecError(str(err)) from None
            if gtype not in mapping:
                fix = (  # a built-in type the task's gpu_products dropped: it replaces the built-ins
                    "gpu_products replaces the built-in types: keep them with "
                    "gpu_products={**DEFAULT_GPU_PRODUCTS, ...}"
                    if gpu_products and gtype in map(normalize_gpu_type, DEFAULT_GPU_PRODUCTS)
                    else f"Pass gpu_products={{'{gtype}': ['<value of {GPU_PRODUCT_LABEL} on your nodes>']}} "
                    "to add it"
                )
                raise GpuPodSpecError(
                    f"unknown gpu_type {gpu_type!r}; known types: {', '.join(sorted(mapping))}. {fix}"
                )
            products = mapping[gtype]
            # an empty label value is one too
            if not products or not all(p == "" or is_label_value(p) for p in products):
                raise GpuPodSpecError(
                    f"gpu_products[{gtype!r}] = {list(products)!r} must be a non-empty list of "
                    f"{GPU_PRODUCT_LABEL} label values (at most 63 characters), e.g. 'NVIDIA-A100-SXM4-80GB'"
                )
        if data_affinity not in _DATA_AFFINITY_MODES:
            raise GpuPodSpecError(
                f"data_affinity {data_affinity!r} must be 'prefer' (run elsewhere if no node holds the "
                "data) or 'require' (only on nodes that hold it)"
            )
        names = (datasets,) if isinstance(datasets, str) else tuple(datasets or ())
        for name in names:
            dataset_label(name)  # validates
        return cls(
            gpus=request.count,
            memory_mib=request.memory_mib,
            gpu_type=gtype,
            products=products,
            datasets=tuple(dict.fromkeys(names)),
            data_affinity=data_affinity,  # type: ignore[arg-type]
            gpu_memory_affinity=gpu_memory_affinity,
        )

    # -- pieces ---------------------------------------------------------------------------------

    def required_node_requirements(self) -> list[k8s.V1NodeSelectorRequirement]:
        """Match expressions every candidate node must satisfy (GPU type, GPU memory, datasets)."""
        reqs: list[k8s.V1NodeSelectorRequirement] = []
        if self.products:
            reqs.append(
                k8s.V1NodeSelectorRequirement(
                    key=GPU_PRODUCT_LABEL, operator="In", values=list(self.products)
                )
            )
        if self.memory_mib and self.gpu_memory_affinity:
            reqs.append(
                k8s.V1NodeSelectorRequirement(
                    key=GPU_MEMORY_LABEL, operator="Gt", values=[str(self.memory_mib - 1)]
                )
            )
        if self.data_affinity == "require":
            reqs.extend(
                k8s.V1NodeSelectorRequirement(key=dataset_label(d), operator="Exists") for d in self.datasets
            )
        return reqs

    def preferred_terms(self) -> list[k8s.V1PreferredSchedulingTerm]:
        """Preferred scheduling terms (data affinity in ``prefer`` mode), one per dataset."""
        if self.data_affinity != "prefer":
            return []
        return [
            k8s.V1PreferredSchedulingTerm(
                weight=100,
                preference=k8s.V1NodeSelectorTerm(
                    match_expressions=[k8s.V1NodeSelectorRequirement(key=dataset_label(d), operator="Exists")]
                ),
            )
            for d in self.datasets
        ]

    def describe(self) -> str:
        """Short human form for logs: ``4x a100 (80GiB each), prefer data c4``."""
        text = GpuRequest(self.gpus, self.memory_mib, self.gpu_type).describe()
        if self.datasets:
            text += f", {self.data_affinity} data {','.join(self.datasets)}"
        return text


# -- merging into what the user gave -------------------------------------------------------------


def merge_resources(
    existing: k8s.V1ResourceRequirements | Mapping[str, Any] | None, gpus: int
) -> k8s.V1ResourceRequirements:
    """``existing`` resources plus ``nvidia.com/gpu: gpus`` in requests and limits.

    A conflicting GPU count already in ``existing`` is an error (which one would be meant?).
    """
    if existing is None:
        requests: dict[str, Any] = {}
        limits: dict[str, Any] = {}
        extra: dict[str, Any] = {}
    elif isinstance(existing, k8s.V1ResourceRequirements):
        requests = dict(existing.requests or {})
        limits = dict(existing.limits or {})
        extra = {"claims": existing.claims}
    elif isinstance(existing, Mapping):
        requests = dict(existing.get("requests") or {})
        limits = dict(existing.get("limits") or {})
        extra = {"claims": existing.get("claims")}  # the container's DRA claims, kept as given
    else:
        raise GpuPodSpecError(
            f"container_resources has type {type(existing).__name__}; pass a "
            "kubernetes.client.models.V1ResourceRequirements or a dict with 'requests'/'limits'"
        )
    for kind, values in (("requests", requests), ("limits", limits)):
        have = values.get(GPU_RESOURCE)
        if have is not None and str(have) != str(gpus):
            raise GpuPodSpecError(
                f"container_resources.{kind} has {GPU_RESOURCE}={have!r} but gpus={gpus}; set the GPU "
                "count only through gpus="
            )
        values[GPU_RESOURCE] = str(gpus)
    return k8s.V1ResourceRequirements(
        requests=requests, limits=limits, **{k: v for k, v in extra.items() if v}
    )


def merge_affinity(
    existing: k8s.V1Affinity | None,
    required: Sequence[k8s.V1NodeSelectorRequirement],
    preferred: Sequence[k8s.V1PreferredSchedulingTerm],
) -> k8s.V1Affinity | None:
    """Add node requirements (ANDed into every existing required term) and preferred terms.

    Kubernetes ORs the ``nodeSelectorTerms`` of a required node affinity and ANDs the expressions
    inside one term, so our requirements are appended to each existing term (or form one new term).
    Pod (anti-)affinity of ``existing`` is kept as is.
    """
    if not required and not preferred:
        return existing or None
    # a copy: one V1Affinity object is often shared by several tasks (a module constant, default_args);
    # writing into it gave every task the GPU rules of all of them
    affinity = copy.deepcopy(existing) if existing is not None else k8s.V1Affinity()
    node = affinity.node_affinity or k8s.V1NodeAffinity()
    if required:
        selector = node.required_during_scheduling_ignored_during_execution
        terms = list(selector.node_selector_terms or []) if selector else []
        if not terms:
            terms = [k8s.V1NodeSelectorTerm(match_expressions=[])]
        new_terms = []
        for term in terms:
            exprs = list(term.match_expressions or [])
            known = {(e.key, e.operator, tuple(e.values or ())) for e in exprs}
            exprs.extend(r for r in required if (r.key, r.operator, tuple(r.values or ())) not in known)
            new_terms.append(k8s.V1NodeSelectorTerm(match_expressions=exprs, match_fields=term.match_fields))
        node.required_during_scheduling_ignored_during_execution = k8s.V1NodeSelector(
            node_selector_terms=new_terms
        )
    if preferred:
        node.preferred_during_scheduling_ignored_during_execution = [
            *(node.preferred_during_scheduling_ignored_during_execution or []),
            *preferred,
        ]
    affinity.node_affinity = node
    return affinity


def merge_tolerations(existing: Sequence[k8s.V1Toleration] | None) -> list[k8s.V1Toleration]:
    """``existing`` plus the GPU toleration unless one for ``nvidia.com/gpu`` is already there."""
    tolerations = list(existing or [])
    if not any(getattr(t, "key", None) == GPU_RESOURCE for t in tolerations):
        tolerations.append(gpu_toleration())
    return tolerations
