"""Discrete-event simulation of DAG runs on GPU pools, under Airflow's admission rule.

One or more task graphs run over pools with fixed capacities. At every event (a task ending) the
scheduler loop runs Airflow's admission (:func:`~airflow_gpu_dag.core.policy.admission.stock_admission`:
priority order, skip what does not fit, greedy). Policies:

* ``stock``: Airflow as shipped: the ``downstream`` weight rule, pools sized to capacity.
* ``critical_path``: a graph-aware priority rule (default ``critical_path``), pools sized to capacity.
* ``reservation``: a graph-aware priority (default: the rule the DAG declares) and the watermark
  controller, which calls :func:`~airflow_gpu_dag.core.policy.reservation.decide_pool` every
  ``controller_interval`` seconds (0 = at every event, before the scheduler loop) and sets the pool
  sizes it decides.

The priority is a callable ``graph -> {task_id: weight}`` or the name of a rule of
:mod:`airflow_gpu_dag.core.analysis.weight_rules`; the planned rule ``packing`` needs the planner, which
needs this
simulator: :func:`airflow_gpu_dag.core.planning.planner.predict` resolves it and calls :func:`simulate`.

Tasks run for exactly their estimated ``duration``. A GPU task holds ``gpu.count`` slots of its pool
(``node.pool``, or ``default_pool``); a task without a GPU holds ``pool_slots`` of its pool; a pool
not in ``capacity`` is unlimited (:func:`~airflow_gpu_dag.core.model.graph.task_pool`). Ties in priority are
broken like Airflow's ``(logical_date, map_index)``: by graph order (graphs in the order given, tasks
in insertion order). Deterministic. Events are kept in a heap; a run of a 1,200-task DAG takes well
under a second.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu_dag.core.analysis.bounds import lower_bound
from airflow_gpu_dag.core.analysis.weight_rules import PriorityRule, clamp_int32, resolve_priority
from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool, task_slots
from airflow_gpu_dag.core.model.ladders import fit_ladders
from airflow_gpu_dag.core.model.resources import real_number
from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask, RunningTask
from airflow_gpu_dag.core.policy.objective import ReservationGate, StarvingWatch
from airflow_gpu_dag.core.policy.reservation import DecisionWindow, decide_pool, decide_pools

__all__ = [
    "POLICIES",
    "CapacityError",
    "ControllerOptions",
    "RunPriority",
    "RunResult",
    "ScheduledTask",
    "SimulationResult",
    "SimulationTables",
    "default_rule",
    "simulate",
]

# -- The outcome of a simulation: the schedule of every task, every run's completion, the figures.


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


def _scheduled(
    task_id: str, start: float, end: float, slots: int, pool: str, priority: int, ready: float
) -> ScheduledTask:
    """``ScheduledTask(...)`` of these fields, built without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field, a few percent of a simulation, which builds one per task): equal
    to the dataclass built the ordinary way, and as immutable. (A dict display of the fields in order:
    constant keys, one step.)"""
    task = object.__new__(ScheduledTask)
    task.__dict__.update(
        {
            "task_id": task_id,
            "start": start,
            "end": end,
            "slots": slots,
            "pool": pool,
            "priority": priority,
            "ready": ready,
        }
    )
    return task


def _running(key: str, pool: str, slots: int, expected_end: float) -> RunningTask:
    """``RunningTask(...)`` built as :func:`_scheduled` builds its task (one per started task): equal to
    the dataclass built the ordinary way, and as immutable."""
    task = object.__new__(RunningTask)
    task.__dict__.update({"key": key, "pool": pool, "slots": slots, "expected_end": expected_end})
    return task


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


# -- The watermark controller's clock in a simulation: its settings and when it decides next.


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
    return tick_index(now, interval) * interval


def tick_index(now: float, interval: float) -> int:
    """``k`` of :func:`next_multiple`: the least ``k`` with ``k * interval > now``."""
    k = math.floor(now / interval) + 1
    while k * interval <= now:
        k += 1
    while k > 1 and (k - 1) * interval > now:
        k -= 1
    return k


def _first_index_from(when: float, interval: float) -> int:
    """The least ``k >= 0`` with ``k * interval >= when`` (``when`` finite)."""
    k = max(0, math.ceil(when / interval))
    while k * interval < when:
        k += 1
    while k > 0 and (k - 1) * interval >= when:
        k -= 1
    return k


#: Weights of one run: ``(graph, trigger time) -> {task_id: weight}`` (Airflow computes a run's weights
#: when the run is created, so a cross-DAG rule may use the trigger time).
RunPriority = Callable[[TaskGraph, float], Mapping[str, int]]

#: policy -> default priority rule
POLICIES: dict[str, str] = {"stock": "downstream", "critical_path": "critical_path", "reservation": "packing"}


class CapacityError(ValueError):
    """A task needs more slots than its pool can ever have; it would wait forever."""


def _as_graphs(graph: TaskGraph | Sequence[TaskGraph]) -> list[TaskGraph]:
    return [graph] if isinstance(graph, TaskGraph) else list(graph)


def default_rule(policy: str, graph: TaskGraph | Sequence[TaskGraph]) -> str:
    """The rule a policy predicts with: for ``reservation`` the rule the DAG(s) declare
    (:attr:`TaskGraph.priority_rule`, what the DAG's ``weight_rule`` is) when they agree on one of ours,
    else the policy's default (:data:`POLICIES`)."""
    if policy == "reservation":
        declared = {g.priority_rule for g in _as_graphs(graph)}
        if len(declared) == 1 and None not in declared:
            return str(declared.pop())
    return POLICIES.get(policy, "downstream")


def _check_capacity(graphs: list[TaskGraph], capacity: Mapping[str, int]) -> None:
    problems = []
    for g in graphs:
        for node in g.nodes.values():
            pool = task_pool(node)
            slots = task_slots(node)
            if pool in capacity and slots > capacity[pool]:
                problems.append(
                    f"DAG {g.dag_id!r}, task {node.task_id!r} needs {slots} slots of pool {pool!r}, "
                    f"which has capacity {capacity[pool]}"
                )
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise CapacityError(
            f"{shown}. Such a task would wait forever: request fewer GPUs or give the pool more capacity."
        )


def _resolve(
    policy: str, priority: str | PriorityRule | None, graphs: list[TaskGraph], capacity: Mapping[str, int]
) -> tuple[PriorityRule, str]:
    chosen = priority if priority is not None else default_rule(policy, graphs)
    if chosen == "packing":
        raise ValueError(
            "the planned priority rule 'packing' needs the planner: call "
            "airflow_gpu_dag.core.planning.planner.predict() (same arguments), "
            "or pass a callable graph -> weights"
        )
    rule = resolve_priority(chosen, capacity)
    return rule, chosen if isinstance(chosen, str) else getattr(rule, "__name__", "custom")


class SimulationTables:
    """What a simulation reads of its graphs' tasks, whatever the priorities and estimates: per task key
    (``uid``) its duration, pool, slots, graph order, upstream and downstream keys, release time and run,
    and the counts a run starts from. Built by :func:`simulate` from its arguments, or once for many
    simulations of the same graphs, pools and triggers (the planner simulates one graph about 25 times
    per plan): :meth:`build`, passed as ``simulate(..., _tables=...)``. A simulation never modifies it
    (it copies the counts it changes); do not change the graphs after building it.
    """

    def __init__(
        self,
        sources: list[TaskGraph],
        graphs: list[TaskGraph],
        capacity: dict[str, int],
        triggers: list[float],
    ) -> None:
        self.sources = sources  # the graphs as given to simulate()
        self.graphs = graphs  # as simulated: their ladders fitted to the pools
        self.capacity = capacity
        self.triggers = triggers
        self.durations: dict[str, float] = {}
        self.pools: dict[str, str] = {}
        self.slots: dict[str, int] = {}
        self.order: dict[str, int] = {}
        self.downstream: dict[str, list[str]] = {}
        self.upstream: dict[str, list[str]] = {}
        self.waiting_on: dict[str, int] = {}
        self.release: dict[str, float] = {}  # uid -> not before (the run's trigger + the task's not_before)
        self.run_of: dict[str, int] = {}
        self.run_name: dict[str, str] = {}  # uid -> its run as the controller's tasks name it
        #: (graph index, key prefix) in the order a simulation computes the weights: Airflow's tie-break
        #: after the weight is the run's logical date (trigger), then the task
        self.runs: list[tuple[int, str]] = []
        for gi in sorted(range(len(graphs)), key=lambda i: (triggers[i], i)):
            g = graphs[gi]
            prefix = "" if len(graphs) == 1 else f"{gi}:{g.dag_id}/"  # task keys: prefix + task id
            self.runs.append((gi, prefix))
            for task_id, node in g.nodes.items():
                key = prefix + task_id
                self.durations[key] = float(node.duration)
                self.pools[key] = task_pool(node)
                self.slots[key] = task_slots(node)
                self.order[key] = len(self.order)
                downs, ups = g.downstream(task_id), g.upstream(task_id)
                self.downstream[key] = [prefix + d for d in downs] if prefix else downs
                self.upstream[key] = [prefix + u for u in ups] if prefix else ups
                self.waiting_on[key] = len(ups)
                self.release[key] = triggers[gi] + max(0.0, float(getattr(node, "not_before", 0.0) or 0.0))
                self.run_of[key] = gi
                self.run_name[key] = str(gi)
        # upstream tasks of another capacity pool, per task (see _Simulation.elsewhere)
        self.elsewhere = {
            k: sum(self.pools[u] != self.pools[k] and self.pools[u] in capacity for u in ups)
            for k, ups in self.upstream.items()
        }

    @classmethod
    def build(
        cls,
        graph: TaskGraph | Sequence[TaskGraph],
        capacity: Mapping[str, int],
        triggers: Sequence[float] | None = None,
    ) -> SimulationTables:
        """The tables of ``simulate(graph, capacity, triggers=triggers)``, its arguments checked as it
        checks them (:class:`CapacityError`, ``ValueError``)."""
        sources = _as_graphs(graph)
        odd = next((p for p, c in capacity.items() if not math.isfinite(real_number(c))), None)
        if odd is not None:
            raise ValueError(
                f"capacity of pool {odd!r} is {capacity[odd]!r}: give a whole number of slots (leave the "
                "pool out for an unlimited one)"
            )
        caps = {p: int(c) for p, c in capacity.items()}
        graphs = [fit_ladders(g, caps) for g in sources]  # a rung that never fits falls back
        _check_capacity(graphs, caps)
        bad = next((n for g in graphs for n in g.nodes.values() if not 0 <= n.duration < math.inf), None)
        if bad is not None:  # a NaN duration never ends: the event loop would wait for it forever
            dag_id = next(g.dag_id for g in graphs if g.nodes.get(bad.task_id) is bad)
            raise ValueError(
                f"DAG {dag_id!r}, task {bad.task_id!r}: duration {bad.duration!r} is not finite seconds "
                ">= 0; give it an estimate such as 1800 or '30m'"
            )
        times = [0.0] * len(graphs) if triggers is None else [float(t) for t in triggers]
        if len(times) != len(graphs) or any(not math.isfinite(t) or t < 0 for t in times):
            raise ValueError(f"triggers: one time >= 0 per graph ({len(graphs)}), got {triggers!r}")
        tables = cls(sources, graphs, caps, times)
        return tables

    def serves(
        self,
        graph: TaskGraph | Sequence[TaskGraph],
        capacity: Mapping[str, int],
        triggers: Sequence[float] | None,
    ) -> bool:
        """Whether these are the tables of ``simulate(graph, capacity, triggers=triggers)``: the same graph
        objects, pools (in the same order) and trigger times."""
        sources = _as_graphs(graph)
        times = [0.0] * len(sources) if triggers is None else [float(t) for t in triggers]
        return (
            len(sources) == len(self.sources)
            and all(a is b for a, b in zip(sources, self.sources, strict=True))
            and [(p, int(c)) for p, c in capacity.items()] == list(self.capacity.items())
            and times == self.triggers
        )


class _Simulation:
    """The state of one simulated run and its steps; :meth:`run` drives the event loop.

    Task keys (``uid``) are the task ids for one graph, ``"<index>:<dag_id>/<task_id>"`` for several.
    ``ready_lists`` / ``pending_lists`` hold a pool's waiting tasks as ``(-priority, order, uid)``, sorted
    (Airflow's admission order). What does not change during a run is read from the
    :class:`SimulationTables`, shared with other simulations of the same graphs.
    """

    def __init__(
        self,
        tables: SimulationTables,
        rule: PriorityRule | RunPriority,
        estimates: Mapping[str, float] | None,
        per_run: bool,
    ) -> None:
        capacity = tables.capacity
        self.capacity = capacity
        self.durations = tables.durations
        self.pools = tables.pools
        self.slots = tables.slots
        self.order = tables.order
        self.downstream = tables.downstream
        self.upstream = tables.upstream
        self.release = tables.release
        self.run_of = tables.run_of
        self.run_name = tables.run_name
        self.waiting_on = dict(tables.waiting_on)
        self.prio: dict[str, int] = {}
        for gi, prefix in tables.runs:
            g = tables.graphs[gi]
            weights = rule(g, tables.triggers[gi]) if per_run else rule(g)  # type: ignore[call-arg]
            for task_id in g.nodes:
                self.prio[prefix + task_id] = clamp_int32(weights.get(task_id, 1))
        self.triggers = tables.triggers
        self.timers: list[tuple[float, int, str]] = []  # (release, order, uid): ready once released
        self.believed = (
            self.durations
            if estimates is None
            else {k: float(estimates.get(k, d)) for k, d in self.durations.items()}
        )
        unknown = next((k for k, seconds in self.believed.items() if seconds != seconds), None)  # NaN
        if unknown is not None:  # a NaN end made the simulated controller hold slots the real one frees
            raise ValueError(
                f"estimates: task {unknown!r} is believed to run NaN seconds; give a number of seconds "
                "(or leave the task out to believe its duration)"
            )
        # lookahead: a task of a capacity pool is *pending* once each upstream task has started or is
        # ready (waits in a pool, or starts now in an unlimited one); unqueued_up counts those not yet
        self.unqueued_up = dict(self.waiting_on)
        # upstream tasks of another capacity pool not started yet, per task (see waiting)
        self.elsewhere = dict(tables.elsewhere)
        self.pending_lists: dict[str, list[tuple[int, int, str]]] = {}
        self.pending_set: set[str] = set()
        self.ready_lists: dict[str, list[tuple[int, int, str]]] = {}
        # a capacity pool's ready tasks again, one sorted list per slot count (0 .. capacity): Airflow's
        # greedy pick reads them without walking every waiting task (see admit, _ReadyTail)
        self.by_slots: dict[str, list[list[tuple[int, int, str]]]] = {
            pool: [[] for _ in range(max(0, cap) + 1)] for pool, cap in capacity.items()
        }
        self.ready_tasks: dict[str, ReadyTask] = {}  # uid -> the ReadyTask of a ready task (see _ready_task)
        self.reference = False  # the reference way: tick by tick, admission reads every waiting task
        self.ready_at: dict[str, float] = {}
        self.gate: ReservationGate | None = None  # set by run()
        self.starving: dict[str, StarvingWatch] = {}  # pool -> its starving tasks (with a gate)
        self.pool_size: dict[str, int] = dict(capacity)
        self.used: dict[str, int] = dict.fromkeys(capacity, 0)
        self.max_usage: dict[str, int] = dict.fromkeys(capacity, 0)
        self.running: dict[str, float] = {}  # uid -> end
        self.holding: dict[str, dict[str, RunningTask]] = {pool: {} for pool in capacity}
        self.started: dict[str, float] = {}
        self.events: list[tuple[float, int, str]] = []
        self.schedule: list[ScheduledTask] = []
        self.ticks = 0
        self.reservation_ticks = 0
        # tick skipping: what the last decision was, how long it holds, and whether anything changed since
        self.window: DecisionWindow | None = None
        self.reserving = False
        self.changed = True
        self.now_read = False  # a pending task's expected ready time was read as now + estimate

    # -- readiness ---------------------------------------------------------------------------------
    def upstream_done(self, uid: str, now: float, lookahead: bool) -> None:
        """Every upstream task of ``uid`` has ended: it is ready now, or once its run is triggered and
        its start window opens."""
        if self.release[uid] > now:
            heapq.heappush(self.timers, (self.release[uid], self.order[uid], uid))
        else:
            self.make_ready(uid, now, lookahead)

    def release_due(self, now: float, lookahead: bool) -> None:
        while self.timers and self.timers[0][0] <= now:
            _at, _o, uid = heapq.heappop(self.timers)
            self.make_ready(uid, now, lookahead)

    def make_ready(self, uid: str, now: float, lookahead: bool) -> None:
        self.changed = True
        self.ready_at[uid] = now
        pool = self.pools[uid]
        item = (-self.prio[uid], self.order[uid], uid)
        if uid in self.pending_set:
            self.pending_set.discard(uid)
            pending = self.pending_lists[pool]
            del pending[bisect.bisect_left(pending, item)]
        if lookahead:
            self._upstream_queued(uid)
        if self.slots[uid] == 0:
            # no slot to wait for (a task mapped over nothing, which Airflow skips at once): it starts
            # now, whatever its pool's state (a starved pool admits nothing, not even 0 slots)
            self._start(uid, pool, now, self.prio[uid])
            return
        if self.gate is not None:
            self.starving.setdefault(pool, StarvingWatch(self.gate)).add(self._ready_task(uid, pool))
        bisect.insort(self.ready_lists.setdefault(pool, []), item)
        if pool in self.by_slots:
            bisect.insort(self.by_slots[pool][self.slots[uid]], item)

    def _upstream_queued(self, uid: str) -> None:
        for down in self.downstream[uid]:
            self.unqueued_up[down] -= 1
            pool = self.pools[down]
            if self.unqueued_up[down] == 0 and self.waiting_on[down] > 0 and pool in self.capacity:
                self.pending_set.add(down)
                item = (-self.prio[down], self.order[down], down)
                bisect.insort(self.pending_lists.setdefault(pool, []), item)

    # -- the controller ----------------------------------------------------------------------------
    def _pending_task(self, uid: str, pool: str, now: float) -> PendingTask:
        """A pending task as the controller sees it: expected ready when its started upstream tasks end
        (one ready in an unlimited pool starts now); upstream tasks waiting in a capacity pool must
        start with this decision (``after``)."""
        known = []
        after = []
        for u in self.upstream[uid]:
            if u in self.started:
                known.append(self.started[u] + self.believed[u])
            elif self.pools[u] not in self.capacity:
                known.append(now + self.believed[u])
                self.now_read = True
            else:
                after.append(u)
        fields = self._fields(uid, pool)
        return PendingTask(*fields, max(known, default=-math.inf), tuple(after), run=self.run_name[uid])

    def waiting(self, pool: str, now: float, lookahead: bool) -> Iterable[ReadyTask]:
        """The pool's ready and pending tasks in admission order, built only as far as they are read,
        with the index of its ready tasks (:class:`_PoolWaiting`; the reference way: read only)."""
        if self.reference:
            return self._waiting(pool, now, lookahead)
        return _PoolWaiting(self, pool, now, lookahead)

    def _waiting(
        self, pool: str, now: float, lookahead: bool, read: list[ReadyTask] | None = None
    ) -> Iterator[ReadyTask]:
        """The pool's ready and pending tasks in admission order, built as they are read; each is also
        appended to ``read`` when given (one generator, not one wrapping another: a decision reads a
        few tasks, and each level of generator costs every one of them a resumption)."""
        ready = self.ready_lists.get(pool) or []
        pending = (self.pending_lists.get(pool) or []) if lookahead else []
        # A pending task with an upstream task waiting in another capacity pool does not start with this
        # pool's decision: the walk skips it, and nothing else reads a pending task. Only the first one is
        # built (the decision's reason tells "nothing ready" from "nothing waiting"): building each at
        # every tick made a large mapped task quadratic.
        blocked = False
        pending_set, ready_tasks = self.pending_set, self.ready_tasks
        task: ReadyTask
        for _p, _o, uid in _merged(ready, pending) if pending else ready:
            if uid not in pending_set:
                task = ready_tasks.get(uid) or self._ready_task(uid, pool)
            elif not (elsewhere := self.elsewhere[uid] > 0) or not blocked:
                blocked = blocked or elsewhere
                task = self._pending_task(uid, pool, now)
            else:
                continue
            if read is not None:
                read.append(task)
            yield task

    def _fields(self, uid: str, pool: str) -> tuple[str, str, int, int, float, tuple[int]]:
        """A waiting task as the controller sees it: key, pool, slots, weight, estimate, tie-break."""
        return uid, pool, self.slots[uid], self.prio[uid], self.believed[uid], (self.order[uid],)

    def _ready_task(self, uid: str, pool: str) -> ReadyTask:
        """A ready task as the controller sees it (built once: it does not change while it waits)."""
        task = self.ready_tasks.get(uid)
        if task is None:
            task = ReadyTask(*self._fields(uid, pool), run=self.run_name[uid], since=self.ready_at[uid])
            self.ready_tasks[uid] = task
        return task

    def tick(
        self, now: float, options: ControllerOptions, skipping: bool, next_decision: float | None
    ) -> None:
        """One controller tick: :func:`decide_pool` for every capacity pool, the controller deciding next at
        ``next_decision`` (``options.next_decision(now)``, which the event loop has computed already). With
        ``skipping``, also how long the decisions hold (:attr:`window`), for :meth:`holds`."""
        self.ticks += 1
        reserving = False
        window = DecisionWindow() if skipping else None
        self.now_read = False
        lookahead = options.lookahead
        for pool, cap in self.capacity.items():
            if not self.ready_lists.get(pool) and not (lookahead and self.pending_lists.get(pool)):
                self.pool_size[pool] = cap
                continue
            starving = self.starving[pool].first(now, self.started) if pool in self.starving else None
            if window is not None and pool in self.starving:
                window.near(self.starving[pool].next_change())  # (after first(): what starves now is out)
            decision = decide_pool(
                now,
                pool,
                cap,
                list(self.holding[pool].values()),
                self.waiting(pool, now, lookahead),
                options.backfill,
                options.strict_backfill,
                next_decision,
                options.gate,
                starving,
                window=window,
                explain=False,
            )
            self.pool_size[pool] = decision.pool_size
            reserving = reserving or decision.reserved_for is not None
        if reserving:
            self.reservation_ticks += 1
        if window is not None and self.now_read:
            window.close(now)
        self.window, self.reserving, self.changed = window, reserving, False

    def holds(self, now: float, next_decision: float) -> bool:
        """Whether the last decisions are what a tick at ``now`` decides, the controller deciding next at
        ``next_decision``: nothing changed since (no task started, ended or turned ready) and ``now`` is
        inside their :class:`DecisionWindow`."""
        window = self.window
        return (
            window is not None
            and not self.changed
            and now < window.until
            and next_decision <= window.next_until
        )

    def skip_ticks(self, first: int, interval: float, until: float) -> int:
        """Skip the ticks ``k * interval`` from ``k = first`` on that the last decisions hold for
        (:meth:`holds`) and that come before ``until`` (the next event), counting them as decided;
        returns the index of the first tick not skipped."""
        window = self.window
        if window is None or self.changed:
            return first
        end = min(until, window.until)
        if not math.isfinite(end):
            return first
        stop = _first_index_from(end, interval)  # ticks before `end`
        if window.next_until < math.inf:  # ticks whose next tick comes no later than next_until
            stop = min(stop, tick_index(window.next_until, interval) - 1)
        skipped = max(0, stop - first)
        self.ticks += skipped
        self.reservation_ticks += skipped if self.reserving else 0
        return first + skipped

    def check_against_full_decision(self, now: float, options: ControllerOptions) -> None:
        """The decision from every waiting task, built as the watermark controller builds it (lists,
        not the lazy reading of :meth:`waiting`), must equal what :meth:`tick` set."""
        busy = [task for pool in self.capacity for task in self.holding[pool].values()]
        ready = [
            self._ready_task(uid, pool)
            for pool, lst in self.ready_lists.items()
            if pool in self.capacity
            for _p, _o, uid in lst
        ]
        pending = [
            self._pending_task(uid, pool, now)
            for pool, lst in (self.pending_lists.items() if options.lookahead else ())
            for _p, _o, uid in lst
        ]
        # the controller's reading: a pending task with no known end of any upstream is expected now
        pending = [
            p if p.ready_at > -math.inf else PendingTask(**{**p.__dict__, "ready_at": now})  # type: ignore[operator]
            for p in pending
        ]
        full = decide_pools(
            now,
            self.capacity,
            busy,
            ready,
            backfill=options.backfill,
            pending=pending,
            strict_backfill=options.strict_backfill,
            next_decision=options.next_decision(now),
            gate=options.gate,
        )
        for pool, decision in full.items():
            if decision.pool_size != self.pool_size[pool]:
                raise AssertionError(
                    f"t={now:g} pool {pool}: the simulator set {self.pool_size[pool]}, decide_pools over "
                    f"every waiting task decides {decision.pool_size} ({decision.reason})"
                )

    # -- the scheduler loop ------------------------------------------------------------------------
    def admit(self, now: float) -> None:
        """Airflow's admission in every pool with waiting tasks (greedy, skip what does not fit)."""
        for pool, lst in self.ready_lists.items():
            if not lst:
                continue
            if pool in self.capacity and not self.reference:
                self._admit_indexed(pool, lst, now)
                continue
            limited = pool in self.capacity
            size = self.pool_size.get(pool, 0)
            open_slots = size - self.used[pool] if limited else 0
            if limited and open_slots <= 0:
                continue
            taken: list[int] = []
            for i, (negp, _o, uid) in enumerate(lst):
                need = self.slots[uid]
                if limited:
                    if need > open_slots or need > size:
                        continue
                    open_slots -= need
                taken.append(i)
                self._start(uid, pool, now, -negp)
                if limited and open_slots <= 0:
                    break
            for i in reversed(taken):
                del lst[i]
            if limited:
                self.used[pool] = size - open_slots if taken else self.used[pool]
                self.max_usage[pool] = max(self.max_usage[pool], self.used[pool])

    def _admit_indexed(self, pool: str, lst: list[tuple[int, int, str]], now: float) -> None:
        """:meth:`admit` in a capacity pool through its lists by slot count: the first waiting task that
        fits the open slots, then the first after it that fits what is left, ... (the same tasks, in the
        same order, as the walk over every waiting task)."""
        size = self.pool_size.get(pool, 0)
        open_slots = size - self.used[pool]
        if open_slots <= 0:
            return
        lists = self.by_slots[pool]
        for slots, item in _greedy_pick(lists, [0] * len(lists), open_slots):
            del lists[slots][bisect.bisect_left(lists[slots], item)]
            del lst[bisect.bisect_left(lst, item)]
            self._start(item[2], pool, now, -item[0])
            self.used[pool] += slots
        self.max_usage[pool] = max(self.max_usage[pool], self.used[pool])

    def _start(self, uid: str, pool: str, now: float, priority: int) -> None:
        self.changed = True
        end = now + self.durations[uid]
        self.running[uid] = end
        self.started[uid] = now
        if pool in self.capacity:
            self.holding[pool][uid] = _running(uid, pool, self.slots[uid], now + self.believed[uid])
            for down in self.downstream[uid]:
                self.elsewhere[down] -= self.pools[down] != pool
        heapq.heappush(self.events, (end, self.order[uid], uid))
        self.schedule.append(_scheduled(uid, now, end, self.slots[uid], pool, priority, self.ready_at[uid]))

    def finish_until(self, now: float, lookahead: bool) -> None:
        """End every task whose end is due; their downstream tasks turn ready."""
        while self.events and self.events[0][0] <= now:
            self.changed = True
            _end, _o, uid = heapq.heappop(self.events)
            del self.running[uid]
            pool = self.pools[uid]
            if pool in self.capacity:
                self.used[pool] -= self.slots[uid]
                del self.holding[pool][uid]
            for down in self.downstream[uid]:
                self.waiting_on[down] -= 1
                if self.waiting_on[down] == 0:
                    self.upstream_done(down, now, lookahead)

    def run(self, reserve: bool, options: ControllerOptions, every_tick: bool = False) -> None:
        """The event loop: controller tick (when due), admission, then on to the next event or tick.

        With a controller interval, a tick whose decisions cannot differ from the last ones (nothing
        changed since, and inside their :class:`DecisionWindow`) is counted but not decided again, and
        the loop jumps over runs of such ticks (admission after them would start nothing either).
        ``every_tick`` decides at every tick instead: the reference the skipping is tested against.
        ``options.verify`` visits every tick too, and checks the skipped ones against the full decision.
        """
        self.gate = options.gate if reserve else None
        self.reference = every_tick
        for uid, count in self.waiting_on.items():
            if count == 0:
                self.upstream_done(uid, 0.0, options.lookahead)
        now = 0.0
        tick_k = 0  # the next tick is at tick_k * interval
        next_tick = 0.0
        interval = options.interval
        skipping = reserve and interval > 0 and not every_tick
        while True:
            if self.timers:
                self.release_due(now, options.lookahead)
            if reserve and (interval == 0 or now >= next_tick):
                if interval > 0:  # the tick after this one: when the controller decides next
                    tick_k = tick_index(now, interval)
                    next_tick = tick_k * interval
                if skipping and self.holds(now, next_tick):
                    self.ticks += 1
                    self.reservation_ticks += 1 if self.reserving else 0
                else:
                    self.tick(now, options, skipping, next_tick if interval > 0 else None)
                if options.verify:
                    self.check_against_full_decision(now, options)
            self.admit(now)
            candidates = [self.events[0][0]] if self.events else []
            if self.timers:
                candidates.append(self.timers[0][0])
            if reserve and interval > 0 and any(self.ready_lists.values()):
                if skipping and not options.verify:
                    tick_k = self.skip_ticks(tick_k, interval, min(candidates, default=math.inf))
                    next_tick = tick_k * interval
                candidates.append(next_tick)
            if not candidates:
                break
            now = min(candidates)
            if self.events and self.events[0][0] <= now:
                self.finish_until(now, options.lookahead)
        if len(self.schedule) != len(self.durations):  # pragma: no cover - guarded by _check_capacity
            stuck = sorted(uid for lst in self.ready_lists.values() for _p, _o, uid in lst)[:5]
            left = len(self.durations) - len(self.schedule)
            raise RuntimeError(f"simulation stalled with {left} tasks left, e.g. {stuck}")


_Item = tuple[int, int, str]  # a waiting task in admission order: (-priority, order, uid)


def _merged(first: list[_Item], second: list[_Item]) -> Iterator[_Item]:
    """Two sorted lists of distinct items as one, read lazily (``heapq.merge`` for two lists, without
    its set-up, which a decision that reads a few tasks paid every time)."""
    i = j = 0
    while i < len(first) and j < len(second):
        if first[i] < second[j]:
            yield first[i]
            i += 1
        else:
            yield second[j]
            j += 1
    rest, k = (first, i) if i < len(first) else (second, j)
    while k < len(rest):  # (not a slice: that would copy the whole rest of a long queue)
        yield rest[k]
        k += 1


def _greedy_pick(
    lists: Sequence[list[_Item]],
    first: Sequence[int],
    open_slots: int,
    skip: Container[str] = (),
) -> list[tuple[int, _Item]]:
    """Airflow's greedy admission with ``open_slots`` open, over the waiting tasks held as one sorted
    list per slot count (``lists[s]``: the tasks that need ``s`` slots) from ``first[s]`` on, less those
    in ``skip``: the first task that fits, then the first after it that fits what is left, ... Returns
    ``(slots, item)`` in admission order. Each step compares the next task of each list that still
    fits: ``O(open_slots ** 2)`` steps, however many tasks wait."""
    top = len(lists) - 1
    remaining = open_slots
    pos = list(first[: min(remaining, top) + 1])
    picked: list[tuple[int, _Item]] = []
    while remaining > 0:
        best: _Item | None = None
        best_slots = -1
        for slots in range(min(remaining, top) + 1):
            lst = lists[slots]
            i = pos[slots]
            if skip:
                while i < len(lst) and lst[i][2] in skip:
                    i += 1
                pos[slots] = i
            if i < len(lst) and (best is None or lst[i] < best):
                best, best_slots = lst[i], slots
        if best is None:
            break
        picked.append((best_slots, best))
        remaining -= best_slots
        pos[best_slots] += 1
    return picked


class _ReadyTail:
    """:class:`~airflow_gpu_dag.core.policy.reservation.ReadyTail` from a pool's lists by slot count: the
    ready tasks after the head, picked without reading the ones that do not fit."""

    def __init__(self, sim: _Simulation, pool: str, first: list[int], capacity: int) -> None:
        self.sim, self.pool = sim, pool
        self.lists = sim.by_slots[pool][: max(0, capacity) + 1]
        self.first = first  # per list, where the tasks after the head begin

    def pick(self, open_slots: int, skip: Sequence[ReadyTask] = ()) -> list[ReadyTask]:
        keys = {t.key for t in skip} if skip else ()
        picked = _greedy_pick(self.lists, self.first, open_slots, keys)
        return [self.sim._ready_task(item[2], self.pool) for _s, item in picked]

    def rest(self, picked: Sequence[ReadyTask]) -> bool:
        return sum(len(lst) - i for lst, i in zip(self.lists, self.first, strict=True)) > len(picked)


class _PoolWaiting:
    """A pool's waiting tasks for :func:`decide_pool`: read lazily in admission order, and the ready
    ones after the head through the pool's lists by slot count (``ready_tail``)."""

    def __init__(self, sim: _Simulation, pool: str, now: float, lookahead: bool) -> None:
        self.sim, self.pool, self.now, self.lookahead = sim, pool, now, lookahead
        self.read: list[ReadyTask] = []  # the tasks handed out so far, in admission order

    def __iter__(self) -> Iterator[ReadyTask]:
        return self.sim._waiting(self.pool, self.now, self.lookahead, self.read)

    def ready_tail(self, head: ReadyTask, capacity: int) -> _ReadyTail:
        """The ready tasks after ``head`` (read already: the decision reads in admission order). In
        each list by slot count they begin after the ready tasks read up to the head, the head
        included: counted from what was read, without a search of the lists."""
        first = [0] * (max(0, capacity) + 1)
        for task in self.read:
            if not isinstance(task, PendingTask):
                first[task.slots] += 1
            if task is head:
                return _ReadyTail(self.sim, self.pool, first, capacity)
        raise AssertionError(
            f"the head {head.key!r} was not read from pool {self.pool!r}"
        )  # pragma: no cover


def simulate(
    graph: TaskGraph | Sequence[TaskGraph],
    capacity: Mapping[str, int],
    policy: str = "reservation",
    controller_interval: float = 0.0,
    priority: str | PriorityRule | None = None,
    backfill: bool = True,
    estimates: Mapping[str, float] | None = None,
    lookahead: bool = True,
    strict_backfill: bool = False,
    verify_controller: bool = False,
    triggers: Sequence[float] | None = None,
    run_priority: RunPriority | None = None,
    gate: ReservationGate | None = None,
    *,
    _every_tick: bool = False,
    _lower_bound: float | None = None,
    _tables: SimulationTables | None = None,
) -> SimulationResult:
    """Simulate one run of ``graph`` (or one run of each graph, at its trigger time) and return the
    schedule and each run's completion time.

    :param capacity: pool -> slots (GPUs); pools not named are unlimited.
    :param policy: ``"stock"``, ``"critical_path"`` or ``"reservation"`` (see the module docstring).
    :param controller_interval: seconds between controller ticks (``reservation`` only); 0 = the
        controller decides at every event, just before the scheduler loop.
    :param priority: a rule name of :mod:`~airflow_gpu_dag.core.analysis.weight_rules` (``downstream``,
        ``critical_path``, ...) or a callable ``graph -> {task_id: weight}``; None = :func:`default_rule`
        (for ``reservation`` the rule the graphs declare). ``packing`` needs the planner: use
        :func:`airflow_gpu_dag.core.planning.planner.predict`. Weights are computed per graph (as Airflow
        computes them per DAG) and rounded to int32 as Airflow stores them.
    :param backfill: ``reservation`` only: let safe backfill through (False: ``b = 0`` always).
    :param estimates: what the controller believes the durations are (task id -> seconds; for several
        graphs the keys are ``"<index>:<dag_id>/<task_id>"``); tasks missing here, or all tasks when
        None, are believed to run exactly their ``duration``. Lets a benchmark run tasks for durations
        that differ from the estimates the controller (and a planned priority) work with.
    :param lookahead: ``reservation`` only: the controller also reserves for pending tasks (every
        upstream task started, expected ready when the last one is expected to end), as the watermark
        controller does with ``lookahead: true`` (the default).
    :param strict_backfill: ``reservation`` only: backfill only work expected to end before the reserved
        task can start (``backfill: strict``); by default also work that fits the slots the reserved task
        leaves spare then (EASY backfilling).
    :param verify_controller: ``reservation`` only, for tests: at every tick also call
        :func:`~airflow_gpu_dag.core.policy.reservation.decide_pools` with *every* running, ready and pending
        task of each pool, as the watermark controller does, and raise ``AssertionError`` when its pool
        size differs from the tick's (which reads the waiting tasks lazily, as far as needed).
    :param triggers: when each graph's run is triggered (seconds, same clock as the schedule; default
        all at 0). A run's tasks do not exist before it: its first tasks turn ready at its trigger (a
        task's ``not_before`` counts from there). Ties in priority go to the earlier trigger, as
        Airflow breaks them by logical date.
    :param run_priority: ``(graph, trigger) -> weights`` for each run, instead of ``priority`` (the
        cross-DAG keys of :mod:`airflow_gpu_dag.core.policy.objective` depend on the trigger time).
    :param gate: ``reservation`` only: the objective's
        :class:`~airflow_gpu_dag.core.policy.reservation.ReservationGate` (None: reserve for every wide head).
    :param _every_tick: private, for tests and benchmarks: decide at every controller tick, as the
        simulator did before it skipped the ticks that cannot change a decision (the same schedule).
    :param _lower_bound: private, for the planner, which simulates one graph many times: its
        :func:`~airflow_gpu_dag.core.analysis.bounds.lower_bound` on ``capacity``, computed once.
    :param _tables: private, for the planner: ``SimulationTables.build(graph, capacity, triggers)``,
        built once for its many simulations of one graph (``ValueError`` when built for other
        arguments).
    :raises CapacityError: a task needs more slots than its pool's capacity.
    :raises ValueError: unknown policy or priority rule, a negative, NaN or infinite interval, bad trigger
        times, a task duration that is NaN, infinite or negative.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    if not 0 <= controller_interval < math.inf:  # also NaN
        raise ValueError(
            "controller_interval must be finite seconds >= 0 (0: at every event), "
            f"got {controller_interval!r}"
        )
    if _tables is None:
        tables = SimulationTables.build(graph, capacity, triggers)
    elif _tables.serves(graph, capacity, triggers):
        tables = _tables
    else:
        raise ValueError("_tables: built for other graphs, pools or trigger times than these")
    graphs, caps, times = tables.graphs, tables.capacity, tables.triggers
    rule: PriorityRule | RunPriority
    if run_priority is not None:
        rule, rule_name = run_priority, getattr(run_priority, "__name__", "per-run")
    else:
        rule, rule_name = _resolve(policy, priority, graphs, caps)
    reserve = policy == "reservation"
    options = ControllerOptions(
        controller_interval,
        backfill,
        reserve and lookahead,
        strict_backfill,
        verify_controller,
        gate if reserve else None,
    )
    sim = _Simulation(tables, rule, estimates, run_priority is not None)
    sim.run(reserve, options, _every_tick)
    ends = list(times)
    for task in sim.schedule:
        run = sim.run_of[task.task_id]
        ends[run] = max(ends[run], task.end)
    return SimulationResult(
        policy=policy,
        makespan=max((t.end for t in sim.schedule), default=0.0),
        schedule=sim.schedule,
        lower_bound=lower_bound(graphs, caps) if _lower_bound is None else _lower_bound,
        priority_rule=str(rule_name),
        max_pool_usage=sim.max_usage,
        controller_ticks=sim.ticks,
        reservation_ticks=sim.reservation_ticks,
        runs=[RunResult(g.dag_id, times[i], ends[i]) for i, g in enumerate(graphs)],
    )
