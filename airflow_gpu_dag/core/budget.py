"""GPU-hour budget caps, pure: a cap per DAG run and per pool per UTC day, checked against usage.

The usage comes from the lease usage ledger (:mod:`airflow_gpu_dag.budget.ledger`); the gate that
defers a GPU task while a cap is reached is :class:`airflow_gpu_dag.operators.budget.BudgetGateOperator`
(added by :func:`airflow_gpu_dag.authoring.budget_gate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["BudgetCap", "BudgetDecision", "BudgetUsage", "evaluate"]


@dataclass(frozen=True)
class BudgetUsage:
    """GPU-seconds used so far by one DAG run and by one pool on one UTC day."""

    run_gpu_seconds: float
    pool_day_gpu_seconds: float
    day: str

    @property
    def run_gpu_hours(self) -> float:
        return self.run_gpu_seconds / 3600.0

    @property
    def pool_day_gpu_hours(self) -> float:
        return self.pool_day_gpu_seconds / 3600.0


def _check_hours(value: object, what: str, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: {what}={value!r} is not a number of GPU-hours; pass e.g. {what}=40.")
    if value < 0:
        raise ValueError(
            f"{where}: {what}={value!r} is negative; a GPU-hour budget must be >= 0 "
            f"(0 blocks every GPU task), e.g. {what}=40."
        )
    return float(value)


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_hours_per_run": self.gpu_hours_per_run,
            "gpu_hours_per_pool_day": self.gpu_hours_per_pool_day,
            "pool": self.pool,
        }


@dataclass(frozen=True)
class BudgetDecision:
    """Whether the next GPU task may start, and why (for the task log and the trigger event)."""

    allowed: bool
    reason: str


def evaluate(cap: BudgetCap, usage: BudgetUsage) -> BudgetDecision:
    """Pure: compare usage with the caps. A cap is reached when usage >= cap."""
    if cap.gpu_hours_per_run is not None and usage.run_gpu_hours >= cap.gpu_hours_per_run:
        return BudgetDecision(
            False,
            f"this DAG run used {usage.run_gpu_hours:.3f} GPU-hours, cap {cap.gpu_hours_per_run:g}",
        )
    if cap.gpu_hours_per_pool_day is not None and usage.pool_day_gpu_hours >= cap.gpu_hours_per_pool_day:
        return BudgetDecision(
            False,
            f"pool {cap.pool!r} used {usage.pool_day_gpu_hours:.3f} GPU-hours on {usage.day}, "
            f"cap {cap.gpu_hours_per_pool_day:g} per day",
        )
    return BudgetDecision(
        True,
        f"within budget (run {usage.run_gpu_hours:.3f} GPU-h, pool {cap.pool!r} "
        f"{usage.pool_day_gpu_hours:.3f} GPU-h on {usage.day})",
    )
