"""Discrete-event simulation of DAG runs on GPU pools, under Airflow's admission rule.

One or more task graphs run over pools with fixed capacities. At every event (a task ending) the
scheduler loop runs Airflow's admission (:func:`~airflow_gpu_dag.core.admission.stock_admission`:
priority order, skip what does not fit, greedy). Policies:

* ``stock``: Airflow as shipped: the ``downstream`` weight rule, pools sized to capacity.
* ``critical_path``: a graph-aware priority rule (default ``critical_path``), pools sized to capacity.
* ``reservation``: a graph-aware priority (default ``packing``) and the watermark controller, which
  calls :func:`~airflow_gpu_dag.core.reservation.decide_pools` every ``controller_interval`` seconds
  (0 = at every event, before the scheduler loop) and sets the pool sizes it decides.

Tasks run for exactly their estimated ``duration``. A GPU task holds ``gpu.count`` slots of its pool
(``node.pool``, or ``default_pool``); a task without a GPU holds ``pool_slots`` of its pool; a pool
not in ``capacity`` is unlimited. Ties in priority are broken like Airflow's ``(logical_date,
map_index)``: by graph order (graphs in the order given, tasks in insertion order). Deterministic.
Events are kept in a heap; a run of a 1,200-task DAG takes well under a second.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_gpu_dag.core.admission import PendingTask, ReadyTask, RunningTask
from airflow_gpu_dag.core.critical_path import analyze
from airflow_gpu_dag.core.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.priority import PriorityRule, clamp_int32, packing_weights_plan, resolve_priority
from airflow_gpu_dag.core.reservation import PoolDecision, decide_pools

__all__ = [
    "DEFAULT_POOL",
    "POLICIES",
    "CapacityError",
    "ScheduledTask",
    "SimulationResult",
    "backfill_candidates",
    "dependency_lower_bound",
    "lower_bound",
    "simulate",
    "task_pool",
    "task_slots",
]

DEFAULT_POOL = "default_pool"
#: policy -> default priority rule
POLICIES: dict[str, str] = {"stock": "downstream", "critical_path": "critical_path", "reservation": "packing"}


class CapacityError(ValueError):
    """A task needs more slots than its pool can ever have; it would wait forever."""


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

    @property
    def ratio(self) -> float:
        """Makespan / lower bound (1.0 is optimal; 1.0 for an empty or zero-length run)."""
        return self.makespan / self.lower_bound if self.lower_bound > 0 else 1.0

    def max_wait(self, min_slots: int = 1) -> float:
        """Longest wait of a task holding at least ``min_slots`` slots (0 when there is none)."""
        return max((t.wait for t in self.schedule if t.slots >= min_slots), default=0.0)

    def by_id(self) -> dict[str, ScheduledTask]:
        return {t.task_id: t for t in self.schedule}


def task_pool(node: TaskNode) -> str:
    """The pool a task holds slots of in the model."""
    return node.pool or DEFAULT_POOL


def task_slots(node: TaskNode) -> int:
    """Slots a task holds: its GPU count for a GPU task, else ``pool_slots``."""
    return node.gpu.count if node.gpu is not None else max(0, int(node.pool_slots))


def _as_graphs(graph: TaskGraph | Sequence[TaskGraph]) -> list[TaskGraph]:
    return [graph] if isinstance(graph, TaskGraph) else list(graph)


def _uid(graphs: list[TaskGraph], index: int, task_id: str) -> str:
    return task_id if len(graphs) == 1 else f"{index}:{graphs[index].dag_id}/{task_id}"


def lower_bound(graph: TaskGraph | Sequence[TaskGraph], capacity: Mapping[str, int]) -> float:
    """max(longest critical path, max over pools in ``capacity`` of slot-seconds / capacity)."""
    graphs = _as_graphs(graph)
    critical = max((analyze(g).makespan for g in graphs), default=0.0)
    work: dict[str, float] = dict.fromkeys(capacity, 0.0)
    for g in graphs:
        for node in g.nodes.values():
            pool = task_pool(node)
            if pool in work:
                work[pool] += node.duration * task_slots(node)
    packed = max((work[p] / capacity[p] for p in work if capacity[p] > 0), default=0.0)
    return max(critical, packed)


def dependency_lower_bound(graph: TaskGraph, capacity: Mapping[str, int]) -> float:
    """A tighter bound for one graph, still valid for any schedule: for every task ``v`` and pool ``p``,

    * ``v`` cannot start before its ancestors have done their work in ``p``, which takes at least their
      slot-seconds / ``C_p``, and then its remaining critical path (own duration included) follows;
    * after ``v`` ends (no earlier than its longest upstream path plus its duration), its descendants
      still need their slot-seconds in ``p`` / ``C_p``.

    * the tasks of ``p`` that cannot start before ``r`` (their earliest start) need their slot-seconds
      / ``C_p`` after ``r``, and the last of them to end still has its tail to go (and symmetrically
      for the tasks whose tail is at least ``q``): a pool idle while CPU preprocessing runs shows here.

    The maximum of these and :func:`lower_bound`. Shows how much of a gap to :func:`lower_bound` no
    schedule can close (a serial tail after a wide parallel phase, for instance).
    """
    bound = lower_bound(graph, capacity)
    analysis = analyze(graph)
    order = analysis.order
    index = {t: i for i, t in enumerate(order)}
    pools = [p for p in capacity if capacity[p] > 0]
    share = {p: [0.0] * len(order) for p in pools}
    for t in order:
        node = graph.nodes[t]
        pool = task_pool(node)
        if pool in share:
            share[pool][index[t]] = node.duration * task_slots(node) / capacity[pool]
    down: dict[str, int] = {}
    up: dict[str, int] = {}
    for t in reversed(order):
        acc = 0
        for d in graph.downstream(t):
            acc |= down[d] | (1 << index[d])
        down[t] = acc
    for t in order:
        acc = 0
        for u in graph.upstream(t):
            acc |= up[u] | (1 << index[u])
        up[t] = acc

    def total(bits: int, weights: list[float]) -> float:
        acc = 0.0
        while bits:
            low = bits & -bits
            acc += weights[low.bit_length() - 1]
            bits ^= low
        return acc

    for t in order:
        timing = analysis.timings[t]
        for pool in pools:
            before = total(up[t], share[pool])
            after = total(down[t], share[pool])
            bound = max(bound, before + timing.remaining, timing.earliest_finish + after)
    # release and tail times: the tasks of a pool that cannot start before r need their share after r,
    # and the last of them to end still has its tail (remaining path after it) to go; symmetrically
    # for the tasks whose tail is at least q
    for pool in pools:
        members = [(analysis.timings[t].earliest_start, share[pool][index[t]], t) for t in order]
        members = [m for m in members if m[1] > 0]
        tail = {t: analysis.timings[t].remaining - graph.nodes[t].duration for _r, _w, t in members}
        work, least_tail = 0.0, math.inf
        for release, amount, t in sorted(members, key=lambda m: -m[0]):
            work += amount
            least_tail = min(least_tail, tail[t])
            bound = max(bound, release + work + least_tail)
        work, least_release = 0.0, math.inf
        for release, amount, t in sorted(members, key=lambda m: -tail[m[2]]):
            work += amount
            least_release = min(least_release, release)
            bound = max(bound, least_release + work + tail[t])
    return bound


def backfill_candidates(after_head: Iterable[ReadyTask], free: int) -> list[ReadyTask]:
    """The part of a pool's ready tasks after the head ``W`` (in admission order) that
    :func:`decide_pools` can backfill with ``free`` slots left once the tasks ahead of ``W`` start: only
    tasks that fit ``free``, up to the ``free``-th 1-slot one (Airflow's greedy admission with at most
    ``free`` open slots has stopped by then). The decision on this part equals the decision on all."""
    out: list[ReadyTask] = []
    ones = 0
    if free <= 0:
        return out
    for task in after_head:
        if task.slots <= free:
            out.append(task)
            if task.slots == 1:
                ones += 1
                if ones >= free:
                    break
    return out


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
) -> SimulationResult:
    """Simulate one run of ``graph`` (or one run of each graph, all at once) and return the schedule.

    :param capacity: pool -> slots (GPUs); pools not named are unlimited.
    :param policy: ``"stock"``, ``"critical_path"`` or ``"reservation"`` (see the module docstring).
    :param controller_interval: seconds between controller ticks (``reservation`` only); 0 = the
        controller decides at every event, just before the scheduler loop.
    :param priority: a rule name (``downstream``, ``critical_path``, ``packing``) or a callable
        ``graph -> {task_id: weight}``; None = for ``reservation`` the rule the graphs declare
        (:attr:`TaskGraph.priority_rule`, what the DAG's ``weight_rule`` is), else the policy's
        default. Weights are computed per graph
        (as Airflow computes them per DAG) and rounded to int32 as Airflow stores them.
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
        :func:`decide_pools` with *every* running, ready and pending task of each pool, as the watermark
        controller does, and raise ``AssertionError`` when its pool size differs from the simulator's
        fast walk (which settles common cases inline and passes decide_pools only the tasks that matter).
    :raises CapacityError: a task needs more slots than its pool's capacity.
    :raises ValueError: unknown policy or priority rule, negative interval.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    if controller_interval < 0 or math.isnan(controller_interval):
        raise ValueError(f"controller_interval must be >= 0 seconds, got {controller_interval!r}")
    graphs = _as_graphs(graph)
    capacity = {p: int(c) for p, c in capacity.items()}
    _check_capacity(graphs, capacity)
    chosen = priority
    if chosen is None and policy == "reservation":
        # predict what the scheduler does: the rule the DAG(s) really use, when it is one of ours
        declared = {g.priority_rule for g in graphs}
        if len(declared) == 1 and None not in declared:
            chosen = declared.pop()
    if chosen is None:
        chosen = POLICIES[policy]
    rule: PriorityRule
    if chosen == "packing":
        caps = dict(capacity)

        def rule(g: TaskGraph) -> Mapping[str, int]:
            return packing_weights_plan(
                g, caps, policy, controller_interval=controller_interval, strict_backfill=strict_backfill
            ).weights

    else:
        rule = resolve_priority(chosen, capacity)
    rule_name = chosen if isinstance(chosen, str) else getattr(rule, "__name__", "custom")

    # -- flatten the graphs -------------------------------------------------------------------------
    durations: dict[str, float] = {}
    pools: dict[str, str] = {}
    slots: dict[str, int] = {}
    prio: dict[str, int] = {}
    order: dict[str, int] = {}
    downstream: dict[str, list[str]] = {}
    upstream: dict[str, list[str]] = {}
    waiting_on: dict[str, int] = {}
    for gi, g in enumerate(graphs):
        weights = rule(g)
        for task_id, node in g.nodes.items():
            uid = _uid(graphs, gi, task_id)
            durations[uid] = float(node.duration)
            pools[uid] = task_pool(node)
            slots[uid] = task_slots(node)
            prio[uid] = clamp_int32(weights.get(task_id, 1))
            order[uid] = len(order)
            downstream[uid] = [_uid(graphs, gi, d) for d in g.downstream(task_id)]
            upstream[uid] = [_uid(graphs, gi, u) for u in g.upstream(task_id)]
            waiting_on[uid] = len(upstream[uid])

    reserve = policy == "reservation"
    lookahead = reserve and lookahead
    # lookahead: a task of a capacity pool is *pending* once each upstream task has started or is ready
    # (waits in a pool, or starts now in an unlimited one); unqueued_up counts those not that far yet
    unqueued_up = dict(waiting_on)
    pending_lists: dict[str, list[tuple[int, int, str]]] = {}
    pending_set: set[str] = set()

    def upstream_queued(uid: str) -> None:
        for down in downstream[uid]:
            unqueued_up[down] -= 1
            if unqueued_up[down] == 0 and waiting_on[down] > 0 and pools[down] in capacity:
                pending_set.add(down)
                bisect.insort(pending_lists.setdefault(pools[down], []), (-prio[down], order[down], down))

    pool_size: dict[str, int] = dict(capacity)
    used: dict[str, int] = dict.fromkeys(capacity, 0)
    max_usage: dict[str, int] = dict.fromkeys(capacity, 0)
    ready_lists: dict[str, list[tuple[int, int, str]]] = {}
    ready_at: dict[str, float] = {}
    running: dict[str, float] = {}  # uid -> end
    started: dict[str, float] = {}
    believed = {uid: float((estimates or {}).get(uid, d)) for uid, d in durations.items()}
    events: list[tuple[float, int, str]] = []
    schedule: list[ScheduledTask] = []
    ticks = reservation_ticks = 0

    def make_ready(uid: str, now: float) -> None:
        ready_at[uid] = now
        if uid in pending_set:
            pending_set.discard(uid)
            pending_lists[pools[uid]].remove((-prio[uid], order[uid], uid))
        if lookahead:
            upstream_queued(uid)
        bisect.insort(ready_lists.setdefault(pools[uid], []), (-prio[uid], order[uid], uid))

    def next_decision(now: float) -> float | None:
        """When the controller decides next (None: at the next event, interval 0)."""
        if controller_interval <= 0:
            return None
        return (math.floor(now / controller_interval) + 1) * controller_interval

    def controller(now: float) -> None:
        """One controller tick: :func:`decide_pools` for every capacity pool.

        The walk over the waiting tasks is done here first; the common cases are settled without
        building its inputs, with the same outcome (no task blocked: pool = C; a ready 1-slot head:
        pool = C; nothing can start and nothing can be backfilled for a ready head: C - w; without
        backfill, for a pending head: min(used, C - w)). Otherwise decide_pools gets the tasks that
        can matter: those ahead of the head, the head and the backfill candidates after it (for a
        pending head, those for up to C slots: it also judges what would take slots freed before the
        head is ready).
        """
        nonlocal ticks, reservation_ticks
        ticks += 1
        reserving = False
        for pool, cap in capacity.items():
            ready_lst = ready_lists.get(pool) or []
            pending_lst = (pending_lists.get(pool) or []) if lookahead else []
            if not ready_lst and not pending_lst:
                pool_size[pool] = cap
                continue
            free = cap - used[pool]
            remaining = free
            ahead: list[str] = []
            ends: dict[str, float] = {}
            head: str | None = None
            head_ready = now
            merged = heapq.merge(ready_lst, pending_lst) if pending_lst else iter(ready_lst)
            for item in merged:
                uid = item[2]
                if slots[uid] > cap:
                    continue
                if uid in pending_set:
                    # upstream tasks: started, ready in an unlimited pool (they start now), or waiting
                    # here and started by this decision; anything else: not a head (as decide_pools)
                    known = [-math.inf]
                    waiting_up = []
                    for u in upstream[uid]:
                        if u in started:
                            known.append(started[u] + believed[u])
                        elif pools[u] not in capacity:
                            known.append(now + believed[u])
                        else:
                            waiting_up.append(u)
                    if any(u not in ends for u in waiting_up):
                        continue
                    following = bisect.bisect_right(ready_lst, item)
                    if following < len(ready_lst) and ready_lst[following][0] <= item[0]:
                        continue  # as decide_pools: a tie is not a plan
                    expected = max([*known, *(ends[u] for u in waiting_up)])
                    if expected <= now:
                        continue  # as decide_pools: its upstream overran, when it turns ready is unknown
                    head = uid
                    head_ready = expected
                    break
                if slots[uid] > remaining:
                    head = uid
                    break
                ahead.append(uid)
                ends[uid] = now + believed[uid]
                remaining -= slots[uid]
            if head is None:
                pool_size[pool] = cap
                continue
            is_pending = head in pending_set
            if not is_pending and slots[head] == 1:
                pool_size[pool] = cap
                continue
            reserving = True
            if is_pending and len(ready_lst) == len(ahead):
                pool_size[pool] = cap  # as decide_pools: nothing else waits (no task exceeds cap here)
                continue
            started_now = free - remaining
            if (remaining <= 0 or not backfill) and not (is_pending and backfill and started_now == 0):
                # min(used, C - w) is C - w for a ready head that does not fit
                pool_size[pool] = (
                    min(used[pool], cap - slots[head]) if started_now == 0 else used[pool] + started_now
                )
                continue
            # backfill candidates: ready tasks after the head (pending ones are never admitted)
            after_ready = (
                ReadyTask(u, pool, slots[u], -negp, believed[u], (o,))
                for negp, o, u in merged
                if u not in pending_set and slots[u] <= cap
            )
            cut = [ReadyTask(u, pool, slots[u], prio[u], believed[u], (order[u],)) for u in ahead]
            # a pending head: decide_pools also judges what would take the slots freed before it is
            # ready, with up to C - w of them
            candidates = backfill_candidates(after_ready, cap if is_pending else remaining)
            cut += candidates
            # one ready task beyond the candidates, if any: decide_pools must know something is left
            chosen = {t.key for t in candidates}
            beyond = next(
                (u for _p, _o, u in ready_lst if u not in chosen and u != head and u not in ends), None
            )
            if beyond is not None:
                cut.append(
                    ReadyTask(beyond, pool, slots[beyond], prio[beyond], believed[beyond], (order[beyond],))
                )
            pend: list[PendingTask] = []
            if is_pending:
                pend.append(
                    PendingTask(
                        head, pool, slots[head], prio[head], believed[head], (order[head],), head_ready
                    )
                )
            else:
                cut.append(ReadyTask(head, pool, slots[head], prio[head], believed[head], (order[head],)))
            busy = [
                RunningTask(uid, pool, slots[uid], started[uid] + believed[uid])
                for uid in running
                if pools[uid] == pool
            ]
            decision: PoolDecision = decide_pools(
                now,
                {pool: cap},
                busy,
                cut,
                backfill=backfill,
                pending=pend,
                strict_backfill=strict_backfill,
                next_decision=next_decision(now),
            )[pool]
            pool_size[pool] = decision.pool_size
        if reserving:
            reservation_ticks += 1
        if verify_controller:
            check_against_full_decision(now)

    def check_against_full_decision(now: float) -> None:
        """The decision from every waiting task, built as the watermark controller builds it."""
        busy = [
            RunningTask(uid, pools[uid], slots[uid], started[uid] + believed[uid])
            for uid in running
            if pools[uid] in capacity
        ]
        ready = [
            ReadyTask(uid, pool, slots[uid], prio[uid], believed[uid], (order[uid],))
            for pool, lst in ready_lists.items()
            if pool in capacity
            for _p, _o, uid in lst
        ]
        pend: list[PendingTask] = []
        for pool, lst in pending_lists.items() if lookahead else ():
            for _p, _o, uid in lst:
                known = [started[u] + believed[u] for u in upstream[uid] if u in started]
                known += [
                    now + believed[u] for u in upstream[uid] if u not in started and pools[u] not in capacity
                ]
                after = tuple(u for u in upstream[uid] if u not in started and pools[u] in capacity)
                ready_time = max(known) if known else now
                pend.append(
                    PendingTask(
                        uid, pool, slots[uid], prio[uid], believed[uid], (order[uid],), ready_time, after
                    )
                )
        full = decide_pools(
            now,
            capacity,
            busy,
            ready,
            backfill=backfill,
            pending=pend,
            strict_backfill=strict_backfill,
            next_decision=next_decision(now),
        )
        for pool, decision in full.items():
            if decision.pool_size != pool_size[pool]:
                raise AssertionError(
                    f"t={now:g} pool {pool}: the simulator set {pool_size[pool]}, decide_pools over every "
                    f"waiting task decides {decision.pool_size} ({decision.reason})"
                )

    def admit(now: float) -> None:
        for pool, lst in ready_lists.items():
            if not lst:
                continue
            limited = pool in capacity
            size = pool_size.get(pool, 0)
            open_slots = size - used[pool] if limited else 0
            if limited and open_slots <= 0:
                continue
            taken: list[int] = []
            for i, (negp, _o, uid) in enumerate(lst):
                need = slots[uid]
                if limited:
                    if need > open_slots or need > size:
                        continue
                    open_slots -= need
                taken.append(i)
                end = now + durations[uid]
                running[uid] = end
                started[uid] = now
                heapq.heappush(events, (end, order[uid], uid))
                schedule.append(ScheduledTask(uid, now, end, need, pool, -negp, ready_at[uid]))
                if limited and open_slots <= 0:
                    break
            for i in reversed(taken):
                del lst[i]
            if limited:
                used[pool] = size - open_slots if taken else used[pool]
                max_usage[pool] = max(max_usage[pool], used[pool])

    for uid, count in waiting_on.items():
        if count == 0:
            make_ready(uid, 0.0)

    now = 0.0
    next_tick = 0.0
    finished = 0
    total = len(durations)
    while True:
        if reserve and (controller_interval == 0 or now >= next_tick):
            controller(now)
            if controller_interval > 0:
                next_tick = (math.floor(now / controller_interval) + 1) * controller_interval
        admit(now)
        pending = any(ready_lists.values())
        candidates = []
        if events:
            candidates.append(events[0][0])
        if reserve and controller_interval > 0 and pending:
            candidates.append(next_tick)
        if not candidates:
            break
        now = min(candidates)
        while events and events[0][0] <= now:
            _end, _o, uid = heapq.heappop(events)
            del running[uid]
            finished += 1
            if pools[uid] in capacity:
                used[pools[uid]] -= slots[uid]
            for down in downstream[uid]:
                waiting_on[down] -= 1
                if waiting_on[down] == 0:
                    make_ready(down, now)
    if finished != total:  # pragma: no cover - guarded by _check_capacity
        stuck = sorted(uid for lst in ready_lists.values() for _p, _o, uid in lst)[:5]
        raise RuntimeError(f"simulation stalled with {total - finished} tasks left, e.g. {stuck}")
    makespan = max((t.end for t in schedule), default=0.0)
    return SimulationResult(
        policy=policy,
        makespan=makespan,
        schedule=schedule,
        lower_bound=lower_bound(graphs, capacity),
        priority_rule=str(rule_name),
        max_pool_usage=max_usage,
        controller_ticks=ticks,
        reservation_ticks=reservation_ticks,
    )
