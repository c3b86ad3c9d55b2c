"""``.partial(...).expand(...)`` for the GPU operators: the GPU request is the same for every instance.

A mapped task is admitted by the scheduler with the ``pool``, ``pool_slots`` and hints of its
``.partial()`` (no operator is built at parse time). Mapping over the GPU request itself
(``.expand(gpus=[1, 4])``) would admit every instance with the partial's slots while the worker
leases the mapped count: the pool would undercount, and a request no host can serve would fail only
when it runs. :class:`GpuOperatorPartial` refuses such keywords when the DAG is parsed; what can only
be seen at run time (``.expand_kwargs(<XCom>)``) is refused by :func:`check_unmapped_request` when the
worker builds the instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from airflow.sdk.bases.operator import partial as sdk_partial
from airflow.sdk.definitions.mappedoperator import OperatorPartial

from airflow_gpu_dag.core.model.findings import ERROR, Finding
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError, current_dag_id, declaration_failed

__all__ = ["UNMAPPABLE", "GpuOperatorPartial", "check_unmapped_request", "from_mapped", "gpu_partial"]

#: Keywords that decide a GPU task's pool, slots and hints: the same for every mapped instance.
UNMAPPABLE = frozenset(
    {"gpus", "gpu_memory", "gpu_type", "duration", "pool", "pool_slots", "executor_config"}
)

_FIX = (
    "Fix: map over the work (bash_command, op_kwargs, arguments, ...) and give the GPU request in "
    ".partial(); for several GPU sizes declare one mapped task per size."
)


def _where(kwargs: Mapping[str, Any]) -> str:
    dag_id = current_dag_id(kwargs)
    return f"GPU task {kwargs.get('task_id')!r}" + (f" in DAG {dag_id!r}" if dag_id else "")


def _refuse(kwargs: Mapping[str, Any], mapped: Any) -> None:
    keys: set[str] = set()
    if isinstance(mapped, Mapping):
        keys = set(mapped)
    elif isinstance(mapped, (list, tuple)):
        keys = {k for item in mapped if isinstance(item, Mapping) for k in item}
    bad = sorted(keys & UNMAPPABLE)
    if bad:
        problem = Finding(
            ERROR,
            "mapped-gpu-request",
            current_dag_id(kwargs) or "",
            kwargs.get("task_id"),
            f"cannot map over {', '.join(map(repr, bad))}: every mapped instance is admitted with the pool "
            "and slots of .partial().",
            _FIX.removeprefix("Fix: "),
        )
        declaration_failed(GpuTaskError([problem]), can_continue=False)


@attrs.define(kw_only=True, repr=False)
class GpuOperatorPartial(OperatorPartial):
    """An :class:`OperatorPartial` whose ``expand``/``expand_kwargs`` refuse the GPU keywords."""

    def expand(self, **mapped_kwargs: Any) -> Any:
        self._refuse(mapped_kwargs)  # before Airflow's "already specified" TypeError
        return super().expand(**mapped_kwargs)

    def _expand(self, expand_input: Any, *, strict: bool) -> Any:
        self._refuse(expand_input.value)
        return super()._expand(expand_input, strict=strict)

    def _refuse(self, mapped: Any) -> None:
        try:
            _refuse(self.kwargs, mapped)
        except GpuTaskError:
            self._expand_called = True  # the error says it all: no "was never mapped!" warning too
            raise


def gpu_partial(operator_class: type, kwargs: dict[str, Any]) -> GpuOperatorPartial:
    """``airflow.sdk``'s ``partial`` of ``operator_class``, as a :class:`GpuOperatorPartial`."""
    plain = sdk_partial(operator_class, **kwargs)  # Airflow's checks and defaults
    plain._expand_called = True  # replaced below: no "never mapped" warning for this copy
    return GpuOperatorPartial(operator_class=plain.operator_class, kwargs=plain.kwargs, params=plain.params)


def from_mapped(operator: object) -> bool:
    """Whether Airflow is building ``operator`` from a mapped task (``MappedOperator.unmap``: it passes
    ``_airflow_from_mapped=True``, which ``BaseOperator``'s wrapper stores before ``__init__`` runs)."""
    return bool(getattr(operator, "_BaseOperator__from_mapped", False))


def check_unmapped_request(
    kwargs: Mapping[str, Any], gpus: int, gpu_type: str | None, *, mapped: bool
) -> None:
    """At run time, for an instance built from a mapped task: the GPU request must be the one its
    ``.partial()`` declared (recorded in the hints), as the scheduler admitted it with that many slots.

    :raises GpuTaskError: the instance asks for other GPUs (``.expand_kwargs`` from an XCom).
    """
    if not mapped:
        return
    hinted = read_hints(kwargs.get("executor_config"))
    if hinted.get("gpus") is None:
        return
    declared = (hinted["gpus"], hinted.get("gpu_type") or None)
    if (gpus, gpu_type or None) != declared:
        raise GpuTaskError(
            f"{_where(kwargs)}: this mapped instance asks for {gpus} GPU(s) of type {gpu_type!r}, "
            f"but the task was admitted for {declared[0]} of type {declared[1]!r} (its .partial()). " + _FIX
        )
