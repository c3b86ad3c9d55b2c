"""The critical path method (CPM) over a :class:`~airflow_gpu_dag.core.model.graph.TaskGraph`.

For every task: earliest start/finish (ES/EF, forward pass), latest start/finish (LS/LF, backward
pass against the makespan of the whole graph), slack = LS - ES, and the remaining critical-path
length = the longest chain of durations from the task's start to the end of the graph, its own
duration included. A task with zero slack is critical. With unlimited resources the graph cannot
finish sooner than ``makespan``.

O(V + E), deterministic (ties broken by insertion order), correct with several sources and sinks,
zero-duration tasks and disconnected components: every sink's LF is the makespan of the whole graph,
so a short independent component gets slack rather than being called critical.

A task with ``not_before`` > 0 (a start window that opens later) starts no earlier than that:
``ES = max(EF of its upstream tasks, not_before)``. The backward pass is unchanged (a release time
only delays the forward pass), so the remaining critical-path length, and with it the priority
weight, does not depend on the window; slack does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import EstimateError

__all__ = ["CriticalPathAnalysis", "TaskTiming", "analyze"]

#: Relative tolerance for "slack is zero" (durations are floats summed along paths).
_EPS = 1e-9


@dataclass(frozen=True)
class TaskTiming:
    """CPM figures for one task, all in seconds from the start of the run."""

    earliest_start: float
    earliest_finish: float
    latest_start: float
    latest_finish: float
    slack: float
    remaining: float
    critical: bool


@dataclass(frozen=True)
class CriticalPathAnalysis:
    """The result of :func:`analyze`."""

    dag_id: str
    timings: dict[str, TaskTiming]
    makespan: float
    critical_path: list[str]
    order: list[str]

    @property
    def critical_tasks(self) -> list[str]:
        """Every task with zero slack, in topological order (may span several parallel paths)."""
        return [t for t in self.order if self.timings[t].critical]

    def priority(self, task_id: str) -> float:
        """Critical-path priority: the remaining critical-path length, own duration included."""
        return self.timings[task_id].remaining


def analyze(graph: TaskGraph) -> CriticalPathAnalysis:
    """Run CPM on ``graph``. Raises :class:`~airflow_gpu_dag.core.model.graph.CycleError` on a cycle and
    :class:`~airflow_gpu_dag.core.model.resources.EstimateError` (a ``ValueError``) on a duration that is
    not a finite number of seconds >= 0, naming the DAG and the task."""
    order = graph.topological_order()
    nodes = graph.nodes
    earliest_finish: dict[str, float] = {}
    earliest_start: dict[str, float] = {}
    for task_id in order:
        duration = nodes[task_id].duration
        if not 0.0 <= duration < math.inf:  # NaN fails too: every later sum would be NaN, some loops hang
            raise EstimateError(
                f"DAG {graph.dag_id!r}, task {task_id!r}: duration {duration!r} is not a finite number of "
                "seconds >= 0; declare an estimate such as duration='30m'"
            )
        start = max((earliest_finish[u] for u in graph.upstream(task_id)), default=0.0)
        start = max(start, nodes[task_id].not_before)
        earliest_start[task_id] = start
        earliest_finish[task_id] = start + duration
    makespan = max(earliest_finish.values(), default=0.0)
    tolerance = _EPS * max(1.0, makespan)

    remaining: dict[str, float] = {}
    timings: dict[str, TaskTiming] = {}
    for task_id in reversed(order):
        tail = max((remaining[d] for d in graph.downstream(task_id)), default=0.0)
        remaining[task_id] = nodes[task_id].duration + tail
        latest_finish = makespan - tail
        latest_start = makespan - remaining[task_id]
        slack = latest_start - earliest_start[task_id]
        if abs(slack) <= tolerance:
            slack = 0.0
        timings[task_id] = TaskTiming(
            earliest_start=earliest_start[task_id],
            earliest_finish=earliest_finish[task_id],
            latest_start=latest_start,
            latest_finish=latest_finish,
            slack=slack,
            remaining=remaining[task_id],
            critical=slack == 0.0,
        )
    # timings was filled in reverse topological order; present it in topological order.
    timings = {t: timings[t] for t in order}
    return CriticalPathAnalysis(
        dag_id=graph.dag_id,
        timings=timings,
        makespan=makespan,
        critical_path=_one_critical_path(graph, order, timings, tolerance),
        order=order,
    )


def _one_critical_path(
    graph: TaskGraph, order: list[str], timings: dict[str, TaskTiming], tolerance: float
) -> list[str]:
    """Follow critical tasks from the first critical task that nothing critical leads into (a
    source, or a task held back by its ``not_before``), each step to the first critical downstream
    task that starts exactly when the current one finishes."""

    def fed(task_id: str) -> bool:
        start = timings[task_id].earliest_start
        return any(
            timings[u].critical and abs(timings[u].earliest_finish - start) <= tolerance
            for u in graph.upstream(task_id)
        )

    current = next((t for t in order if timings[t].critical and not fed(t)), None)
    path: list[str] = []
    while current is not None:
        path.append(current)
        finish = timings[current].earliest_finish
        current = next(
            (
                d
                for d in graph.downstream(current)
                if timings[d].critical and abs(timings[d].earliest_start - finish) <= tolerance
            ),
            None,
        )
    return path
