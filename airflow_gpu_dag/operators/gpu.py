"""Operators for GPU tasks on a local GPU host (LocalExecutor box, Celery GPU workers).

``GpuBashOperator`` runs a command and ``GpuPythonOperator`` a callable on exactly the GPUs the task
asked for::

    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    train = GpuBashOperator(
        task_id="train",
        bash_command="python train.py --devices $CUDA_VISIBLE_DEVICES",
        gpus=4,
        gpu_memory="80GiB",
        gpu_type="a100",
        duration="1h30m",
        retries=2,
    )

At parse time the operator checks the request (clear error naming the task and the fix), and sets:

* ``pool``: one pool per GPU type: ``gpu_default`` (any GPU) or ``gpu_<type>``; pass ``pool=`` to
  override;
* ``pool_slots``: the GPU count, so the pool counts GPUs;
* ``executor_config``: the provider's hints (:func:`airflow_gpu_dag.hints.gpu_hints`: duration, GPUs,
  memory, type, inputs/outputs), which survive DAG serialization for the critical-path priority.

At run time it leases concrete devices of the worker's host (:mod:`airflow_gpu_dag.gpu.lease`),
exports ``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES`` to the work, heartbeats the lease, and
releases it on success, failure and SIGTERM (``on_kill``). A killed worker's lease is reclaimed.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow.providers.standard.hooks.subprocess import SubprocessHook
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from airflow_gpu_dag.core.pools import normalize_gpu_type, pool_for_gpu_type
from airflow_gpu_dag.core.resources import EstimateError, GpuRequest, format_memory, parse_duration
from airflow_gpu_dag.gpu.inventory import (
    GpuInventory,
    InventoryError,
    InventoryUnavailable,
    configured_inventory_source,
    configured_inventory_spec,
    load_inventory,
)
from airflow_gpu_dag.gpu.lease import Lease, LeaseError, LeaseLost, LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.hints import HINTS_KEY, gpu_hints, read_hints
from airflow_gpu_dag.settings import max_gpus_per_host, pool_capacities

__all__ = [
    "GpuBashOperator",
    "GpuPythonOperator",
    "GpuTaskError",
    "GpuTaskSpec",
    "gpu_scheduling_kwargs",
    "parse_time_inventory",
    "resolve_gpu_task",
]

#: Keys of ``context`` the Python variant adds: the lease as a dict (devices, lease_id, ...).
LEASE_CONTEXT_KEY = "gpu_lease"


class GpuTaskError(ValueError):
    """A GPU task is declared wrongly; raised when the DAG file is parsed."""


@dataclass(frozen=True)
class GpuTaskSpec:
    """What the provider derives from a GPU task's declaration."""

    request: GpuRequest
    pool: str
    pool_slots: int
    executor_config: dict[str, Any]
    lease_timeout_s: float | None = None


# -- parse-time checks ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _inventory_for(source: str, spec: str | None) -> GpuInventory | None:
    try:
        return load_inventory(source, spec)
    except InventoryUnavailable:
        return None


def parse_time_inventory() -> GpuInventory | None:
    """The inventory that declarations are checked against while parsing (cached per process).

    ``[gpu_dag] inventory_source``: ``auto`` = NVML on this host, else the static inventory; None when
    neither is there (then only ``[gpu_dag] max_gpus_per_host`` and ``[gpu_dag] pools`` are checked).
    """
    try:
        return _inventory_for(configured_inventory_source(), configured_inventory_spec())
    except InventoryError as err:
        raise GpuTaskError(f"the GPU inventory configuration is invalid: {err}") from None


def _where(task_id: str | None, dag_id: str | None) -> str:
    task = f"GPU task {task_id!r}" if task_id else "GPU task"
    return f"{task} in DAG {dag_id!r}" if dag_id else task


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
        raise GpuTaskError(
            f"{where}: {err}. Fix: pass gpus=<whole number >= 1> and gpu_memory like '80GiB' or '80G'."
        ) from None
    if duration is not None:
        try:
            parse_duration(duration)
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
    pool = pool or pool_for_gpu_type(request.gpu_type)

    host_max = max_gpus_per_host()
    if host_max is not None and request.count > host_max:
        raise GpuTaskError(
            f"{where}: needs {request.count} GPUs but the largest host has {host_max} "
            f"([gpu_dag] max_gpus_per_host). Fix: request at most {host_max} GPUs or split the task."
        )
    pools = pool_capacities()
    if pools is not None and pool in pools and request.count > pools[pool]:
        raise GpuTaskError(
            f"{where}: needs {request.count} GPUs but pool {pool!r} has only {pools[pool]} slots in all, "
            f"so it could never run. Fix: request at most {pools[pool]} GPUs or grow pool {pool!r}."
        )
    inventory = inventory if inventory is not None else parse_time_inventory()
    if inventory is not None:
        if request.gpu_type is not None and normalize_gpu_type(request.gpu_type) not in inventory.types:
            known = ", ".join(sorted(inventory.types)) or "none"
            raise GpuTaskError(
                f"{where}: GPU type {request.gpu_type!r} is not in the inventory (known types: {known}). "
                "Fix: use one of the known types, or leave gpu_type unset for any GPU."
            )
        fitting = inventory.max_fitting(request.memory_mib, request.gpu_type)
        if request.count > fitting:
            mem = f" with {format_memory(request.memory_mib)}" if request.memory_mib else ""
            raise GpuTaskError(
                f"{where}: needs {request.describe()} but the {inventory.source} inventory has only "
                f"{fitting} GPU(s){mem} of that kind ({inventory.describe()}). "
                "Fix: request fewer GPUs or less memory, or correct [gpu_dag] inventory."
            )

    config = gpu_hints(
        duration=duration,
        gpus=request.count,
        gpu_memory=request.memory_mib,
        gpu_type=request.gpu_type,
        inputs=inputs,
        outputs=outputs,
        executor_config=executor_config,
    )
    # a re-declaration may drop memory/type: keep only what this declaration says
    hints = config[HINTS_KEY]
    for key, present in (("gpu_memory_mib", request.memory_mib), ("gpu_type", request.gpu_type)):
        if not present:
            hints.pop(key, None)
    return GpuTaskSpec(request, pool, request.count, config, timeout_s)


def _current_dag_id(kwargs: Mapping[str, Any]) -> str | None:
    dag = kwargs.get("dag")
    if dag is None:
        try:
            from airflow.sdk.definitions._internal.contextmanager import DagContext

            dag = DagContext.get_current()
        except Exception:
            dag = None
    return getattr(dag, "dag_id", None)


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
        dag_id=_current_dag_id(kwargs),
    )
    return {
        **kwargs,
        "pool": spec.pool,
        "pool_slots": spec.pool_slots,
        "executor_config": spec.executor_config,
    }


def _request_from(operator: Any) -> GpuRequest:
    request = getattr(operator, "gpu_request", None)
    if isinstance(request, GpuRequest):
        return request
    hints = read_hints(getattr(operator, "executor_config", None))
    return GpuRequest.parse(hints.get("gpus", 1), hints.get("gpu_memory_mib"), hints.get("gpu_type"))


# -- run time ---------------------------------------------------------------------------------------
class _GpuLeaseMixin:
    """Lease handling shared by the operators (acquire, heartbeat, release, on_kill)."""

    gpu_request: GpuRequest
    lease_timeout: float | None
    pool: str
    _gpu_lease: Lease | None = None
    _gpu_cancelled: bool = False

    @staticmethod
    def _resolve_gpu_kwargs(kwargs: dict[str, Any], **gpu: Any) -> GpuTaskSpec:
        """Check the GPU arguments (parse-time errors name the DAG and the task) and put the
        resolved ``pool``, ``pool_slots`` and hint-carrying ``executor_config`` into ``kwargs``."""
        spec = resolve_gpu_task(
            kwargs.get("task_id"),
            pool=kwargs.pop("pool", None),
            pool_slots=kwargs.pop("pool_slots", None),
            executor_config=kwargs.pop("executor_config", None),
            dag_id=_current_dag_id(kwargs),
            **gpu,
        )
        kwargs.update(pool=spec.pool, pool_slots=spec.pool_slots, executor_config=spec.executor_config)
        return spec

    def _lease_manager(self) -> LeaseManager:
        return LeaseManager(LeaseSettings.from_config())

    def _acquire_gpu_lease(self, context: Mapping[str, Any]) -> Lease:
        request = _request_from(self)
        owner = LeaseOwner.from_context(context, pool=getattr(self, "pool", None))
        manager = self._lease_manager()
        try:
            lease = manager.acquire(
                request, owner, timeout=self.lease_timeout, cancelled=lambda: self._gpu_cancelled
            )
        except LeaseError as err:
            raise AirflowException(str(err)) from err
        self._gpu_lease = lease
        lease.start_heartbeat(on_lost=self._on_lease_lost)
        self.log.info(  # type: ignore[attr-defined]
            "GPU lease %s: devices %s (CUDA_VISIBLE_DEVICES=%s) for %s",
            lease.lease_id,
            list(lease.devices),
            lease.visible_devices,
            owner.describe(),
        )
        return lease

    def _finish_gpu_lease(self, outcome: str) -> None:
        lease = self._gpu_lease
        if lease is None:
            return
        if self._gpu_cancelled and outcome != "success":
            outcome = "killed"  # SIGTERM (on_kill) ended the work
        try:
            lease.release(outcome)
        except LeaseError as err:  # e.g. SIGTERM arrived while this thread held the table lock
            self.log.warning(  # type: ignore[attr-defined]
                "GPU lease %s not released now (%s); it is released or reclaimed later", lease.lease_id, err
            )

    def _raise_if_lost(self) -> None:
        lease = self._gpu_lease
        if lease is not None and lease.lost:
            raise LeaseLost(
                f"GPU lease {lease.lease_id} on devices {list(lease.devices)} was reclaimed while the task "
                "ran (no heartbeat for lease_ttl); its GPU work was stopped. Fix: check why the worker "
                "stalled, or raise [gpu_dag] lease_ttl."
            )

    def _on_lease_lost(self, lease: Lease) -> None:  # pragma: no cover - overridden
        pass


class GpuBashOperator(_GpuLeaseMixin, BashOperator):
    """A :class:`BashOperator` that runs its command on leased GPUs of the worker's host.

    :param gpus: whole GPUs (>= 1); also the task's ``pool_slots``.
    :param gpu_memory: free memory needed on each GPU (``"80GiB"``, ``"80G"``, int MiB).
    :param gpu_type: GPU family (``"a100"``); None = any. Selects pool ``gpu_<type>``.
    :param duration: estimated run time (``"1h30m"``) for critical-path planning.
    :param lease_timeout: how long to wait for free devices at run time (default
        ``[gpu_dag] lease_wait_timeout``).
    :param inputs: dataset paths the task reads (hidden-dependency checks).
    :param outputs: dataset paths the task writes.

    Every other argument is the BashOperator's (``pool`` overrides the GPU pool).
    """

    custom_operator_name = "GpuBashOperator"
    ui_color = "#c9e4c5"

    def __init__(
        self,
        *,
        bash_command: Any,
        gpus: int = 1,
        gpu_memory: object = None,
        gpu_type: str | None = None,
        duration: object = None,
        lease_timeout: object = None,
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        **kwargs: Any,
    ) -> None:
        spec = self._resolve_gpu_kwargs(
            kwargs,
            gpus=gpus,
            gpu_memory=gpu_memory,
            gpu_type=gpu_type,
            duration=duration,
            lease_timeout=lease_timeout,
            inputs=inputs,
            outputs=outputs,
        )
        super().__init__(bash_command=bash_command, **kwargs)
        self.gpu_request = spec.request
        self.lease_timeout = spec.lease_timeout_s

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:  # type: ignore[override]
        """``GpuBashOperator.partial(task_id=..., gpus=2).expand(...)``: pool, slots and hints included."""
        from airflow.sdk.bases.operator import partial as sdk_partial

        return sdk_partial(cls, **gpu_scheduling_kwargs(kwargs))

    @functools.cached_property
    def subprocess_hook(self) -> SubprocessHook:
        """A SubprocessHook that records the command's process in the lease when it starts."""
        return _LeasedSubprocessHook(self._register_work_process)

    def _register_work_process(self, pid: int) -> None:
        if self._gpu_lease is not None:
            try:
                self._gpu_lease.register_process(pid)
            except Exception:
                self.log.exception("GPU lease: cannot record process %s", pid)

    def get_env(self, context: Any) -> dict:
        env = super().get_env(context)
        if self._gpu_lease is not None:
            env.update(self._gpu_lease.env())
        return env

    def execute(self, context: Any) -> Any:
        self._acquire_gpu_lease(context)
        outcome = "failed"
        try:
            result = super().execute(context)
            self._raise_if_lost()
            outcome = "success"
            return result
        except AirflowSkipException:
            outcome = "skipped"
            raise
        except BaseException:
            self._raise_if_lost()
            raise
        finally:
            self._finish_gpu_lease(outcome)

    def _on_lease_lost(self, lease: Lease) -> None:
        try:
            self.subprocess_hook.send_sigterm()
        except Exception:
            self.log.exception("GPU lease lost: cannot stop the command")

    def on_kill(self) -> None:
        """SIGTERM: stop the command, wait briefly for it to exit, then give the GPUs back.

        If the command does not exit in time the lease stays until this process dies; it is then
        reclaimed and the command's process group killed.
        """
        self._gpu_cancelled = True
        super().on_kill()
        proc = self.subprocess_hook.sub_process
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except Exception:
                self.log.warning("GPU task command still running after SIGTERM; lease kept until it dies")
                return
        self._finish_gpu_lease("killed")


class _LeasedSubprocessHook(SubprocessHook):
    """Reports the pid of each command it starts (``sub_process`` is assigned right after Popen)."""

    def __init__(self, on_start: Any) -> None:
        self._on_start = on_start
        self._proc: Any = None
        super().__init__()

    @property  # type: ignore[override]
    def sub_process(self) -> Any:
        return self._proc

    @sub_process.setter
    def sub_process(self, value: Any) -> None:
        self._proc = value
        if value is not None and getattr(value, "pid", None):
            self._on_start(value.pid)


class GpuPythonOperator(_GpuLeaseMixin, PythonOperator):
    """A :class:`PythonOperator` whose callable runs with leased GPUs (``@task.gpu`` uses it).

    While the callable runs, ``os.environ`` has ``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES`` set
    to the leased devices (import/initialise CUDA inside the callable, not at module level). A callable
    with a ``gpu_lease=None`` parameter receives the lease as a dict (``devices``, ``lease_id``, ...).
    Same GPU parameters as :class:`GpuBashOperator`.
    """

    custom_operator_name = "GpuPythonOperator"
    ui_color = "#c9e4c5"

    def __init__(
        self,
        *,
        gpus: int = 1,
        gpu_memory: object = None,
        gpu_type: str | None = None,
        duration: object = None,
        lease_timeout: object = None,
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        **kwargs: Any,
    ) -> None:
        spec = self._resolve_gpu_kwargs(
            kwargs,
            gpus=gpus,
            gpu_memory=gpu_memory,
            gpu_type=gpu_type,
            duration=duration,
            lease_timeout=lease_timeout,
            inputs=inputs,
            outputs=outputs,
        )
        super().__init__(**kwargs)
        self.gpu_request = spec.request
        self.lease_timeout = spec.lease_timeout_s
        self._gpu_running = False

    def execute(self, context: Any) -> Any:
        lease = self._acquire_gpu_lease(context)
        saved = {key: os.environ.get(key) for key in lease.env()}
        os.environ.update(lease.env())
        context[LEASE_CONTEXT_KEY] = lease.to_dict()
        outcome = "failed"
        try:
            self._gpu_running = True
            try:
                result = super().execute(context)
            finally:
                self._gpu_running = False
            self._raise_if_lost()
            outcome = "success"
            return result
        except KeyboardInterrupt:
            self._raise_if_lost()
            raise
        except AirflowSkipException:
            outcome = "skipped"
            raise
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._finish_gpu_lease(outcome)

    def _on_lease_lost(self, lease: Lease) -> None:
        import _thread

        if self._gpu_running and threading.main_thread().is_alive():
            _thread.interrupt_main()  # KeyboardInterrupt in the callable; execute raises LeaseLost

    def on_kill(self) -> None:
        """SIGTERM: stop the callable (an exception raised into it), which releases the lease."""
        self._gpu_cancelled = True
        super().on_kill()
        if self._gpu_running:
            raise AirflowException("GPU task terminated (SIGTERM); its GPU lease is released")
