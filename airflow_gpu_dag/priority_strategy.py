"""Airflow priority weight strategies backed by the critical-path analysis.

Use the class path string (required for mapped tasks)::

    default_args = {"weight_rule": CRITICAL_PATH_WEIGHT_RULE}
    # == "airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy"

The weight of a task is its remaining critical-path length in whole seconds, its own estimated
duration included (the article's ``priority = path_length + estimated_duration``), so ready tasks
on the longest remaining chain are queued first. The scheduler orders task instances of all DAGs by
this number.

Airflow calls ``get_weight`` in the scheduler (and the api-server) for every task instance it
creates. The analysis of a DAG is computed once per serialized DAG object and cached weakly, so a
run of a 10,000-task DAG costs one O(V+E) pass. ``get_weight`` never raises: an exception here
would kill the scheduler loop, so any failure falls back to the task's own ``priority_weight``.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from airflow.task.priority_strategy import PriorityWeightStrategy

from airflow_gpu_dag.airflow.graph import build_task_graph
from airflow_gpu_dag.core.planner import packing_weights_plan
from airflow_gpu_dag.core.pools import task_pool
from airflow_gpu_dag.core.rules import clamp_int32, critical_path_weights, width_aware_weights

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

log = logging.getLogger(__name__)

__all__ = [
    "CriticalPathPriorityStrategy",
    "PackingPriorityStrategy",
    "clamp_weight",
]

#: Round to an int that fits the ``priority_weight`` column (int32).
clamp_weight = clamp_int32


def _critical_path_weights(dag: Any) -> dict[str, int]:
    return critical_path_weights(build_task_graph(dag)[0])


class _CachedDagWeights:
    """Per-DAG-object cache of ``task_id -> weight``; entries die with the DAG object, so a new
    serialized version (a new object) is analysed afresh."""

    def __init__(self, compute: Any) -> None:
        self._compute = compute
        self._by_dag: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()

    def weights(self, dag: Any) -> dict[str, int]:
        try:
            cached = self._by_dag.get(dag)
        except TypeError:  # not weak-referenceable / unhashable: compute without caching
            return self._compute(dag)
        if cached is None:
            cached = self._compute(dag)
            self._by_dag[dag] = cached
        return cached


class _CachedWeightStrategy(PriorityWeightStrategy):
    """A strategy whose weights are computed once per DAG object by ``_cache``; ``get_weight`` never
    raises (an exception would kill the scheduler loop) and falls back to the task's own
    ``priority_weight``."""

    _cache: _CachedDagWeights
    _label = "priority"

    def get_weight(self, ti: TaskInstance) -> int:
        task = ti.task
        try:
            dag = task.get_dag() if task is not None else None
            if dag is None:
                return clamp_weight(getattr(task, "priority_weight", 1) or 1)
            return self._cache.weights(dag)[task.task_id]  # type: ignore[union-attr]
        except Exception:  # never break the scheduler loop
            log.exception(
                "airflow-gpu-dag: %s weight failed for %s; using priority_weight",
                self._label,
                getattr(ti, "task_id", "?"),
            )
            try:
                return clamp_weight(getattr(task, "priority_weight", 1) or 1)
            except Exception:
                return 1


class CriticalPathPriorityStrategy(_CachedWeightStrategy):
    """Priority = remaining critical-path length (seconds, own duration included)."""

    _cache = _CachedDagWeights(_critical_path_weights)
    _label = "critical-path"


# -- packing priority ----------------------------------------------------------------------------------
#: Above this many tasks the planner is not run in the scheduler; width-aware critical path is used.
PACKING_PLAN_MAX_TASKS = 3000


def _plan_policy() -> str:
    """``[gpu_dag] plan_policy``: ``reservation`` (default: the watermark controller reserves) or
    ``greedy`` (stock pool admission)."""
    from airflow_gpu_dag.settings import conf_get

    raw = conf_get("plan_policy", "reservation") or "reservation"
    return "critical_path" if raw.strip().lower() in ("greedy", "stock", "critical_path") else "reservation"


def _plan_search_budget() -> int:
    """``[gpu_dag] plan_search_budget``: simulated tasks the planner's local search may spend (0, the
    default, turns it off; ``core.planner.SEARCH_BUDGET`` = 60000 is the measured setting)."""
    from airflow_gpu_dag.settings import conf_get

    raw = conf_get("plan_search_budget", "0") or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        log.warning("[gpu_dag] plan_search_budget %r is not an integer; the local search stays off", raw)
        return 0


def _plan_strict_backfill() -> bool:
    """``[gpu_dag] plan_backfill``: ``strict`` when the watermark controller's pools use
    ``backfill: strict`` (the plan is made for that controller); anything else plans for the default."""
    from airflow_gpu_dag.settings import conf_get

    return (conf_get("plan_backfill", "easy") or "easy").strip().lower() == "strict"


def _packing_weights(dag: Any) -> dict[str, int]:
    from airflow_gpu_dag.settings import pool_capacities

    graph, _ = build_task_graph(dag)
    configured = pool_capacities() or {}
    used = {task_pool(node) for node in graph.nodes.values() if node.gpu is not None}
    capacity = {pool: slots for pool, slots in configured.items() if pool in used and slots > 0}
    if not capacity:  # no known GPU pool size: plain critical path
        return critical_path_weights(graph)
    if len(graph) > PACKING_PLAN_MAX_TASKS:
        return {t: clamp_weight(w) for t, w in width_aware_weights(graph, capacity).items()}
    try:
        plan = packing_weights_plan(
            graph,
            capacity,
            _plan_policy(),
            search_budget=_plan_search_budget(),
            strict_backfill=_plan_strict_backfill(),
        )
    except ValueError as err:  # CapacityError: a task wider than its pool; the dag policy reports it
        log.warning(
            "airflow-gpu-dag: cannot plan DAG %r (%s); using critical-path weights", graph.dag_id, err
        )
        return critical_path_weights(graph)
    return {t: clamp_weight(w) for t, w in plan.weights.items()}


class PackingPriorityStrategy(_CachedWeightStrategy):
    """Priority planned so the GPU pools are packed (see ``docs/priority.md``).

    The DAG is simulated alone on its GPU pools (sizes from ``[gpu_dag] pools``) under Airflow's
    admission, with several rules (critical path, width-aware critical path, downstream work, Airflow's
    ``downstream``); the best schedules are improved by forward-backward justification (and, with
    ``[gpu_dag] plan_search_budget`` > 0, a seeded local search over the start order), and the weights
    that reproduce the shortest predicted schedule are kept (``core.planner.packing_weights_plan``).
    ``[gpu_dag] plan_policy`` says whether the watermark controller reserves (``reservation``, default)
    or pools keep their size (``greedy``). The weights are those of the winning option: a rule's own
    weights or plan ranks (1 = last to start); they order the tasks of one DAG, not DAGs against each
    other. Without a configured pool size the critical-path weights are used; above
    ``PACKING_PLAN_MAX_TASKS`` tasks the width-aware critical path. Computed once per DAG object;
    never raises (a failure falls back to the task's ``priority_weight``).
    """

    _cache = _CachedDagWeights(_packing_weights)
    _label = "packing"
