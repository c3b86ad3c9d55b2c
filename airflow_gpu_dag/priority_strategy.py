"""Airflow priority weight strategies: the cross-DAG critical-path and packing rules.

Use the class path string (required for mapped tasks)::

    default_args = {"weight_rule": CRITICAL_PATH_WEIGHT_RULE}
    # == "airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy"

Every task instance gets a *key*, the latest moment it may start for its run to meet the run's due
time, in one unit for all DAGs (:mod:`airflow_gpu_dag.core.policy.objective`; docs/priority.md)::

    weight = 2**31 - 1 - round(trigger + min(s * W, W + overdue) - c * remaining(task) - key_epoch)

so the scheduler, which orders the task instances of all DAGs by weight, starts the earliest key first:
within a run the longest remaining chain first (critical path), across runs small runs first with aging
by trigger time. ``remaining`` is the critical path (``CriticalPathPriorityStrategy``) or the packing
plan's planned end - planned start (``PackingPriorityStrategy``, critical path until the plan is made,
off the scheduler loop). ``[gpu_dag] objective`` sets ``s`` and ``c``, ``[gpu_dag] reservation_overdue``
``overdue`` (the cap: no run is due more than ``overdue`` after its own work could end).

Airflow calls ``get_weight`` in the scheduler (and the api-server) for every task instance it creates;
the work per call is a few lookups, plus an O(V + E) analysis once per DAG object
(:mod:`airflow_gpu_dag.priority`). ``get_weight`` never raises: an exception here would kill the
scheduler loop, so any failure falls back to the task's own ``priority_weight``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar

from airflow.task.priority_strategy import PriorityWeightStrategy

from airflow_gpu_dag.core.analysis.weight_rules import clamp_int32
from airflow_gpu_dag.priority.weights import CrossDagWeights, fallback_weight

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

log = logging.getLogger(__name__)

__all__ = ["CriticalPathPriorityStrategy", "PackingPriorityStrategy", "clamp_weight"]

#: Round to an int that fits the ``priority_weight`` column (int32).
clamp_weight = clamp_int32


class _CrossDagStrategy(PriorityWeightStrategy):
    """A strategy whose weights come from :class:`~airflow_gpu_dag.priority.weights.CrossDagWeights`
    (one per class and process); ``get_weight`` never raises."""

    _weights: ClassVar[CrossDagWeights]
    _label: ClassVar[str] = "priority"
    _failed: ClassVar[set[str]] = set()

    def get_weight(self, ti: TaskInstance) -> int:
        try:
            if ti.task is None:
                return 1
            return self._weights.weight(ti)
        except Exception as err:  # never break the scheduler loop
            where = f"{getattr(ti, 'dag_id', '?')}.{getattr(ti, 'task_id', '?')}"
            if where not in self._failed:  # once per task, not per task instance
                self._failed.add(where)
                log.warning(
                    "airflow-gpu-dag: %s weight failed for %s (%s: %s); using its priority_weight",
                    self._label,
                    where,
                    type(err).__name__,
                    err,
                )
            return fallback_weight(ti.task)


class CriticalPathPriorityStrategy(_CrossDagStrategy):
    """Cross-DAG key with the critical path as each task's remaining time (docs/priority.md)."""

    _weights = CrossDagWeights("critical_path")
    _label = "critical-path"


class PackingPriorityStrategy(_CrossDagStrategy):
    """Cross-DAG key with the packing plan's remaining times (see ``docs/priority.md``).

    The DAG is planned alone on its GPU pools (sizes from ``[gpu_dag] pools`` or the static inventory)
    under Airflow's admission with several rules, the best schedules are improved by justification (and,
    with ``[gpu_dag] plan_search_budget`` > 0, a local search over the start order), and the shortest
    predicted schedule's start order is kept (``core.planning.planner.packing_weights_plan``): the remaining
    time
    of a task is the planned end minus its planned start, so within a run the tasks start in the plan's
    order and across runs they compare like every other key. The plan is made off the scheduler loop, in
    a subprocess, once per DAG version; until it is ready (or without a known pool size, or above
    3,000 tasks) the critical path is used. Never raises.
    """

    _weights = CrossDagWeights("packing")
    _label = "packing"
