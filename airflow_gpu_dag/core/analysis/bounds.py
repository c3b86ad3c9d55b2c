"""Makespan lower bounds that hold for every schedule of one DAG on its pools.

They say how much of a gap no scheduler can close. :func:`lower_bound`
(critical path, slot-seconds / capacity) and :func:`dependency_lower_bound`
ignore two things that dominate GPU workflows; the bounds here count them:

* :func:`release_profile_bound`: a pool cannot be busy before its work is released. By time ``s`` a
  task ``j`` has run at most ``min(d_j, s - es_j)`` (``es_j``: its earliest start, from its ancestors),
  and the pool does at most ``C`` slot-seconds a second, so the work of a set of tasks cannot be done
  before some time ``t``; the last of them still has its tail (the longest path after it) to go.
  Counts the idle GPUs of a wide map phase that waits for a few long splits.
* :func:`overlap_bound`: tasks are rigid. If neither of two tasks can follow the other within a
  makespan ``M`` (``es_i + d_i + d_j + tail_j > M`` both ways round) they run at the same time for a
  while; for intervals on a line, pairwise overlap means one instant shared by all (Helly), so a set of
  such tasks needing more than ``C`` slots in one pool proves ``M`` infeasible. Counts the "34 GPUs of
  work that must start at once on 32 GPUs" case, where one of them waits a whole task length.
* :func:`rounds_bound`: a GPU runs one task at a time. Tasks of at least ``delta`` seconds that all
  lie in one window fit at most ``floor(window / delta)`` times on one GPU, so their ``sum of slots``
  needs ``ceil(sum / C)`` rounds of ``delta``. Counts 70 GPUs' worth of 9-s shards on 32 GPUs: three
  rounds, not the 2.2 that slot-seconds suggest.

:func:`best_lower_bound` is the largest of them and the dependency bounds. Pure and deterministic;
tested against exhaustive search on small DAGs. Fallback ladders are bounded as
:func:`~airflow_gpu_dag.core.simulation.simulator.simulate` runs them
(:func:`~airflow_gpu_dag.core.model.ladders.fit_ladders`:
a rung that falls back only waits, holding no slots).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool, task_slots
from airflow_gpu_dag.core.model.ladders import fit_ladders

__all__ = [
    "best_lower_bound",
    "dependency_lower_bound",
    "lower_bound",
    "overlap_bound",
    "release_profile_bound",
    "rounds_bound",
]


def lower_bound(graph: TaskGraph | Sequence[TaskGraph], capacity: Mapping[str, int]) -> float:
    """max(longest critical path, max over pools in ``capacity`` of slot-seconds / capacity)."""
    graphs = [fit_ladders(g, capacity) for g in ([graph] if isinstance(graph, TaskGraph) else graph)]
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
    graph = fit_ladders(graph, capacity)  # the rungs that run, as simulate() has them
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


#: How many tail (or release) thresholds :func:`release_profile_bound` tries per pool and direction;
#: any subset of thresholds still gives a valid bound.
PROFILE_THRESHOLDS = 256

# (earliest start, tail after the task, slots, duration) of every task that holds slots of one pool
_Member = tuple[float, float, int, float]


def _members(graph: TaskGraph, capacity: Mapping[str, int]) -> dict[str, list[_Member]]:
    graph = fit_ladders(graph, capacity)  # a rung that falls back holds no slots while it waits
    analysis = analyze(graph)
    out: dict[str, list[_Member]] = {pool: [] for pool, cap in capacity.items() if cap > 0}
    for task_id, node in graph.nodes.items():
        pool = task_pool(node)
        slots = task_slots(node)
        if pool not in out or slots <= 0 or node.duration <= 0:
            continue
        timing = analysis.timings[task_id]
        out[pool].append((timing.earliest_start, timing.remaining - node.duration, slots, node.duration))
    return out


def _earliest_done(items: Sequence[tuple[float, int, float]], capacity: int, work: float) -> float:
    """Earliest time ``work`` slot-seconds of ``items`` (release, slots, duration) can be done.

    ``A(s) = sum slots * clip(s - release, 0, duration)`` bounds what the items can have done by
    ``s``; the pool adds at most ``capacity`` a second after that, so the work done by ``t`` is at most
    ``G(t) = min over s <= t of A(s) + capacity * (t - s)``. Returns the smallest ``t`` with
    ``G(t) >= work``. ``A`` is piecewise linear, so the minimum is at ``t`` or at a breakpoint.
    """
    if work <= 0:
        return 0.0
    slope_change: dict[float, int] = {}
    for release, slots, duration in items:
        slope_change[release] = slope_change.get(release, 0) + slots
        slope_change[release + duration] = slope_change.get(release + duration, 0) - slots
    done = 0.0  # A at `prev`
    slope = 0
    least = 0.0  # min over breakpoints b <= prev of A(b) - capacity * b
    prev = 0.0
    tolerance = 1e-9 * max(1.0, work)
    for point in [*sorted(slope_change), math.inf]:
        if done >= work - tolerance:
            by_profile = prev
        elif slope > 0:
            by_profile = prev + (work - done) / slope
        else:
            by_profile = math.inf
        t = max(by_profile, (work - least) / capacity, prev)
        if t <= point:
            return t
        done += slope * (point - prev)
        least = min(least, done - capacity * point)
        slope += slope_change[point]
        prev = point
    return math.inf  # pragma: no cover - the last breakpoint releases all work


def _thresholds(values: Sequence[float]) -> list[float]:
    distinct = sorted(set(values), reverse=True)
    if len(distinct) <= PROFILE_THRESHOLDS:
        return distinct
    step = len(distinct) / PROFILE_THRESHOLDS
    return [distinct[int(i * step)] for i in range(PROFILE_THRESHOLDS)] + [distinct[-1]]


def release_profile_bound(graph: TaskGraph, capacity: Mapping[str, int]) -> float:
    """Largest ``t + q`` over pools and tail thresholds ``q``: the tasks of a pool whose tail is at
    least ``q`` cannot all be done before ``t`` (their work against how fast the pool can take it as it
    is released, :func:`_earliest_done`), and the last of them still has ``q`` to go. The same in
    mirrored time (releases as tails, and the other way round). 0 for a DAG without pool tasks."""
    return _per_pool(_release_profile, _members(graph, capacity), capacity)


def _release_profile(members: Sequence[_Member], cap: int) -> float:
    bound = 0.0
    for release_at, threshold_at in ((0, 1), (1, 0)):  # forward, then mirrored time
        for q in _thresholds([m[threshold_at] for m in members]):
            chosen = [(m[release_at], m[2], m[3]) for m in members if m[threshold_at] >= q]
            work = sum(slots * duration for _r, slots, duration in chosen)
            bound = max(bound, _earliest_done(chosen, cap, work) + q)
    return bound


class _SlotSums:
    """Fenwick tree: slots added per rank, sum over ranks >= r."""

    def __init__(self, size: int) -> None:
        self.tree = [0] * (size + 1)
        self.total = 0

    def add(self, rank: int, slots: int) -> None:
        self.total += slots
        i = rank + 1
        while i < len(self.tree):
            self.tree[i] += slots
            i += i & -i

    def from_rank(self, rank: int) -> int:
        below, i = 0, rank
        while i > 0:
            below += self.tree[i]
            i -= i & -i
        return self.total - below


def _forced_overlap(members: Sequence[_Member], capacity: int, makespan: float) -> bool:
    """True when ``makespan`` is infeasible: for some ``x`` the tasks with ``es + d > x`` and
    ``d + tail > makespan - x`` (pairwise unable to follow each other) need more than ``capacity``.
    The largest such sets are at ``x`` just below an ``es + d``: scanned in decreasing ``es + d``."""
    ends = [(m[0] + m[3], m[3] + m[1], m[2]) for m in members]  # (es + d, d + tail, slots)
    lengths = sorted({f for _e, f, _s in ends})
    sums = _SlotSums(len(lengths))
    ends.sort(key=lambda e: -e[0])
    i = 0
    while i < len(ends):
        end = ends[i][0]
        while i < len(ends) and ends[i][0] == end:
            _e, length, slots = ends[i]
            sums.add(bisect.bisect_left(lengths, length), slots)
            i += 1
        # tasks with es + d >= end and d + tail > makespan - end
        if sums.from_rank(bisect.bisect_right(lengths, makespan - end)) > capacity:
            return True
    return False


def overlap_bound(graph: TaskGraph, capacity: Mapping[str, int], tolerance: float = 1e-6) -> float:
    """The largest makespan proven infeasible by forced overlaps of rigid tasks (see the module
    docstring), found by bisection to ``tolerance`` (relative); 0 when no overlap is forced."""
    return _per_pool(
        lambda members, cap: _overlap(members, cap, tolerance), _members(graph, capacity), capacity
    )


def _overlap(members: Sequence[_Member], cap: int, tolerance: float = 1e-6) -> float:
    if not members or not _forced_overlap(members, cap, 0.0):
        return 0.0
    low = 0.0  # infeasible
    high = max(m[0] + m[3] for m in members) + max(m[3] + m[1] for m in members)  # nothing forced
    while high - low > tolerance * max(1.0, high):
        mid = (low + high) / 2
        if mid in (low, high):  # adjacent floats: as exact as bisection gets (a tolerance of 0 or less)
            break
        if _forced_overlap(members, cap, mid):
            low = mid
        else:
            high = mid
    return low


def rounds_bound(graph: TaskGraph, capacity: Mapping[str, int]) -> float:
    """Largest ``a + q + ceil(W / C) * delta`` over pools and durations ``delta``: the tasks of a pool
    lasting at least ``delta`` (their slots summed: ``W``) cannot start before ``a`` (the least of their
    earliest starts) and leave at least ``q`` (the least of their tails) after them; one GPU runs at most
    ``floor((M - q - a) / delta)`` of them in a makespan ``M`` (a schedule of slot counts can always be
    given fixed GPUs, a task taking any free ones when it starts), so ``M - q - a`` is at least
    ``ceil(W / C)`` times ``delta``. 0 for a DAG without pool tasks."""
    return _per_pool(_rounds, _members(graph, capacity), capacity)


def _rounds(members: Sequence[_Member], cap: int) -> float:
    bound = 0.0
    earliest = tail = math.inf
    slots = 0
    for release, after, width, duration in sorted(members, key=lambda m: -m[3]):
        earliest, tail, slots = min(earliest, release), min(tail, after), slots + width
        bound = max(bound, earliest + tail + math.ceil(slots / cap) * duration)
    return bound


def _per_pool(
    bound: Callable[[Sequence[_Member], int], float],
    members: Mapping[str, Sequence[_Member]],
    capacity: Mapping[str, int],
) -> float:
    """The largest of ``bound(pool's members, pool's capacity)`` over the pools; 0 when none."""
    return max((bound(tasks, capacity[pool]) for pool, tasks in members.items()), default=0.0)


def best_lower_bound(graph: TaskGraph, capacity: Mapping[str, int]) -> float:
    """The largest of :func:`dependency_lower_bound` (which includes
    :func:`lower_bound`), :func:`release_profile_bound`,
    :func:`overlap_bound` and :func:`rounds_bound`: no schedule of ``graph`` on pools of ``capacity``
    ends earlier."""
    members = _members(graph, capacity)  # one critical-path analysis for the three bounds
    return max(
        dependency_lower_bound(graph, capacity),
        *(_per_pool(bound, members, capacity) for bound in (_release_profile, _overlap, _rounds)),
    )
