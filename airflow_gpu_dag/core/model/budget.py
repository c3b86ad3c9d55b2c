"""GPU-hour budget caps, pure: a cap per DAG run and per pool per UTC day, checked against usage.

Usage is what was charged (finished leases, finished pods) plus what gates have *claimed* for tasks
that passed and are not charged yet. A gate asks for the GPU-seconds its task is expected to use
(``request``: GPUs x estimated duration) and may pass only when that request fits under every cap:

    used + claimed + request <= cap   (and used + claimed < cap)

The ledgers (:mod:`airflow_gpu_dag.budget`) check and record a claim in one atomic step, so two
gates cannot both pass when only one fits. The gate that defers a GPU task while a cap is reached is
:class:`airflow_gpu_dag.operators.budget.BudgetGateOperator` (added by
:func:`airflow_gpu_dag.authoring.budget_gate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from airflow_gpu_dag.core.model.resources import real_number

__all__ = ["BudgetCap", "BudgetClaim", "BudgetDecision", "BudgetUsage", "claim_id", "evaluate"]


@dataclass(frozen=True)
class BudgetUsage:
    """GPU-seconds used so far by one DAG run and by one pool on one UTC day, and the GPU-seconds
    claimed (reserved) there by gates whose tasks have not been charged yet."""

    run_gpu_seconds: float
    pool_day_gpu_seconds: float
    day: str
    run_claimed_seconds: float = 0.0
    pool_day_claimed_seconds: float = 0.0

    @property
    def run_gpu_hours(self) -> float:
        return self.run_gpu_seconds / 3600.0

    @property
    def pool_day_gpu_hours(self) -> float:
        return self.pool_day_gpu_seconds / 3600.0

    @property
    def run_claimed_hours(self) -> float:
        return self.run_claimed_seconds / 3600.0

    @property
    def pool_day_claimed_hours(self) -> float:
        return self.pool_day_claimed_seconds / 3600.0


#: GPU-hours of float rounding a claim may exceed its cap by (``0.1 + 0.2`` hours against a 0.3 cap).
_ROUNDING_HOURS = 1e-9


def _check_hours(value: object, what: str, where: str) -> float | None:
    if value is None:
        return None
    number = real_number(value)  # NaN for a bool or a string, inf for 10**400
    if not math.isfinite(number):
        raise ValueError(f"{where}: {what}={value!r} is not a number of GPU-hours; pass e.g. {what}=40.")
    if number <= 0:
        kind = "negative" if number < 0 else "zero"
        raise ValueError(
            f"{where}: {what}={value!r} is {kind}; a GPU-hour budget must be > 0, or no GPU task could "
            f"ever start. Fix: pass e.g. {what}=40 (or drop the gate)."
        )
    return number


@dataclass(frozen=True)
class BudgetCap:
    """Caps in GPU-hours; None = no cap of that kind. ``pool`` is needed for the per-day cap."""

    gpu_hours_per_run: float | None = None
    gpu_hours_per_pool_day: float | None = None
    pool: str | None = None

    @classmethod
    def checked(
        cls,
        where: str,
        gpu_hours_per_run: object = None,
        gpu_hours_per_pool_day: object = None,
        pool: str | None = None,
    ) -> BudgetCap:
        """Build and validate; ``where`` names the DAG/task in the error message."""
        run = _check_hours(gpu_hours_per_run, "gpu_hours_per_run", where)
        day = _check_hours(gpu_hours_per_pool_day, "gpu_hours_per_pool_day", where)
        if run is None and day is None:
            raise ValueError(f"{where}: a budget gate needs gpu_hours_per_run= or gpu_hours_per_pool_day=.")
        if day is not None and not pool:
            raise ValueError(
                f"{where}: gpu_hours_per_pool_day needs the pool it caps; pass pool='<gpu pool name>'."
            )
        return cls(run, day, pool)

    def check_request(self, request_gpu_seconds: float, where: str) -> None:
        """Parse-time: a task expected to use more than a cap could never pass its gate."""
        hours = request_gpu_seconds / 3600.0
        for what, cap in (
            ("gpu_hours_per_run", self.gpu_hours_per_run),
            ("gpu_hours_per_pool_day", self.gpu_hours_per_pool_day),
        ):
            if cap is not None and hours > cap + _ROUNDING_HOURS:  # the tolerance evaluate() allows
                enough = math.ceil(hours * 1000) / 1000  # above the request, however close to the cap
                raise ValueError(
                    f"{where}: the gated task is expected to use {hours:.10g} GPU-hours (GPUs x duration "
                    f"estimate) but {what}={cap:g}, so its gate could never pass. Fix: raise the cap to "
                    f"at least {enough:g}, or lower the task's GPUs or duration estimate."
                )

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_hours_per_run": self.gpu_hours_per_run,
            "gpu_hours_per_pool_day": self.gpu_hours_per_pool_day,
            "pool": self.pool,
        }


def claim_id(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """Key of a gate's claim: one per gated task instance (a retried gate finds its own claim)."""
    return f"{dag_id}|{run_id}|{task_id}|{map_index}"


@dataclass(frozen=True)
class BudgetClaim:
    """GPU-seconds a gate reserves for its task until the task is charged (or the claim expires).

    ``task_id`` is the *gated* task; ``day`` the UTC day the claim counts against.
    """

    dag_id: str
    run_id: str
    task_id: str
    gpu_seconds: float
    pool: str | None
    day: str
    created: float
    expires: float
    map_index: int = -1

    @property
    def claim_id(self) -> str:
        return claim_id(self.dag_id, self.run_id, self.task_id, self.map_index)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "gpu_seconds": self.gpu_seconds,
            "pool": self.pool,
            "day": self.day,
            "created": self.created,
            "expires": self.expires,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BudgetClaim:
        return cls(
            dag_id=str(data["dag_id"]),
            run_id=str(data["run_id"]),
            task_id=str(data["task_id"]),
            gpu_seconds=float(data["gpu_seconds"]),
            pool=data.get("pool"),
            day=str(data["day"]),
            created=float(data["created"]),
            expires=float(data["expires"]),
            map_index=int(data.get("map_index", -1)),
        )


@dataclass(frozen=True)
class BudgetDecision:
    """Whether the next GPU task may start, and why (for the task log and the trigger event)."""

    allowed: bool
    reason: str


def _blocked(used: float, claimed: float, request: float, cap_hours: float) -> bool:
    total = (used + claimed) / 3600.0
    # written so that NaN anywhere (a NaN claim, a NaN cap) blocks: every comparison with NaN is False
    return not (total < cap_hours and total + request / 3600.0 <= cap_hours + _ROUNDING_HOURS)


def evaluate(cap: BudgetCap, usage: BudgetUsage, request_gpu_seconds: float = 0.0) -> BudgetDecision:
    """Pure: may a task expected to use ``request_gpu_seconds`` start under ``cap``?

    Blocked when used + claimed >= cap, or when the request does not fit in what is left.
    """
    claimed_run = f" + {usage.run_claimed_hours:.3f} claimed" if usage.run_claimed_seconds else ""
    claimed_pool = f" + {usage.pool_day_claimed_hours:.3f} claimed" if usage.pool_day_claimed_seconds else ""
    needs = f"; this task needs {request_gpu_seconds / 3600.0:.3f}" if request_gpu_seconds else ""
    run_cap = cap.gpu_hours_per_run
    if run_cap is not None and _blocked(
        usage.run_gpu_seconds, usage.run_claimed_seconds, request_gpu_seconds, run_cap
    ):
        return BudgetDecision(
            False,
            f"this DAG run used {usage.run_gpu_hours:.3f}{claimed_run} GPU-hours, cap {run_cap:g}{needs}",
        )
    day_cap = cap.gpu_hours_per_pool_day
    if day_cap is not None and _blocked(
        usage.pool_day_gpu_seconds, usage.pool_day_claimed_seconds, request_gpu_seconds, day_cap
    ):
        return BudgetDecision(
            False,
            f"pool {cap.pool!r} used {usage.pool_day_gpu_hours:.3f}{claimed_pool} GPU-hours on {usage.day}, "
            f"cap {day_cap:g} per day{needs}",
        )
    return BudgetDecision(
        True,
        f"within budget (run {usage.run_gpu_hours:.3f}{claimed_run} GPU-h, pool {cap.pool!r} "
        f"{usage.pool_day_gpu_hours:.3f}{claimed_pool} GPU-h on {usage.day}{needs})",
    )
