"""Predictions from a live state, and a finished run held against its plan.

``airflow gpu-dag explain`` and the Critical path page's live view ask two questions the simulator
answers:

* **When will each waiting task start and end?** :func:`predict_live` simulates what is left of every
  run on the pools: the tasks holding slots now (for what they still need), the tasks waiting in the
  pools, and the explained run's tasks not ready yet (after their upstream tasks), with Airflow's
  admission and, where a watermark controller manages the pools, its decisions every ``interval``
  seconds in step with its ticks.
* **How far did a finished run stray from its plan, and why?** :func:`compare_run` sets each task's
  planned start and end (the run simulated alone from its start with the same durations, as the
  Critical path page plans it) against what happened, and splits each task's delay into its causes:
  upstream tasks that ended late, running longer than its estimate, waiting for slots (the pool was
  full), waiting for a reservation (slots were free but held for a wider, more urgent task). The
  median and the 90th percentile of the errors over the run's tasks (:func:`error_summary`) say how far
  the plan could be trusted.

Pure: plain data in and out, times in epoch seconds on one clock.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.policy.objective import ReservationGate
from airflow_gpu_dag.core.simulation.simulator import simulate

__all__ = [
    "CAUSES",
    "DoneTask",
    "LiveTask",
    "PoolUse",
    "Predicted",
    "TaskComparison",
    "compare_run",
    "error_summary",
    "plan_run",
    "predict_live",
    "quantile",
    "wait_causes",
]

#: ``LiveTask.state`` values: holding slots (running, queued), waiting in its pool, not ready yet.
LIVE_STATES = ("holding", "waiting", "later")


@dataclass(frozen=True)
class LiveTask:
    """One unfinished task instance of the live state.

    ``key`` is unique (``dag/run/task/map_index``), ``run`` its run (``dag/run``); ``state``: one of
    :data:`LIVE_STATES`; ``duration`` what it still needs (a task holding slots: from now; else its
    whole estimate); ``upstream``: keys of its unfinished upstream tasks (a ``later`` task starts after
    them); ``order``: Airflow's tie-break after the weight (logical date, map index).
    """

    key: str
    run: str
    pool: str
    slots: int
    priority: int
    duration: float
    state: str
    upstream: tuple[str, ...] = ()
    order: tuple = ()


@dataclass(frozen=True)
class Predicted:
    """When a task is predicted to start and end (epoch seconds)."""

    key: str
    start: float
    end: float


def _origin(now: float, interval: float, last_tick: float | None) -> float:
    """The simulation's time 0: the controller's latest tick at or before ``now`` (its ticks then fall on
    the simulated ones), or ``now`` without a controller or a known tick."""
    if interval <= 0 or last_tick is None or not math.isfinite(last_tick) or last_tick > now:
        return now
    return last_tick + math.floor((now - last_tick) / interval) * interval


def _too_large(tasks: Sequence[LiveTask], capacity: Mapping[str, int]) -> set[str]:
    """Tasks that can never run (more slots than their pool has) and every task after them."""
    out = {t.key for t in tasks if t.pool in capacity and t.slots > capacity[t.pool]}
    changed = bool(out)
    while changed:
        changed = False
        for t in tasks:
            if t.key not in out and any(u in out for u in t.upstream):
                out.add(t.key)
                changed = True
    return out


def predict_live(
    now: float,
    tasks: Iterable[LiveTask],
    capacity: Mapping[str, int],
    *,
    interval: float = 0.0,
    last_tick: float | None = None,
    reservation: bool = True,
    gate: ReservationGate | None = None,
) -> dict[str, Predicted]:
    """The predicted start and end of every task of ``tasks`` that can run.

    ``capacity``: pool -> slots (the watermark ``C`` of a managed pool; pools not named are unlimited).
    ``reservation``: a watermark controller decides the pool sizes every ``interval`` seconds, its
    latest tick at ``last_tick`` (None: unknown; the simulated ticks then start at ``now``); else
    Airflow's admission alone. Tasks holding slots start first (they already hold them); a task that
    the simulation would have started before ``now`` starts ``now``, and the tasks after it no earlier
    than it ends. A task larger than its pool, and everything after it, is left out (it never runs).
    """
    live = list(tasks)
    # The simulator has no task running at its start: a task holding slots is one it starts at time 0. A
    # controller tick at 0 would count it as starting now and keep its slots open once it ends (pool =
    # used + started), which the real controller, seeing it run, does not. So the simulation starts one
    # tick early: the tasks holding slots start alone at that tick, the others turn ready at the next one
    # (the controller's latest real tick), which sees them as running, as the controller did.
    shift = interval if reservation and interval > 0 else 0.0
    origin = _origin(now, interval, last_tick if reservation else None) - shift
    never = _too_large(live, capacity)
    by_run: dict[str, list[LiveTask]] = {}
    for task in sorted((t for t in live if t.key not in never), key=lambda t: (-t.priority, t.order, t.key)):
        by_run.setdefault(task.run, []).append(task)
    graphs: list[TaskGraph] = []
    weights: dict[str, dict[str, int]] = {}
    uid_key: dict[str, str] = {}
    for index, (run, run_tasks) in enumerate(by_run.items()):
        graph = TaskGraph(run)
        keys = {t.key for t in run_tasks}
        for task in run_tasks:
            held = task.state == "holding"
            duration = max(0.0, task.duration) + ((now - origin) if held else 0.0)
            node = TaskNode(task.key, duration, pool=task.pool, pool_slots=max(0, task.slots))
            node.not_before = 0.0 if held else shift
            graph.add_task(node)
            uid_key[task.key if len(by_run) == 1 else f"{index}:{run}/{task.key}"] = task.key
        for task in run_tasks:
            for up in task.upstream:
                if up in keys:
                    graph.add_edge(up, task.key)
        weights[run] = {t.key: INT32_MAX if t.state == "holding" else t.priority for t in run_tasks}
        graphs.append(graph)
    if not graphs:
        return {}

    def live_weights(graph: TaskGraph, _trigger: float) -> Mapping[str, int]:
        return weights[graph.dag_id]

    result = simulate(
        graphs,
        {p: max(0, int(c)) for p, c in capacity.items()},
        policy="reservation" if reservation else "stock",
        controller_interval=max(0.0, interval) if reservation else 0.0,
        run_priority=live_weights,
        gate=gate,
    )
    holding = {t.key for t in live if t.state == "holding"}
    upstream = {t.key: t.upstream for t in live}
    out: dict[str, Predicted] = {}
    # in simulated start order, so every upstream task is placed before the tasks after it: a task the
    # simulation started before now starts now, and a task after it starts no earlier than it ends
    for scheduled in sorted(result.schedule, key=lambda s: (s.start, s.end)):
        key = uid_key[scheduled.task_id]
        start, end = origin + scheduled.start, origin + scheduled.end
        if key not in holding:
            earliest = max([now, *(out[up].end for up in upstream[key] if up in out)])
            if start < earliest:
                start, end = earliest, earliest + (end - start)
        out[key] = Predicted(key, start, end)
    return out


# -- a finished run against its plan -----------------------------------------------------------------------
@dataclass(frozen=True)
class DoneTask:
    """A task instance of a finished run, as it happened: ``start`` and ``end`` (epoch seconds),
    ``estimate`` the duration it was planned with, ``upstream`` the task keys it waited for."""

    key: str
    pool: str
    slots: int
    priority: int
    estimate: float
    start: float
    end: float
    upstream: tuple[str, ...] = ()
    order: tuple = ()


@dataclass(frozen=True)
class PoolUse:
    """A task instance of a pool around the run (any DAG): when it waited (``waiting_since``: scheduled,
    None: unknown), ran (``start`` to ``end``), with how many slots and which weight."""

    key: str
    pool: str
    slots: int
    priority: int
    start: float | None
    end: float | None
    waiting_since: float | None = None


@dataclass(frozen=True)
class TaskComparison:
    """One task of a finished run: planned and actual start and end, the errors (actual - planned), and
    the delay of its start split by cause (seconds, :func:`compare_run`)."""

    key: str
    planned_start: float
    planned_end: float
    start: float
    end: float
    causes: dict[str, float] = field(default_factory=dict)

    @property
    def start_error(self) -> float:
        return self.start - self.planned_start

    @property
    def end_error(self) -> float:
        return self.end - self.planned_end

    @property
    def main_cause(self) -> str | None:
        """The cause that delayed it most (None when nothing delayed it by a second or more)."""
        cause, seconds = max(self.causes.items(), key=lambda kv: kv[1], default=(None, 0.0))
        return cause if seconds >= 1.0 else None


#: The causes :func:`compare_run` splits a task's delay into, with what they mean.
CAUSES: Mapping[str, str] = {
    "upstream_late": "its upstream tasks ended later than planned",
    "ran_longer": "it ran longer than its estimate",
    "waited_for_slots": "it waited for slots: the pool was full",
    "waited_for_reservation": "it waited for a reservation: slots were held for a wider, more urgent task",
    "scheduler": "it waited for the scheduler or the controller's next tick with slots open",
}


def wait_causes(
    task: DoneTask, ready: float, capacity: int | None, pool: Sequence[PoolUse]
) -> dict[str, float]:
    """How the time ``task`` waited from ``ready`` to its start splits: ``waited_for_slots`` while the
    other tasks running in its pool left fewer free slots than it needs, ``waited_for_reservation``
    while enough were free but a task of the pool ahead of it (a higher weight) waited that could not
    start beside it (the controller held the slots for that one), ``scheduler`` the rest. ``capacity``
    None: the pool is unlimited."""
    out = {"waited_for_slots": 0.0, "waited_for_reservation": 0.0, "scheduler": 0.0}
    if task.start <= ready:
        return out
    others = [u for u in pool if u.key != task.key]
    cuts = {ready, task.start}
    for use in others:
        for when in (use.start, use.end, use.waiting_since):
            if when is not None and ready < when < task.start:
                cuts.add(when)
    points = sorted(cuts)
    for a, b in itertools.pairwise(points):
        used = sum(
            u.slots for u in others if u.start is not None and u.start <= a and (u.end is None or u.end > a)
        )
        free = math.inf if capacity is None else capacity - used
        if task.slots > free:
            out["waited_for_slots"] += b - a
            continue
        held = any(
            u.priority > task.priority
            and u.waiting_since is not None
            and u.waiting_since <= a
            and (u.start is None or u.start > a)
            and u.slots + task.slots > free
            for u in others
        )
        out["waited_for_reservation" if held else "scheduler"] += b - a
    return out


def plan_run(
    origin: float,
    tasks: Sequence[LiveTask],
    capacity: Mapping[str, int],
    *,
    interval: float = 0.0,
    reservation: bool = True,
    gate: ReservationGate | None = None,
) -> dict[str, Predicted]:
    """The plan of one run started at ``origin``: its ``tasks`` (each with its whole estimate and its
    upstream tasks) simulated alone on pools of ``capacity``, the controller ticking from ``origin``;
    what the Critical path page's predicted schedule shows, in epoch seconds."""
    alone = [
        LiveTask(t.key, "run", t.pool, t.slots, t.priority, t.duration, "later", t.upstream, t.order)
        for t in tasks
    ]
    return predict_live(
        origin, alone, capacity, interval=interval, last_tick=origin, reservation=reservation, gate=gate
    )


def compare_run(
    origin: float,
    tasks: Sequence[DoneTask],
    plan: Mapping[str, Predicted],
    capacity: Mapping[str, int],
    pools: Mapping[str, Sequence[PoolUse]] | None = None,
) -> list[TaskComparison]:
    """Each finished task of a run (started at ``origin``) against ``plan`` (:func:`plan_run`), with the
    causes of its delay (:data:`CAUSES`): ``upstream_late`` (when its upstream tasks ended minus when
    they were planned to), ``ran_longer`` (its own duration minus its estimate, at least 0: it delays
    its end, not its start), and its wait from ready to start beyond the planned one, split by
    :func:`wait_causes` over ``pools`` (the task instances of each pool around the run). Tasks the plan
    does not place (larger than their pool) are left out."""
    ends = {t.key: t.end for t in tasks}
    out: list[TaskComparison] = []
    for task in tasks:
        planned = plan.get(task.key)
        if planned is None:
            continue
        ready = max([origin, *(ends[u] for u in task.upstream if u in ends)])
        planned_ready = max([origin, *(plan[u].end for u in task.upstream if u in plan)])
        causes = {
            "upstream_late": max(0.0, ready - planned_ready),
            "ran_longer": max(0.0, (task.end - task.start) - task.estimate),
        }
        waits = wait_causes(task, ready, capacity.get(task.pool), (pools or {}).get(task.pool, ()))
        planned_wait = max(0.0, planned.start - planned_ready)
        extra_wait = max(0.0, (task.start - ready) - planned_wait)
        total = sum(waits.values())
        for name, seconds in waits.items():
            causes[name] = extra_wait * seconds / total if total > 0 else 0.0
        out.append(TaskComparison(task.key, planned.start, planned.end, task.start, task.end, causes))
    return out


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of ``values`` by nearest rank; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def error_summary(comparisons: Sequence[TaskComparison]) -> dict[str, dict[str, float | None] | int]:
    """The plan's error over a run's tasks: median and 90th percentile of the absolute error of the
    start and of the end (seconds), and how many tasks they are over."""
    starts = [abs(c.start_error) for c in comparisons]
    ends = [abs(c.end_error) for c in comparisons]
    return {
        "tasks": len(comparisons),
        "start_error_s": {"median": quantile(starts, 0.5), "p90": quantile(starts, 0.9)},
        "end_error_s": {"median": quantile(ends, 0.5), "p90": quantile(ends, 0.9)},
    }
