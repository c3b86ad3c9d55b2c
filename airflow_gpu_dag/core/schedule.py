"""The outcome of a simulation: the schedule of every task, every run's completion, the figures.

Made by :func:`airflow_gpu_dag.core.simulator.simulate`; read by the planner, the CLI, the UI and the
benchmarks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunResult", "ScheduledTask", "SimulationResult"]


@dataclass(frozen=True)
class ScheduledTask:
    """One task of the simulated schedule. ``ready`` is when its upstream tasks had all ended."""

    task_id: str
    start: float
    end: float
    slots: int
    pool: str
    priority: int
    ready: float = 0.0

    @property
    def wait(self) -> float:
        """Seconds spent ready but not admitted."""
        return self.start - self.ready


@dataclass(frozen=True)
class RunResult:
    """One DAG run of a simulation: its DAG, when it was triggered, when its last task ended, and its
    completion time (``end - trigger``, what the person who triggered it waited)."""

    dag_id: str
    trigger: float
    end: float

    @property
    def completion(self) -> float:
        return self.end - self.trigger


@dataclass
class SimulationResult:
    """The predicted schedule of a simulation and its figures.

    ``lower_bound`` = max(critical-path length, max over capacity pools of slot-seconds / capacity);
    ``max_pool_usage`` the most slots ever held at once per pool; ``controller_ticks`` how often the
    controller decided, ``reservation_ticks`` how many of those held a reservation in some pool.
    """

    policy: str
    makespan: float
    schedule: list[ScheduledTask]
    lower_bound: float
    priority_rule: str = ""
    max_pool_usage: dict[str, int] = field(default_factory=dict)
    controller_ticks: int = 0
    reservation_ticks: int = 0
    #: one entry per graph, in the order given
    runs: list[RunResult] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Makespan / lower bound (1.0 is optimal; 1.0 for an empty or zero-length run)."""
        return self.makespan / self.lower_bound if self.lower_bound > 0 else 1.0

    def max_wait(self, min_slots: int = 1) -> float:
        """Longest wait of a task holding at least ``min_slots`` slots (0 when there is none)."""
        return max((t.wait for t in self.schedule if t.slots >= min_slots), default=0.0)

    def by_id(self) -> dict[str, ScheduledTask]:
        return {t.task_id: t for t in self.schedule}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``simulate -o json`` and the UI's ``/api/plan``): the admission policy and
        priority rule assumed, makespan, lower bound, and per task its start, end, slots, pool, priority."""
        return {
            "policy": self.policy,
            "priority_rule": self.priority_rule,
            "makespan": self.makespan,
            "lower_bound": self.lower_bound,
            "schedule": [
                {
                    "task_id": t.task_id,
                    "start": t.start,
                    "end": t.end,
                    "slots": t.slots,
                    "pool": t.pool,
                    "priority": t.priority,
                }
                for t in self.schedule
            ],
        }

    @property
    def mean_completion(self) -> float:
        """Mean completion time (trigger -> last task ends) over the runs."""
        return sum(r.completion for r in self.runs) / len(self.runs) if self.runs else 0.0

    def completion_quantile(self, q: float) -> float:
        """The ``q`` quantile (nearest rank, 0 < q <= 1) of the runs' completion times."""
        values = sorted(r.completion for r in self.runs)
        if not values:
            return 0.0
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]
