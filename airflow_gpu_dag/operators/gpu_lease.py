"""Run-time GPU leases for the GPU operators: acquire before the work, heartbeat, release after it.

:class:`GpuLeaseMixin` leases concrete devices of the worker's host (:mod:`airflow_gpu_dag.gpu.lease`)
for the task's request, releases them on success, failure and SIGTERM, and turns a lease reclaimed
while the task ran into :class:`~airflow_gpu_dag.gpu.lease.LeaseLost`. The operators
(:mod:`airflow_gpu_dag.operators.gpu`) hand the lease's devices to their work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException

from airflow_gpu_dag.airflow.declaring import partial_default
from airflow_gpu_dag.budget.check import forward_this_host
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.lease import Lease, LeaseError, LeaseLost, LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.operators.gpu_partial import check_unmapped_request, from_mapped, gpu_partial
from airflow_gpu_dag.operators.gpu_spec import (
    GpuTaskSpec,
    current_dag_id,
    gpu_scheduling_kwargs,
    request_from,
    resolve_gpu_task,
)

__all__ = ["GpuLeaseMixin"]


class GpuLeaseMixin:
    """Lease handling shared by the operators (acquire, heartbeat, release, on_kill)."""

    gpu_request: GpuRequest
    lease_timeout: float | None
    pool: str
    _gpu_lease: Lease | None = None
    _gpu_cancelled: bool = False

    def _resolve_gpu_kwargs(self, kwargs: dict[str, Any], **gpu: Any) -> GpuTaskSpec:
        """Check the GPU arguments (parse-time errors name the DAG and the task) and put the
        resolved ``pool``, ``pool_slots`` and hint-carrying ``executor_config`` into ``kwargs``."""
        # from default_args too: Airflow fills only arguments not given, and executor_config is given below
        hinted = partial_default(kwargs, "executor_config")
        kwargs.pop("executor_config", None)
        spec = resolve_gpu_task(
            kwargs.get("task_id"),
            pool=kwargs.pop("pool", None),
            pool_slots=kwargs.pop("pool_slots", None),
            executor_config=hinted,
            dag_id=current_dag_id(kwargs),
            **gpu,
        )
        request = spec.request
        check_unmapped_request(
            {**kwargs, "executor_config": hinted}, request.count, request.gpu_type, mapped=from_mapped(self)
        )
        kwargs.update(pool=spec.pool, pool_slots=spec.pool_slots, executor_config=spec.executor_config)
        return spec

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """``.partial(task_id=..., gpus=2).expand(...)``: pool, slots and hints set at parse time, and
        the GPU request refused as a mapped argument (see :mod:`~airflow_gpu_dag.operators.gpu_partial`)."""
        config = partial_default(kwargs, "executor_config")  # the DAG's pod_override, say
        return gpu_partial(cls, gpu_scheduling_kwargs({**kwargs, "executor_config": config}))

    def _lease_manager(self) -> LeaseManager:
        return LeaseManager(LeaseSettings.from_config())

    def _lease_work_groups(self) -> tuple[int, ...]:
        """Process groups recorded with the lease when it is taken (a reclaim stops what is left in
        them); the bash operator records its command's session when it starts instead."""
        return ()

    def _acquire_gpu_lease(self, context: Mapping[str, Any]) -> Lease:
        request = request_from(self)
        owner = LeaseOwner.from_context(context, pool=getattr(self, "pool", None))
        manager = self._lease_manager()
        try:
            lease = manager.acquire(
                request,
                owner,
                timeout=self.lease_timeout,
                cancelled=lambda: self._gpu_cancelled,
                work_groups=self._lease_work_groups(),
            )
        except LeaseError as err:
            who = owner.describe()
            raise AirflowException(str(err) if who in str(err) else f"{who}: {err}") from err
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
        forward_this_host()  # a shared budget ledger gets this host's lease usage (no-op without one)

    def _leave_lease_to_reclaim(self) -> None:
        """The work survived SIGKILL: keep the lease (its devices are still in use) without a
        heartbeat; it is reclaimed, and its recorded processes killed, once this task process exits."""
        lease = self._gpu_lease
        if lease is None:
            return
        lease.stop_heartbeat()
        self.log.error(  # type: ignore[attr-defined]
            "GPU task work still running after SIGKILL: lease %s on devices %s is kept and reclaimed "
            "once this task process exits (the reclaim kills the processes recorded in the lease)",
            lease.lease_id,
            list(lease.devices),
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
