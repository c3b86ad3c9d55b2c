"""Parse-time GPU task declarations: check the request and derive pool, pool slots and hints.

:func:`resolve_gpu_task` is what the GPU operators and ``@task.gpu`` run when a DAG file is parsed:
it parses the request (count, memory, type, duration, lease timeout), derives the pool (``gpu_default``
or ``gpu_<type>``), ``pool_slots`` (one per GPU) and the hint-carrying ``executor_config``, and raises
:class:`GpuTaskError` (naming the DAG, the task and the fix) for a request that could never run,
from the findings of :func:`airflow_gpu_dag.core.analysis.gpu_requests.check_gpu_request` against
``[gpu_dag] pools``,
``[gpu_dag] max_gpus_per_host`` and the parse-time inventory (:func:`parse_time_inventory`). A fallback
rung its ladder can move on from only warns (:func:`building_rung`, set by the ladder while it builds
the rung).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from airflow_gpu_dag.airflow.declaring import declaring_dag
from airflow_gpu_dag.contract import read as read_contract
from airflow_gpu_dag.core.analysis.gpu_requests import RequestLimits, check_gpu_request, default_pool_finding
from airflow_gpu_dag.core.model.ladders import as_rung_findings, never_runs
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL, pool_for_gpu_type
from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest, parse_duration, parse_estimate
from airflow_gpu_dag.executor_config import read_hints, request_hints
from airflow_gpu_dag.gpu import inventory as gpu_inventory
from airflow_gpu_dag.gpu.inventory import GpuInventory
from airflow_gpu_dag.settings import max_gpus_per_host, pool_capacities

log = logging.getLogger(__name__)

__all__ = [
    "GpuTaskError",
    "GpuTaskSpec",
    "building_rung",
    "current_dag_id",
    "gpu_scheduling_kwargs",
    "parse_time_inventory",
    "request_from",
    "resolve_gpu_task",
]


class GpuTaskError(ValueError):
    """A GPU task is declared wrongly; raised when the DAG file is parsed."""


#: The fallback rung being built (its ``fallback`` hints, and where to list what it can never get; see
#: :func:`building_rung`), else None.
_rung: ContextVar[tuple[Mapping[str, Any], list[str]] | None] = ContextVar(
    "gpu_dag_fallback_rung", default=None
)


@contextmanager
def building_rung(fallback: Mapping[str, Any]) -> Iterator[list[str]]:
    """While a fallback ladder's factory builds a rung: a request that can never be met is a warning,
    not an error, when the rung can fall back (:func:`airflow_gpu_dag.core.model.ladders.as_rung_findings`).
    Yields the list those warnings are added to (the ladder checks that a watcher will skip the rung)."""
    never_starts: list[str] = []
    token = _rung.set((fallback, never_starts))
    try:
        yield never_starts
    finally:
        _rung.reset(token)


@dataclass(frozen=True)
class GpuTaskSpec:
    """What the provider derives from a GPU task's declaration."""

    request: GpuRequest
    pool: str
    pool_slots: int
    executor_config: dict[str, Any]
    lease_timeout_s: float | None = None


# -- checks ------------------------------------------------------------------------------
def parse_time_inventory() -> GpuInventory | None:
    """The inventory that declarations are checked against while parsing (cached per process): the
    static inventory with ``[gpu_dag] inventory_source`` ``auto`` or ``static``, this host's GPUs only
    with ``nvml`` (:func:`airflow_gpu_dag.gpu.inventory.parse_time_inventory`); None when there is none
    or its configuration cannot be read (logged once; then only ``[gpu_dag] max_gpus_per_host`` and
    ``[gpu_dag] pools`` are checked)."""
    return gpu_inventory.parse_time_inventory()


def _where(task_id: str | None, dag_id: str | None) -> str:
    task = f"GPU task {task_id!r}" if task_id else "GPU task"
    return f"{task} in DAG {dag_id!r}" if dag_id else task


def _request_fix(gpus: object, gpu_memory: object) -> str:
    """The fix for a GPU request that does not parse: for the argument that is wrong."""
    for count, memory, fix in (
        (gpus, None, "pass gpus=<whole number >= 1>, e.g. gpus=2."),
        (1, gpu_memory, "pass gpu_memory like '80GiB' or '80G' (an int is MiB)."),
    ):
        try:
            GpuRequest.parse(count, memory)
        except EstimateError:
            return fix
    return "pass gpu_type as one GPU type name such as 'a100', or leave it unset for any GPU."


def resolve_gpu_task(
    task_id: str | None,
    *,
    gpus: object = 1,
    gpu_memory: object = None,
    gpu_type: str | None = None,
    duration: object = None,
    pool: str | None = None,
    pool_slots: int | None = None,
    executor_config: Mapping[str, Any] | None = None,
    inputs: Iterable[str] = (),
    outputs: Iterable[str] = (),
    lease_timeout: object = None,
    dag_id: str | None = None,
    inventory: GpuInventory | None = None,
) -> GpuTaskSpec:
    """Check a GPU task's declaration and derive its pool, pool slots and hints.

    :param inventory: checked against (default :func:`parse_time_inventory`).
    :raises GpuTaskError: a bad count, memory, type or duration, a request larger than the largest
        host or pool, or a ``pool_slots`` that contradicts the GPU count; the message names the task
        and the fix.
    """
    where = _where(task_id, dag_id)
    try:
        request = GpuRequest.parse(gpus, gpu_memory, gpu_type)
    except EstimateError as err:
        raise GpuTaskError(f"{where}: {err}. Fix: {_request_fix(gpus, gpu_memory)}") from None
    duration_s = None
    if duration is not None:
        try:
            duration_s = parse_estimate(duration)
        except EstimateError as err:
            raise GpuTaskError(f"{where}: {err}. Fix: pass duration like '45m' or '1h30m'.") from None
    timeout_s = None
    if lease_timeout is not None:
        try:
            timeout_s = parse_duration(lease_timeout)
        except EstimateError as err:
            raise GpuTaskError(f"{where}: lease_timeout: {err}.") from None

    previous = read_hints(executor_config)
    if previous.get("gpus") is not None and pool_slots == previous.get("gpus"):
        pool_slots = None  # derived from an earlier declaration (decorator .override()), recompute
    if previous.get("gpus") is not None and pool == pool_for_gpu_type(previous.get("gpu_type")):
        pool = None
    if pool_slots is not None and pool_slots != request.count:
        raise GpuTaskError(
            f"{where}: pool_slots={pool_slots} but gpus={request.count}; a GPU task takes one pool slot "
            "per GPU. Fix: drop pool_slots (it is set from gpus)."
        )
    if pool == DEFAULT_POOL:
        found = default_pool_finding(dag_id or "", task_id, request.count, operator=True)
        raise GpuTaskError(f"{where}: {found.message} Fix: {found.fix}")
    pool = pool or pool_for_gpu_type(request.gpu_type)

    if inventory is None:
        inventory = parse_time_inventory()
    limits = RequestLimits(
        pool_slots=pool_capacities(),
        max_gpus_per_host=max_gpus_per_host(),
        inventory=inventory.summary() if inventory is not None else None,
    )
    rung = _rung.get()
    raw = list(check_gpu_request(dag_id or "", task_id, request, pool, request.count, limits))
    findings = as_rung_findings(raw, rung and rung[0])
    errors = [f"{where}: {f.message} Fix: {f.fix}" for f in findings if f.is_error]
    if errors:
        raise GpuTaskError("\n".join(errors))
    for before, finding in zip(raw, findings, strict=True):  # warnings, and a rung that never starts
        log.warning("%s: %s Fix: %s", where, finding.message, finding.fix)
        if rung is not None and before.is_error:
            rung[1].append(never_runs(before))

    # the request parsed above, written once (a re-declaration that drops memory or type drops it here)
    config = request_hints(request, duration_s, inputs, outputs, executor_config)
    return GpuTaskSpec(request, pool, request.count, config, timeout_s)


def current_dag_id(kwargs: Mapping[str, Any]) -> str | None:
    """The id of the DAG a task is being declared in (``declaring_dag``: ``kwargs["dag"]`` or the context)."""
    return getattr(declaring_dag(kwargs), "dag_id", None)


def gpu_scheduling_kwargs(kwargs: Mapping[str, Any], task_id: str | None = None) -> dict[str, Any]:
    """``kwargs`` of a GPU task with the derived ``pool``, ``pool_slots`` and ``executor_config`` added.

    Used where the operator's ``__init__`` does not run at parse time (``.partial().expand()``, the
    decorator), so mapped GPU tasks are scheduled like plain ones.
    """
    spec = resolve_gpu_task(
        task_id or kwargs.get("task_id"),
        gpus=kwargs.get("gpus", 1),
        gpu_memory=kwargs.get("gpu_memory"),
        gpu_type=kwargs.get("gpu_type"),
        duration=kwargs.get("duration"),
        pool=kwargs.get("pool"),
        pool_slots=kwargs.get("pool_slots"),
        executor_config=kwargs.get("executor_config"),
        inputs=kwargs.get("inputs", ()),
        outputs=kwargs.get("outputs", ()),
        lease_timeout=kwargs.get("lease_timeout"),
        dag_id=current_dag_id(kwargs),
    )
    return {
        **kwargs,
        "pool": spec.pool,
        "pool_slots": spec.pool_slots,
        "executor_config": spec.executor_config,
    }


def request_from(operator: Any) -> GpuRequest:
    """The GPU request of a GPU operator: the one it parsed when it was declared, else its task
    contract's (a task rebuilt from a serialized DAG); one GPU when it declares none.

    :raises EstimateError: the contract's GPU request is malformed (the cluster policy refuses such a
        DAG; a DAG parsed without it fails here, when its task starts).
    """
    request = getattr(operator, "gpu_request", None)
    if isinstance(request, GpuRequest):
        return request
    contract = read_contract(getattr(operator, "executor_config", None))
    if contract.gpu_request is not None:
        return contract.gpu_request
    for problem in contract.problems:
        if problem.code == "bad-gpu-request":
            raise EstimateError(problem.message.removesuffix("."))
    return GpuRequest(1)
