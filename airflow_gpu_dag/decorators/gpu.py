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

from collections.abc import Callable
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_gpu_dag.operators.gpu import GpuPythonOperator, gpu_scheduling_kwargs

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
    """

    def factory(function: Callable) -> TaskDecorator:
        return task_decorator_factory(
            python_callable=function,
            multiple_outputs=multiple_outputs,
            decorated_operator_class=_GpuDecoratedOperator,
            **gpu_scheduling_kwargs(kwargs, task_id=kwargs.get("task_id") or function.__name__),
        )

    if python_callable is not None:
        return factory(python_callable)
    return factory  # type: ignore[return-value]
