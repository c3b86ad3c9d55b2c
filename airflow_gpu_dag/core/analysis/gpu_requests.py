"""Can a task's GPU request ever be satisfied? One check for the operators, lint and the cluster policy.

Pure: no Airflow. :func:`check_gpu_request` compares a task's request and pool slots with what is
known (:class:`RequestLimits`: pool sizes, the largest host, the GPU inventory as plain data) and
returns :class:`~airflow_gpu_dag.core.model.findings.Finding` objects. The GPU operators raise them as one
``GpuTaskError`` when a DAG file is parsed; :func:`~airflow_gpu_dag.core.analysis.validation.validate_graph`
reports them for ``airflow gpu-dag lint`` and the cluster policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_gpu_dag.core.model.findings import ERROR, Finding
from airflow_gpu_dag.core.model.pools import normalize_gpu_type
from airflow_gpu_dag.core.model.resources import GpuRequest, format_memory

__all__ = ["InventorySummary", "RequestLimits", "check_gpu_request", "device_could_hold"]


def _canonical_type(gpu_type: str) -> str:
    try:
        return normalize_gpu_type(gpu_type)
    except ValueError:  # no letters or digits: matches no inventory type
        return gpu_type


def device_could_hold(
    device_type: str, device_memory_mib: int | None, memory_mib: int | None, gpu_type: str | None
) -> bool:
    """True when an idle device of ``device_type`` (normalised) with ``device_memory_mib`` in all
    (None: unknown, not checked) could hold one GPU of a request for ``memory_mib`` of ``gpu_type``
    (None: any type)."""
    if gpu_type is not None and _canonical_type(gpu_type) != device_type:
        return False
    return not memory_mib or device_memory_mib is None or device_memory_mib >= memory_mib


@dataclass(frozen=True)
class InventorySummary:
    """The GPUs of the largest known host as plain data: per device its normalised type and total
    memory in MiB (None: unknown); ``source`` (``"static"``, ``"nvml"``) and ``description`` for
    messages."""

    devices: tuple[tuple[str, int | None], ...]
    source: str = "static"
    description: str = ""

    @property
    def types(self) -> frozenset[str]:
        return frozenset(gpu_type for gpu_type, _ in self.devices)

    def max_fitting(self, memory_mib: int | None = None, gpu_type: str | None = None) -> int:
        """How many devices could ever hold one GPU of this request (type, total memory)."""
        return sum(1 for t, mem in self.devices if device_could_hold(t, mem, memory_mib, gpu_type))


@dataclass(frozen=True)
class RequestLimits:
    """What a GPU request is checked against; None means unknown (not checked).

    ``pool_slots``: pool sizes (a pool not listed is not checked here). ``max_gpus_per_host``: the
    largest single host or node. ``inventory``: the devices of a host. ``known_gpu_types``: the GPU
    types that exist, when there is no inventory.
    """

    pool_slots: Mapping[str, int] | None = None
    max_gpus_per_host: int | None = None
    inventory: InventorySummary | None = None
    known_gpu_types: frozenset[str] | None = None

    @property
    def gpu_types(self) -> frozenset[str] | None:
        return self.inventory.types if self.inventory is not None else self.known_gpu_types


def check_gpu_request(
    dag_id: str,
    task_id: str | None,
    gpu: GpuRequest | None,
    pool: str,
    slots: int,
    limits: RequestLimits,
) -> Iterable[Finding]:
    """Findings for a task holding ``slots`` of ``pool`` and needing ``gpu`` (None: no GPU), in this
    order: more slots than the pool has in all, more GPUs than the largest host, an unknown GPU type,
    more GPUs (of that type and memory) than the inventory has."""
    yield from _check_pool(dag_id, task_id, gpu, pool, slots, limits)
    if gpu is None:
        return
    host_max = limits.max_gpus_per_host
    if host_max is not None and gpu.count > host_max:
        yield Finding(
            ERROR,
            "impossible-request",
            dag_id,
            task_id,
            f"needs {gpu.count} GPUs but the largest host has {host_max} (gpu_dag.max_gpus_per_host).",
            f"request at most {host_max} GPUs or split the task.",
        )
    types = limits.gpu_types
    if types is not None and gpu.gpu_type is not None and _canonical_type(gpu.gpu_type) not in types:
        known = ", ".join(sorted(types)) or "none"
        yield Finding(
            ERROR,
            "unknown-gpu-type",
            dag_id,
            task_id,
            f"GPU type {gpu.gpu_type!r} is not in the inventory (known types: {known}).",
            "use one of the known types, or leave gpu_type unset for any GPU.",
        )
        return
    inventory = limits.inventory
    if inventory is not None:
        fitting = inventory.max_fitting(gpu.memory_mib, gpu.gpu_type)
        if gpu.count > fitting:
            mem = f" with {format_memory(gpu.memory_mib)}" if gpu.memory_mib else ""
            yield Finding(
                ERROR,
                "impossible-request",
                dag_id,
                task_id,
                f"needs {gpu.describe()} but the {inventory.source} inventory has only {fitting} GPU(s)"
                f"{mem} of that kind ({inventory.description}).",
                "request fewer GPUs or less memory, or correct [gpu_dag] inventory.",
            )


def _check_pool(
    dag_id: str, task_id: str | None, gpu: GpuRequest | None, pool: str, slots: int, limits: RequestLimits
) -> Iterable[Finding]:
    pools = limits.pool_slots
    if pools is None or pool not in pools or slots <= pools[pool]:
        return
    size = pools[pool]
    unit = "GPUs" if gpu is not None and gpu.count == slots else "slots"
    # "request at most 0 GPUs" is no fix: a pool of no slots runs nothing, whatever the request
    fix = f"request at most {size} {unit}, or grow pool {pool!r}."
    if size <= 0:
        fix = f"give pool {pool!r} slots (it has none, e.g. in [gpu_dag] pools), or use another pool or type."
    yield Finding(
        ERROR,
        "impossible-request",
        dag_id,
        task_id,
        f"needs {slots} {unit} but pool {pool!r} has only {size} in all, so it could never run "
        "(it would wait forever).",
        fix,
    )
