"""The keyword arguments of a GPU pod operator: the GPU parts merged into what the user gave.

:func:`gpu_pod_kwargs` serves :class:`~airflow_gpu_dag.operators.kubernetes.GpuKubernetesPodOperator`
and any other ``KubernetesPodOperator`` subclass (a Kueue Job); :func:`with_defaults` reads the merged
arguments from ``default_args`` too. The pod pieces themselves are :mod:`.pod_spec`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow.providers.cncf.kubernetes.backcompat.backwards_compat_converters import (
    convert_affinity,
    convert_toleration,
)
from kubernetes.client import models as k8s

from airflow_gpu_dag.airflow.declaring import declaring_dag, partial_default
from airflow_gpu_dag.core.model.pools import pool_for_gpu_type
from airflow_gpu_dag.core.model.resources import EstimateError
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.kubernetes.pod_spec import (
    GpuPodSpec,
    GpuPodSpecError,
    merge_affinity,
    merge_resources,
    merge_tolerations,
)

__all__ = [
    "GPU_ARGS",
    "MERGED_ARGS",
    "GpuPodConfigError",
    "gpu_pod_kwargs",
    "parse_pod_spec",
    "pod_where",
    "with_defaults",
    "with_gpu_parts",
]


class GpuPodConfigError(ValueError):
    """Bad GPU pod arguments, raised when the DAG file is parsed; names the DAG, the task and the fix."""


#: Operator arguments the GPU parts are merged into: read from ``default_args`` too, as Airflow would
#: fill them for an argument not given (it does not for ``**kwargs``). Not ``pool``/``pool_slots``: a
#: GPU pod's pool and slots follow its GPU request unless the task itself names them (as for the other
#: GPU operators); a DAG-wide pool is usually the CPU tasks'.
MERGED_ARGS = (
    "tolerations",
    "affinity",
    "container_resources",
    "executor_config",
    "labels",
    "annotations",
)


def with_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with :data:`MERGED_ARGS` taken from ``default_args`` where not given: Airflow fills
    defaults only for the arguments it sees, and these go through ``**kwargs`` here and are then given
    explicitly to the base class, so DAG-wide tolerations, affinity or labels were silently replaced."""
    defaults = kwargs.get("default_args") or {}
    missing = {key: defaults[key] for key in MERGED_ARGS if key not in kwargs and key in defaults}
    return {**kwargs, **missing} if missing else kwargs


#: The GPU arguments of :func:`gpu_pod_kwargs` (the rest are the operator's own).
GPU_ARGS = (
    "gpus",
    "gpu_memory",
    "gpu_type",
    "duration",
    "datasets",
    "data_affinity",
    "gpu_products",
    "gpu_memory_affinity",
    "inputs",
    "outputs",
)


def pod_where(kwargs: Mapping[str, Any]) -> str:
    dag_id = getattr(declaring_dag(kwargs), "dag_id", None) or "<no dag>"
    return f"GpuKubernetesPodOperator {dag_id}.{kwargs.get('task_id', '<no task_id>')}"


def gpu_pod_kwargs(
    *,
    gpus: int,
    gpu_memory: object = None,
    gpu_type: str | None = None,
    duration: object = None,
    datasets: Iterable[str] | str = (),
    data_affinity: str = "prefer",
    gpu_products: Mapping[str, Sequence[str]] | None = None,
    gpu_memory_affinity: bool = True,
    inputs: Iterable[str] = (),
    outputs: Iterable[str] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """Keyword arguments for any ``KubernetesPodOperator`` subclass, with the GPU parts merged in.

    Use it with operators of the provider that build on ``KubernetesPodOperator``, e.g. Kueue Jobs::

        KubernetesStartKueueJobOperator(
            queue_name="team-a", wait_until_job_complete=True,
            **gpu_pod_kwargs(task_id="train", image="...", gpus=4, gpu_type="a100", duration="2h"),
        )

    ``kwargs`` are the operator's own arguments (``container_resources``, ``affinity``,
    ``tolerations``, ``pool``, ``executor_config``...); GPU values are merged into them.
    :raises GpuPodConfigError: naming the DAG/task and the fix.
    """
    # the DAG's (and task group's) default_args for the arguments given explicitly below: Airflow fills
    # an argument from them only when it is not given, and these always are
    for key in MERGED_ARGS:
        if key not in kwargs and (default := partial_default(kwargs, key)) is not None:
            kwargs[key] = default
    spec = parse_pod_spec(
        kwargs, gpus, gpu_memory, gpu_type, datasets, data_affinity, gpu_products, gpu_memory_affinity
    )
    return with_gpu_parts(spec, kwargs, duration=duration, inputs=inputs, outputs=outputs)


def parse_pod_spec(
    kwargs: Mapping[str, Any],
    gpus: int,
    gpu_memory: object = None,
    gpu_type: str | None = None,
    datasets: Iterable[str] | str = (),
    data_affinity: str = "prefer",
    gpu_products: Mapping[str, Sequence[str]] | None = None,
    gpu_memory_affinity: bool = True,
) -> GpuPodSpec:
    """The :class:`GpuPodSpec` of the GPU arguments; ``kwargs`` (the operator's) name the task.

    :raises GpuPodConfigError: naming the DAG/task and the fix.
    """
    try:
        return GpuPodSpec.parse(
            gpus,
            gpu_memory,
            gpu_type,
            datasets=datasets,
            data_affinity=data_affinity,
            gpu_products=gpu_products,
            gpu_memory_affinity=gpu_memory_affinity,
        )
    except (GpuPodSpecError, EstimateError, TypeError) as err:
        raise GpuPodConfigError(f"{pod_where(kwargs)}: {err}") from None


def with_gpu_parts(
    spec: GpuPodSpec,
    kwargs: Mapping[str, Any],
    *,
    duration: object = None,
    inputs: Iterable[str] = (),
    outputs: Iterable[str] = (),
) -> dict[str, Any]:
    """``kwargs`` (the operator's own arguments) with the GPU parts of ``spec`` merged in: resources,
    node affinity, the GPU toleration, the hints, and the GPU pool and slots unless given.

    :raises GpuPodConfigError: naming the DAG/task and the fix.
    """
    try:
        hints = gpu_hints(
            duration=duration,
            gpus=spec.gpus,
            gpu_memory=spec.memory_mib,
            gpu_type=spec.gpu_type,
            inputs=inputs,
            outputs=outputs,
            executor_config=kwargs.get("executor_config"),
        )
        resources = merge_resources(kwargs.get("container_resources"), spec.gpus)
        affinity_in = kwargs.get("affinity")
        affinity = merge_affinity(
            convert_affinity(affinity_in) if affinity_in else None,
            spec.required_node_requirements(),
            spec.preferred_terms(),
        )
        given = kwargs.get("tolerations") or []
        for toleration in given:
            if not isinstance(toleration, dict | k8s.V1Toleration):
                raise GpuPodSpecError(
                    f"tolerations: {toleration!r} is not a toleration; give dicts such as {{'key': 'team', "
                    "'operator': 'Equal', 'value': 'ml', 'effect': 'NoSchedule'}} (or V1Toleration)"
                )
        tolerations = merge_tolerations([convert_toleration(t) for t in given])
    except (GpuPodSpecError, EstimateError, TypeError) as err:
        raise GpuPodConfigError(f"{pod_where(kwargs)}: {err}") from None
    out = dict(kwargs)
    out["container_resources"] = resources
    if affinity is not None:
        out["affinity"] = affinity
    out["tolerations"] = tolerations
    out["executor_config"] = hints
    if out.get("pool") is None:
        out["pool"] = pool_for_gpu_type(spec.gpu_type)
    if out.get("pool_slots") is None:
        out["pool_slots"] = spec.gpus
    return out
