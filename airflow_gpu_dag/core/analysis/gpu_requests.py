"""Can a task's GPU request ever be satisfied? One check for the operators, lint and the cluster policy.

Pure: no Airflow. :func:`check_gpu_request` compares a task's request and pool slots with what is
known (:class:`RequestLimits`: pool sizes, the largest host, the GPU inventory as plain data) and
returns :class:`~airflow_gpu_dag.core.model.findings.Finding` objects. The GPU operators raise them as one
``GpuTaskError`` when a DAG file is parsed; :func:`~airflow_gpu_dag.core.analysis.validation.validate_graph`
reports them for ``airflow gpu-dag lint`` and the cluster policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_gpu_dag.core.model.findings import ERROR, WARNING, Finding
from airflow_gpu_dag.core.model.pools import (
    DEFAULT_POOL,
    gpu_type_of_pool,
    normalize_gpu_type,
    pool_for_gpu_type,
    pool_name_problem,
    respelled_gpu_type,
)
from airflow_gpu_dag.core.model.resources import GpuRequest, format_memory

__all__ = [
    "MAX_PLAUSIBLE_GPU_MEMORY_MIB",
    "InventorySummary",
    "RequestLimits",
    "check_gpu_request",
    "default_pool_finding",
    "device_could_hold",
]

#: No GPU has more memory than this (1 TiB; the largest in 2026 have under 300 GB). A request for more
#: per GPU is a typo or the wrong unit (``"8000TiB"``, a total given per GPU) unless an inventory
#: describes GPUs that large.
MAX_PLAUSIBLE_GPU_MEMORY_MIB = 1024 * 1024
#: Pool suffixes that read as a GPU model (``h100``, ``t4``, ``l40s``, ``mi300x``, ``rtx_4090``) rather
#: than a group of hosts (``node1``): a task of another type in such a pool is warned about.
_TYPE_SHAPED = re.compile(r"^(?:[a-z]{1,2}\d{1,4}[a-z]{0,2}|(?:rtx|gtx|mi|gb)_?[a-z]?\d{2,4}[a-z]{0,2})$")


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

    @property
    def largest_memory_mib(self) -> int | None:
        """The most memory a device is known to have (None: no device's memory is known)."""
        return max((mem for _, mem in self.devices if mem is not None), default=None)

    @property
    def chosen_by(self) -> str:
        """Which inventory this is, by the option that chose it, for messages."""
        if self.source == "nvml":
            return "the GPUs of the host that parses DAG files: [gpu_dag] inventory_source = nvml"
        return "the static inventory, [gpu_dag] inventory"

    @property
    def fix(self) -> str:
        """How to correct the inventory a request was checked against."""
        if self.source == "nvml":
            return (
                "or, when the workers have other GPUs than this host, set [gpu_dag] inventory_source = auto "
                "and describe the workers' GPUs in [gpu_dag] inventory (parse-time checks then use it)"
            )
        return "or correct [gpu_dag] inventory (it describes the workers' largest host)"

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
    order: a pool name Airflow cannot store, more slots than the pool has in all, a type spelling read
    other than written (a warning), a type that contradicts the pool, more GPUs than the largest host,
    more memory per GPU than any GPU has, an unknown GPU type, more GPUs (of that type and memory)
    than the inventory has."""
    if problem := pool_name_problem(pool):
        yield Finding(
            ERROR, "bad-pool-name", dag_id, task_id, f"{problem}.", "use a shorter pool name (or GPU type)."
        )
        return
    yield from _check_pool(dag_id, task_id, gpu, pool, slots, limits)
    if gpu is None:
        return
    yield from _check_type(dag_id, task_id, gpu, pool, limits)
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
    inventory = limits.inventory
    largest = inventory.largest_memory_mib if inventory is not None else None
    if gpu.memory_mib and gpu.memory_mib > max(MAX_PLAUSIBLE_GPU_MEMORY_MIB, largest or 0):
        yield Finding(
            ERROR,
            "implausible-gpu-memory",
            dag_id,
            task_id,
            f"asks for {_large_memory(gpu.memory_mib)} per GPU; "
            + (
                f"the largest GPU of the inventory has {_large_memory(largest)}"
                if largest and largest > MAX_PLAUSIBLE_GPU_MEMORY_MIB
                else f"no GPU has more than {_large_memory(MAX_PLAUSIBLE_GPU_MEMORY_MIB)}"
            )
            + " (a typo or the wrong unit? gpu_memory is the memory of each GPU, not of the task).",
            "give the memory one GPU needs, e.g. gpu_memory='80GiB'"
            + (
                "."
                if largest and largest > MAX_PLAUSIBLE_GPU_MEMORY_MIB
                else "; if your GPUs have more, describe them in [gpu_dag] inventory."
            ),
        )
        return
    types = limits.gpu_types
    if types is not None and gpu.gpu_type is not None and _canonical_type(gpu.gpu_type) not in types:
        known = ", ".join(sorted(types)) or "none"
        squeezed = {t.replace("_", ""): t for t in types}
        meant = squeezed.get(_canonical_type(gpu.gpu_type).replace("_", ""))
        chosen = f"; {inventory.chosen_by}" if inventory is not None else ""
        yield Finding(
            ERROR,
            "unknown-gpu-type",
            dag_id,
            task_id,
            f"GPU type {gpu.gpu_type!r} is not in the inventory (known types: {known}{chosen}).",
            (f"did you mean {meant!r}? " if meant else "")
            + "use one of the known types, or leave gpu_type unset for any GPU"
            + (f", {inventory.fix}." if inventory is not None else "."),
        )
        return
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
                f"{mem} of that kind ({inventory.description}; {inventory.chosen_by}).",
                f"request fewer GPUs or less memory, {inventory.fix}.",
            )


def _large_memory(mib: int) -> str:
    """``8000TiB`` for a whole number of TiB, else :func:`format_memory`."""
    tib = 1024 * 1024
    return f"{mib // tib}TiB" if mib % tib == 0 else format_memory(mib)


def _check_type(
    dag_id: str, task_id: str | None, gpu: GpuRequest, pool: str, limits: RequestLimits
) -> Iterable[Finding]:
    """The GPU type as written against its canonical spelling and against the task's pool."""
    if gpu.gpu_type is None:
        return
    canonical = _canonical_type(gpu.gpu_type)
    if (respelled := respelled_gpu_type(gpu.gpu_type)) is not None:
        yield Finding(
            WARNING,
            "gpu-type-spelling",
            dag_id,
            task_id,
            f"GPU type {gpu.gpu_type!r} is read as {respelled!r} (pool {pool_for_gpu_type(respelled)!r}): "
            "each run of characters other than letters and digits becomes one '_', so "
            f"{gpu.gpu_type.replace(' ', '-')!r}, {gpu.gpu_type.replace('-', ' ')!r} and {respelled!r} are "
            f"one type, and {respelled.replace('_', '')!r} another.",
            f"write gpu_type={respelled!r}, or {respelled.replace('_', '')!r} if that is how the workers' "
            "GPUs are named.",
        )
    pool_type = gpu_type_of_pool(pool)
    if pool_type is None or pool_type == canonical:
        return
    types = limits.gpu_types
    if types is not None and pool_type in types:
        severity, fact = ERROR, f"pool {pool!r} is the pool of GPU type {pool_type!r}"
    elif types is None and _TYPE_SHAPED.match(pool_type):
        severity, fact = WARNING, f"pool {pool!r} reads as the pool of GPU type {pool_type!r}"
    else:  # a pool of hosts (gpu_node1), or a name no known type has
        return
    yield Finding(
        severity,
        "pool-type-mismatch",
        dag_id,
        task_id,
        f"asks for GPU type {gpu.gpu_type!r} but {fact}: the pool would count the task against GPUs of "
        "another type.",
        f"drop pool= (a GPU task's pool follows its type: pool={pool_for_gpu_type(canonical)!r}), or "
        "correct gpu_type.",
    )


def default_pool_finding(dag_id: str, task_id: str | None, gpus: int, *, operator: bool = False) -> Finding:
    """A GPU task in Airflow's ``default_pool``: that pool counts tasks (128 slots by default), not GPUs,
    so it does not hold the task back while its GPUs are in use. An error for a GPU operator (whose pool
    the provider sets: ``default_pool`` was asked for), a warning for a task with GPU hints (Airflow's
    default pool when it names none)."""
    fix = (
        "drop pool= (a GPU operator's pool follows its type: gpu_default or gpu_<type>), or name a GPU pool."
        if operator
        else f"use a GPU operator (its pool follows its type), or give the task a GPU pool with "
        f"pool_slots={gpus} (e.g. pool='gpu_default')."
    )
    return Finding(
        ERROR if operator else WARNING,
        "gpu-in-default-pool",
        dag_id,
        task_id,
        f"needs {gpus} GPU(s) but runs in Airflow's {DEFAULT_POOL}, which counts tasks, not GPUs: it can be "
        "queued while its GPUs are busy, and the GPU pools other DAGs share do not count it.",
        fix,
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
