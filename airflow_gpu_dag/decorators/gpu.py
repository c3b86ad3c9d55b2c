"""``@task.gpu``: a TaskFlow task that runs on leased GPUs of the worker's host.

Registered through ``get_provider_info()["task-decorators"]`` (name ``gpu``), so the Task SDK's
``task`` object finds it::

    from airflow.sdk import dag, task

    @dag(schedule=None)
    def finetune():
        @task.gpu(gpus=2, gpu_memory="40GiB", gpu_type="a100", duration="45m", retries=2)
        def train(gpu_lease=None):
            import os
            print("training on", os.environ["CUDA_VISIBLE_DEVICES"], gpu_lease["devices"])

        train()

The declaration is checked when the decorator is applied (bad count, memory, type, impossible
request: :class:`~airflow_gpu_dag.operators.gpu.GpuTaskError` naming the task and the fix). The
task's ``pool`` (``gpu_default`` / ``gpu_<type>``), ``pool_slots`` (= GPUs) and hints in
``executor_config`` are set here, so ``.partial(...).expand(...)`` mapped tasks get them too.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import attr
from airflow.sdk.bases.decorator import (
    DecoratedOperator,
    TaskDecorator,
    _TaskDecorator,
)

from airflow_gpu_dag.airflow.declaring import partial_default
from airflow_gpu_dag.core.model.findings import ERROR, Finding
from airflow_gpu_dag.operators.gpu import GpuPythonOperator, gpu_scheduling_kwargs
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError, current_dag_id, declaration_failed

__all__ = ["gpu_task"]


class _GpuDecoratedOperator(DecoratedOperator, GpuPythonOperator):
    """The operator behind ``@task.gpu``."""

    template_fields = GpuPythonOperator.template_fields
    template_fields_renderers = GpuPythonOperator.template_fields_renderers
    custom_operator_name: str = "@task.gpu"

    def __init__(self, *, python_callable: Callable, op_args: Any, op_kwargs: Any, **kwargs: Any) -> None:
        kwargs_to_upstream = {
            "python_callable": python_callable,
            "op_args": op_args,
            "op_kwargs": op_kwargs,
        }
        super().__init__(
            kwargs_to_upstream=kwargs_to_upstream,
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            **kwargs,
        )


@functools.cache
def _operator_keywords() -> frozenset[str]:
    """Every keyword the operator behind ``@task.gpu`` accepts (the ``__init__`` of each class it is
    made of: the GPU keywords, PythonOperator's, BaseOperator's)."""
    names: set[str] = set()
    for cls in _GpuDecoratedOperator.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None or init is object.__init__:
            continue
        for parameter in inspect.signature(init).parameters.values():
            if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD):
                names.add(parameter.name)
    names.discard("self")
    return frozenset(names)


def check_keywords(kwargs: Mapping[str, Any], task_id: str | None) -> None:
    """Refuse keywords the GPU task does not take, when the decorator is applied.

    Airflow checks an operator's keywords when it is built; a decorated task that is only ever mapped
    (``.expand()``) is never built at parse time, and stock Airflow passes an unknown keyword through
    silently: ``@task.gpu(gpu=4)`` (for ``gpus``) would run on one GPU.

    :raises GpuTaskError: naming the DAG, the task, the keyword and the closest known one.
    """
    accepted = _operator_keywords()
    unknown = sorted(k for k in kwargs if k not in accepted)
    if not unknown:
        return
    dag_id = current_dag_id(kwargs)
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, accepted, n=1)
        if key == "map_length":
            hints.append("map_length goes in executor_config=gpu_hints(map_length=N)")
        elif close:
            hints.append(f"{close[0]!r} instead of {key!r}")
    problem = Finding(
        ERROR,
        "unknown-gpu-keyword",
        dag_id or "",
        task_id,
        f"@task.gpu does not take {', '.join(map(repr, unknown))}.",
        ("; ".join(hints) + ". " if hints else "")
        + "The GPU keywords are gpus, gpu_memory, gpu_type, duration, lease_timeout, inputs and outputs; "
        "any other keyword must be an operator argument (retries, pool, queue, ...).",
    )
    declaration_failed(GpuTaskError([problem]), can_continue=False)


class _GpuTaskDecorator(_TaskDecorator):  # type: ignore[type-arg]
    """What ``@task.gpu`` returns. ``.override(gpus=4)`` checks the keywords and derives the pool,
    ``pool_slots`` and hints again: for a mapped task (``.override(...).expand(...)``) no operator is
    built at parse time, so the scheduler, the pool and the weights would keep the old ones while the
    worker leases the new request."""

    gpu_keywords: dict[str, Any] = {}

    def override(self, **kwargs: Any) -> Any:
        raw = {**self.gpu_keywords, **kwargs}
        task_id = raw.get("task_id") or self.function.__name__
        check_keywords(raw, task_id)
        result: Any = super().override(**gpu_scheduling_kwargs(raw, task_id=task_id))
        result.gpu_keywords = raw
        return result

    def partial(self, **kwargs: Any) -> Any:
        """``.partial(x=1)`` (the function's arguments) keeps the GPU keywords: a later ``.override()``
        derived the pool, slots and hints from its own keywords only (``gpus=1``, ``gpu_default``)."""
        result: Any = super().partial(**kwargs)
        result.gpu_keywords = self.gpu_keywords
        return result

    def _in_context(self) -> Any:
        """This decorator with the ``default_args`` ``executor_config`` (of the DAG and task group it is
        used in) under the hints: Airflow fills it only when not given, and the hints are given."""
        raw = self.gpu_keywords
        base = None if "executor_config" in raw else partial_default(raw, "executor_config")
        if base is None:
            return self
        task_id = raw.get("task_id") or self.function.__name__
        config = gpu_scheduling_kwargs({**raw, "executor_config": base}, task_id=task_id)["executor_config"]
        result: Any = attr.evolve(self, kwargs={**self.kwargs, "executor_config": config})
        for name in ("is_setup", "is_teardown", "on_failure_fail_dagrun"):
            setattr(result, name, getattr(self, name))
        result.gpu_keywords = raw
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return super(_GpuTaskDecorator, self._in_context()).__call__(*args, **kwargs)

    def _expand(self, expand_input: Any, *, strict: bool) -> Any:
        return super(_GpuTaskDecorator, self._in_context())._expand(expand_input, strict=strict)


def gpu_task(
    python_callable: Callable | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Wrap a function into a GPU task (``@task.gpu``).

    :param python_callable: the function (when used as ``@task.gpu`` without arguments).
    :param multiple_outputs: unroll a returned dict into several XComs.
    :param kwargs: the GPU keywords below; any other keyword (``retries``, ``pool``, ``task_id``,
        ...) goes to the operator.

    GPU keywords:

    - ``gpus``: whole GPUs (>= 1, default 1); also the task's ``pool_slots``.
    - ``gpu_memory``: free memory needed on each GPU: ``"80GiB"``, ``"80G"``, int MiB.
    - ``gpu_type``: GPU family (``"a100"``); None = any. Selects pool ``gpu_<type>``.
    - ``duration``: estimated run time (``"45m"``) for critical-path planning.
    - ``lease_timeout``: how long to wait for free devices at run time.
    - ``inputs``: dataset paths the task reads; ``outputs``: paths it writes.

    :raises GpuTaskError: a keyword the task does not take (see :func:`check_keywords`) or a bad GPU
        declaration, when the decorator is applied.
    """

    def factory(function: Callable) -> TaskDecorator:
        task_id = kwargs.get("task_id") or function.__name__
        check_keywords(kwargs, task_id)
        # what task_decorator_factory builds, as the subclass whose .override() derives again
        decorator: Any = _GpuTaskDecorator(
            function=function,
            multiple_outputs=attr.NOTHING if multiple_outputs is None else multiple_outputs,  # type: ignore[arg-type]
            operator_class=_GpuDecoratedOperator,
            kwargs=gpu_scheduling_kwargs(kwargs, task_id=task_id),
        )
        decorator.gpu_keywords = dict(kwargs)
        return decorator  # type: ignore[no-any-return]

    if python_callable is not None:
        return factory(python_callable)
    return factory  # type: ignore[return-value]
