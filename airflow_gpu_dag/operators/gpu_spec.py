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
import sys
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NoReturn

from airflow_gpu_dag.airflow.declaring import declaring_dag
from airflow_gpu_dag.contract import read as read_contract
from airflow_gpu_dag.core.analysis.gpu_requests import RequestLimits, check_gpu_request, default_pool_finding
from airflow_gpu_dag.core.model.findings import ERROR, Finding
from airflow_gpu_dag.core.model.ladders import as_rung_findings, never_runs
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL, pool_for_gpu_type
from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest, parse_duration, parse_estimate
from airflow_gpu_dag.executor_config import read_hints, request_hints
from airflow_gpu_dag.gpu import inventory as gpu_inventory
from airflow_gpu_dag.gpu.inventory import GpuInventory
from airflow_gpu_dag.settings import max_gpus_per_host, pool_capacities

log = logging.getLogger(__name__)

__all__ = [
    "DeclarationErrors",
    "GpuTaskError",
    "GpuTaskSpec",
    "building_rung",
    "collecting_declaration_errors",
    "current_dag_id",
    "declaration_failed",
    "gpu_scheduling_kwargs",
    "parse_time_inventory",
    "request_from",
    "resolve_gpu_task",
]


class GpuTaskError(ValueError):
    """A GPU task is declared wrongly; raised when the DAG file is parsed.

    ``findings`` are its problems, each with its code, DAG, task, message and fix (what
    ``airflow gpu-dag lint`` reports); the message lists every one, one line each, as
    ``[code] GPU task 't' in DAG 'd': message Fix: fix``. Built from a plain message it has none.
    """

    def __init__(self, problems: str | Sequence[Finding]) -> None:
        self.findings: tuple[Finding, ...] = () if isinstance(problems, str) else tuple(problems)
        super().__init__(problems if isinstance(problems, str) else "\n".join(map(_line, self.findings)))

    @property
    def code(self) -> str | None:
        """The code of the first problem (None for an error built from a plain message)."""
        return self.findings[0].code if self.findings else None

    @property
    def dag_id(self) -> str | None:
        return (self.findings[0].dag_id or None) if self.findings else None

    @property
    def task_id(self) -> str | None:
        return self.findings[0].task_id if self.findings else None

    @property
    def fix(self) -> str | None:
        return self.findings[0].fix if self.findings else None


def _line(finding: Finding) -> str:
    where = _where(finding.task_id, finding.dag_id or None)
    return f"[{finding.code}] {where}: {finding.message} Fix: {finding.fix}"


@dataclass
class DeclarationErrors:
    """What :func:`collecting_declaration_errors` collected: every declaration error found (``findings``),
    and the errors that stopped a DAG file anyway (``raised``: the file -> the error), which a caller
    reports as findings instead of the file's import error."""

    findings: list[Finding] = field(default_factory=list)
    raised: dict[str, GpuTaskError] = field(default_factory=dict)


#: Declaration errors are collected here instead of raised while ``airflow gpu-dag lint`` imports DAG
#: files (:func:`collecting_declaration_errors`); None: raised at the first wrongly declared task.
_collected: ContextVar[DeclarationErrors | None] = ContextVar("gpu_dag_declaration_errors", default=None)


@contextmanager
def collecting_declaration_errors() -> Iterator[DeclarationErrors]:
    """While the block runs, a GPU task declared wrongly does not stop its DAG file: its problems are
    added to the yielded :class:`DeclarationErrors` and the task is built with a stand-in (one GPU, no
    estimate), so every wrongly declared task of a file is found, each with its code, DAG and task.
    ``airflow gpu-dag lint`` imports DAG files in it; everywhere else the first one raises."""
    errors = DeclarationErrors()
    token = _collected.set(errors)
    try:
        yield errors
    finally:
        _collected.reset(token)


#: Top-level modules whose frames are not the DAG author's: the provider, Airflow, and the standard
#: library's machinery between a DAG file and an operator's ``__init__``.
_NOT_USER_MODULES = frozenset(
    {"airflow_gpu_dag", "airflow", "functools", "contextlib", "importlib", "abc", "typing", "attr", "attrs"}
)


def _user_frame() -> types.FrameType | None:
    """The innermost frame outside the provider and Airflow: the DAG file's line that declared the task."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__") or "")
        if not frame.f_code.co_filename.startswith("<") and module.split(".")[0] not in _NOT_USER_MODULES:
            return frame
        frame = frame.f_back
    return None


def declaration_failed(error: GpuTaskError, *, can_continue: bool = True) -> None:
    """Report a GPU task's declaration error: collected (and returns, when the caller can build the task
    with a stand-in) under :func:`collecting_declaration_errors`, else raised.

    Raised, its traceback ends at the DAG file's line that declared the task (the frames inside the
    provider and Airflow between that line and here are left out, all but this one), which Airflow
    shows as the file's import error.

    :raises GpuTaskError: ``error``, unless it was collected and ``can_continue``.
    """
    collected = _collected.get()
    frame = _user_frame()
    if collected is not None:
        if can_continue:
            collected.findings.extend(error.findings)
            return
        if frame is not None:
            collected.raised[frame.f_code.co_filename] = error
    _raise_at(error, frame)


def _raise_at(error: GpuTaskError, frame: types.FrameType | None) -> NoReturn:
    if frame is None:
        raise error
    raise error.with_traceback(types.TracebackType(None, frame, frame.f_lasti, frame.f_lineno)) from None


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
        host or pool, or a ``pool_slots`` that contradicts the GPU count: every problem of the task, each
        with its code and fix, its traceback ending at the DAG file's line (:func:`declaration_failed`;
        collected instead under :func:`collecting_declaration_errors`).
    """
    where = _where(task_id, dag_id)
    dag = dag_id or ""
    problems: list[Finding] = []
    try:
        request = GpuRequest.parse(gpus, gpu_memory, gpu_type)
        parsed = True
    except EstimateError as err:
        problems.append(
            Finding(ERROR, "bad-gpu-request", dag, task_id, f"{err}.", _request_fix(gpus, gpu_memory))
        )
        request, parsed = GpuRequest(1), False  # the stand-in while errors are collected
    duration_s = None
    if duration is not None:
        try:
            duration_s = parse_estimate(duration)
        except EstimateError as err:
            fix = "pass duration like '45m' or '1h30m'."
            problems.append(Finding(ERROR, "bad-estimate", dag, task_id, f"{err}.", fix))
    timeout_s = None
    if lease_timeout is not None:
        try:
            timeout_s = parse_duration(lease_timeout)
        except EstimateError as err:
            problems.append(
                Finding(
                    ERROR,
                    "bad-lease-timeout",
                    dag,
                    task_id,
                    f"lease_timeout: {err}.",
                    "pass lease_timeout like '10m' (or leave it unset: [gpu_dag] lease_wait_timeout).",
                )
            )

    previous = read_hints(executor_config)
    if previous.get("gpus") is not None and pool_slots == previous.get("gpus"):
        pool_slots = None  # derived from an earlier declaration (decorator .override()), recompute
    if previous.get("gpus") is not None and pool == pool_for_gpu_type(previous.get("gpu_type")):
        pool = None
    if parsed and pool_slots is not None and pool_slots != request.count:
        problems.append(
            Finding(
                ERROR,
                "pool-slots-mismatch",
                dag,
                task_id,
                f"pool_slots={pool_slots} but gpus={request.count}; a GPU task takes one pool slot per GPU.",
                "drop pool_slots (it is set from gpus).",
            )
        )
    if pool == DEFAULT_POOL:
        problems.append(default_pool_finding(dag, task_id, request.count, operator=True))
        pool = None
    pool = pool or pool_for_gpu_type(request.gpu_type)

    raw: list[Finding] = []
    findings: list[Finding] = []
    if parsed:
        if inventory is None:
            inventory = parse_time_inventory()
        limits = RequestLimits(
            pool_slots=pool_capacities(),
            max_gpus_per_host=max_gpus_per_host(),
            inventory=inventory.summary() if inventory is not None else None,
        )
        rung = _rung.get()
        raw = list(check_gpu_request(dag, task_id, request, pool, request.count, limits))
        findings = as_rung_findings(raw, rung and rung[0])
        problems.extend(f for f in findings if f.is_error)
    if problems:
        declaration_failed(GpuTaskError(problems))  # returns only while lint collects them
    rung = _rung.get()
    for before, finding in zip(raw, findings, strict=True):  # warnings, and a rung that never starts
        if finding.is_error:
            continue
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
