"""The watermark controller's clock in a simulation: its settings and when it decides next.

The controller runs every ``interval`` seconds on a fixed grid (0, interval, 2 * interval, ...);
0 means at every event, before the scheduler loop (see :func:`airflow_gpu_dag.core.simulator.simulate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from airflow_gpu_dag.core.objective import ReservationGate

__all__ = ["ControllerOptions", "next_multiple"]


@dataclass(frozen=True)
class ControllerOptions:
    """The controller's settings in a simulation (see :func:`simulate`)."""

    interval: float
    backfill: bool
    lookahead: bool
    strict_backfill: bool
    verify: bool
    gate: ReservationGate | None = None

    def next_decision(self, now: float) -> float | None:
        """When the controller decides next (None: at the next event, interval 0)."""
        if self.interval <= 0:
            return None
        return next_multiple(now, self.interval)


def next_multiple(now: float, interval: float) -> float:
    """The first controller tick after ``now``: the least ``k * interval`` > ``now``. Computed as
    ``(floor(now / interval) + 1) * interval`` alone it can equal ``now`` when the division rounds down
    (``now = 3 * 0.7``), and the event loop never moved on."""
    k = math.floor(now / interval) + 1
    while k * interval <= now:
        k += 1
    while k > 1 and (k - 1) * interval > now:
        k -= 1
    return k * interval
