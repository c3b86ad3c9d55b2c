"""Forward-backward improvement ("double justification") of a resource-feasible schedule.

A schedule produced by Airflow's greedy admission starts whatever fits; it leaves holes that a planner
can close. Justification (Valls, Ballestin & Quintanilla, 2005, for the resource-constrained project
scheduling problem) shifts every task right as far as it can go without passing the makespan, in
decreasing order of finish time, and then left again, in increasing order of the right-shifted start.
Each pass is a *serial schedule generation*: tasks are placed one by one at the earliest (latest)
time their dependencies and the pools' free slots allow. The result never has a longer makespan and
often a shorter one: work that waited in the greedy schedule fills the holes in front of it.

Pure and deterministic. Pools not in ``capacity`` are unlimited. A placement costs a binary search
and a jump over each too-full stretch of the pool it cannot start in (:class:`UsageProfile`), not a
walk over every breakpoint of the usage profile.
"""

from __future__ import annotations

import bisect
import heapq
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import compress, repeat
from itertools import count as count_from

from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool, task_slots

__all__ = [
    "TaskTable",
    "UsageProfile",
    "justify",
    "ordered_schedule",
    "priority_serial_schedule",
    "serial_schedule",
]


class UsageProfile:
    """Slots in use over time for one pool: a step function, 0 before the first and after the last
    interval.

    Beside the steps it keeps, for every ``limit`` below the capacity, the time ranges where more than
    ``limit`` slots are in use, merged (``_full[limit]``: one sorted list of their boundaries,
    ``[start0, end0, start1, end1, ...]``, so that where a time falls is one binary search: an odd
    position is inside a range). Ranges never touch (touching ones are merged), and use only grows, so
    a range never shrinks: :meth:`earliest` jumps over a range in one step instead of walking its
    steps, which made a pass over a crowded pool quadratic.

    It also remembers, per limit, the starts :meth:`earliest` found from time 0 or before (``_from_zero``:
    durations ascending, their starts ascending, each start the latest found for at most that
    duration). Use only grows, so a start found for a duration is a lower bound of every later search
    from time 0 on for a duration at least as long: the search begins there instead of walking again
    over every too-short gap before it (in a pass, a third of the tasks have no upstream task and
    search from 0, past the whole schedule placed so far)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.times: list[float] = [0.0]
        self.use: list[int] = [0]  # use[i] holds on [times[i], times[i+1]); the last one forever
        self._full: list[list[float]] = [[] for _ in range(max(0, capacity))]
        self._from_zero: list[tuple[list[float], list[float]]] = [([], []) for _ in range(max(0, capacity))]

    def earliest(self, not_before: float, duration: float, slots: int) -> float:
        """The earliest start >= ``not_before`` at which ``slots`` fit for ``duration`` seconds."""
        times = self.times
        reach = abs(not_before) + abs(times[0]) + abs(times[-1])
        if not duration > 1e-12 * reach or slots <= 0 or slots > self.capacity:
            # a task so short that start + duration can round to start (or NaN, or no slots, or too
            # wide): what the walk finds there (the jumps below assume start + duration > start)
            return self.earliest_by_steps(not_before, duration, slots)
        limit = self.capacity - slots
        bounds = self._full[limit]  # [start0, end0, start1, end1, ...] of the too-full ranges
        start = not_before
        durations, found = self._from_zero[limit]
        if not_before >= 0.0:  # no earlier than what a search from 0 found for a duration not longer
            i = bisect.bisect_right(durations, duration)
            if i and found[i - 1] > start:
                start = found[i - 1]
        k = bisect.bisect_right(bounds, start)  # bounds[k] is the first boundary after start
        if k & 1:
            start = bounds[k]  # inside a range with too many slots in use: the first time after it
            k += 1
        count = len(bounds)
        walked = k + 12 if k + 12 < count else count  # six ranges (min(), a call, costs more here)
        while k < walked and bounds[k] < start + duration:
            start = bounds[k + 1]  # the next such range begins before the task would end
            k += 2
        if k == walked < count and bounds[k] < start + duration:
            # many short gaps (a crowded pool): the first range after the one at k whose gap to the
            # range before is long enough, start >= end before + duration, found by C-level iterators
            # (the starts from k + 2 on, the ends from k + 1 on: every second boundary; read by index,
            # not islice(), which would step through the k boundaries before them first)
            fits = map(
                operator.ge,
                map(bounds.__getitem__, range(k + 2, count, 2)),
                map(operator.add, map(bounds.__getitem__, range(k + 1, count, 2)), repeat(duration)),
            )
            start = bounds[next(compress(count_from(k + 2, 2), fits), count) - 1]
        if not_before <= 0.0:
            self._found_from_zero(durations, found, duration, start)
        return start

    @staticmethod
    def _found_from_zero(durations: list[float], found: list[float], duration: float, start: float) -> None:
        """Remember that a search from time 0 or before for ``duration`` found ``start``: kept unless a
        duration not longer already has a start as late; drops the longer durations with earlier starts."""
        i = bisect.bisect_right(durations, duration)
        if i and found[i - 1] >= start:
            return
        j = bisect.bisect_right(found, start, i)
        durations[i:j] = (duration,)
        found[i:j] = (start,)

    def earliest_by_steps(self, not_before: float, duration: float, slots: int) -> float:
        """:meth:`earliest` by walking the steps of the profile (the reference the tests compare with)."""
        if duration <= 0 or slots <= 0:
            return not_before
        limit = self.capacity - slots
        if limit < 0:
            raise ValueError(f"{slots} slots can never fit a pool of capacity {self.capacity}")
        times, use = self.times, self.use
        start = not_before
        i = max(0, bisect.bisect_right(times, start) - 1)
        while True:
            end = start + duration
            j = i
            while j < len(times) and times[j] < end:
                if use[j] > limit:
                    break
                j += 1
            else:
                return start
            start = times[j + 1]  # the last segment is empty, so a conflicting one has a successor
            i = j + 1

    def add(self, start: float, end: float, slots: int) -> None:
        """Hold ``slots`` over ``[start, end)``."""
        if end <= start or slots <= 0:
            return
        times, use = self.times, self.use
        first = bisect.bisect_right(times, start) - 1  # the steps [first, last) get the slots
        if first < 0:
            first = 0
            times.insert(0, start)
            use.insert(0, 0)
        elif times[first] != start:
            first += 1
            times.insert(first, start)
            use.insert(first, use[first - 1])
        last = bisect.bisect_right(times, end, first) - 1
        if times[last] != end:
            last += 1
            times.insert(last, end)
            use.insert(last, use[last - 1])
        capacity, full = self.capacity, self._full
        for k in range(first, last):
            before = use[k]
            use[k] = after = before + slots
            if before >= capacity:
                continue
            begin, finish = times[k], times[k + 1]
            # the step now uses more than each limit from `before` (at least 0) up to `after` (at most
            # the capacity), and did not before: add it to the ranges of those limits
            for bounds in full[before if before > 0 else 0 : after if after < capacity else capacity]:
                if bounds and bounds[-1] == begin:  # right after the last range (the most common)
                    bounds[-1] = finish
                elif not bounds or bounds[-1] < begin:  # after every range
                    bounds += (begin, finish)
                else:
                    self._cover(bounds, begin, finish)

    @staticmethod
    def _cover(bounds: list[float], begin: float, end: float) -> None:
        """Add the step ``[begin, end)``, which no range of ``bounds`` overlaps, to them, merged with a
        range it touches. Between ``begin`` and ``end`` lie at most the end of the range it touches on
        the left (``bounds[i]``, at an odd position) and the start of the one it touches on the right
        (at an even one): those boundaries go, and ``begin`` (``end``) comes in where no range ends
        (starts) there."""
        i = bisect.bisect_left(bounds, begin)
        j = bisect.bisect_right(bounds, end, i)
        bounds[i:j] = ((begin,) if i % 2 == 0 else ()) + ((end,) if j % 2 == 0 else ())


class TaskTable:
    """What the passes read of every task of a graph: duration, pool, slots, upstream and downstream
    tasks, topological position. Read once per call of :func:`justify` or
    :func:`priority_serial_schedule`, or once for many calls on one graph (the planner's): pass it as
    ``table`` (the graph must not change meanwhile)."""

    def __init__(self, graph: TaskGraph) -> None:
        self.graph = graph
        self.duration = {t: node.duration for t, node in graph.nodes.items()}
        # the opening of each task's start window (0: none): no forward pass starts it earlier
        self.not_before = {t: max(0.0, float(node.not_before or 0.0)) for t, node in graph.nodes.items()}
        self.pool = {t: task_pool(node) for t, node in graph.nodes.items()}
        self.slots = {t: task_slots(node) for t, node in graph.nodes.items()}
        self.up = {t: graph.upstream(t) for t in graph.nodes}
        self.down = {t: graph.downstream(t) for t in graph.nodes}
        self._topo: dict[str, int] | None = None
        # the same by task number (position in graph.nodes), for the serial passes: lists indexed by
        # number instead of dicts keyed by task id (fewer lookups per placed task, and smaller)
        self.number = {t: i for i, t in enumerate(graph.nodes)}
        number = self.number
        self.durations = list(self.duration.values())
        self.releases = list(self.not_before.values())
        self.pools = list(self.pool.values())
        self.widths = list(self.slots.values())
        self.ups = [[number[u] for u in ups] for ups in self.up.values()]
        self.downs = [[number[d] for d in downs] for downs in self.down.values()]

    @property
    def topo(self) -> dict[str, int]:
        """Task -> position in the graph's topological order (read when first needed)."""
        if self._topo is None:
            self._topo = {t: i for i, t in enumerate(self.graph.topological_order())}
        return self._topo

    @property
    def topo_numbers(self) -> list[int]:
        """The task numbers in the graph's topological order."""
        return list(map(self.number.__getitem__, self.topo))

    @classmethod
    def of(cls, graph: TaskGraph, table: TaskTable | None) -> TaskTable:
        """``table`` when it was read from ``graph``, else a new one."""
        return table if table is not None and table.graph is graph else cls(graph)


def _place(
    tasks: TaskTable,
    profiles: Mapping[str, UsageProfile],
    start: dict[str, float],
    task_id: str,
    before: Iterable[str],
    not_before: float = 0.0,
) -> tuple[float, bool]:
    """Place one task at the earliest time the tasks in ``before`` (all placed) have ended and its
    pool allows, not before ``not_before`` in a capacity pool; record it in ``start``. Returns the
    start and whether the task holds slots of a capacity pool (a task of an unlimited pool starts
    when ``before`` has ended)."""
    duration = tasks.duration
    ready = max((start[t] + duration[t] for t in before), default=0.0)
    ready = max(ready, tasks.not_before[task_id])  # its start window
    profile = profiles.get(tasks.pool[task_id])
    if profile is None:
        start[task_id] = ready
        return ready, False
    slots = tasks.slots[task_id]
    begin = profile.earliest(max(ready, not_before), duration[task_id], slots)
    profile.add(begin, begin + duration[task_id], slots)
    start[task_id] = begin
    return begin, True


def serial_schedule(
    graph: TaskGraph, capacity: Mapping[str, int], order: Sequence[str], reverse: bool = False
) -> dict[str, float]:
    """Place tasks one by one in ``order`` at the earliest time dependencies and pools allow.

    ``order`` must list every task, each after all its upstream tasks (after all its downstream tasks
    when ``reverse``: then the graph is scheduled backwards in mirrored time, and the returned value
    of a task is its mirrored start, i.e. ``makespan - finish``).
    """
    return _serial(TaskTable(graph), capacity, order, reverse)


def _serial(
    tasks: TaskTable, capacity: Mapping[str, int], order: Sequence[str], reverse: bool
) -> dict[str, float]:
    """:func:`serial_schedule` from the tasks read once. Returns task -> start in the order placed."""
    placed = list(map(tasks.number.__getitem__, order))
    start = _serial_by_number(tasks, capacity, placed, reverse)
    return dict(zip(order, map(start.__getitem__, placed), strict=True))


def _serial_by_number(
    tasks: TaskTable, capacity: Mapping[str, int], placed: Iterable[int], reverse: bool
) -> list[float]:
    """A serial pass over the task numbers ``placed`` (each after those it waits for); returns the
    start by task number (0 for a task not placed). :func:`_place` inlined: this loop is most of what
    a plan costs."""
    profiles = {pool: UsageProfile(cap) for pool, cap in capacity.items()}
    profile_of = [profiles.get(pool) for pool in tasks.pools]
    duration, widths = tasks.durations, tasks.widths
    before = tasks.downs if reverse else tasks.ups
    # start windows bind forward in time only (a mirrored pass has no clock to open them on)
    release = [0.0] * len(duration) if reverse else tasks.releases
    start = [0.0] * len(duration)
    for i in placed:
        ready = 0.0
        ups = before[i]
        if ups:  # the latest end, the first one kept on ties, as max() does
            first = ups[0]
            ready = start[first] + duration[first]
            for up in ups[1:]:
                end = start[up] + duration[up]
                if end > ready:
                    ready = end
        if release[i] > ready:
            ready = release[i]
        profile = profile_of[i]
        if profile is None:
            start[i] = ready
            continue
        seconds = duration[i]
        begin = profile.earliest(0.0 if ready < 0.0 else ready, seconds, widths[i])  # max(ready, 0.0)
        profile.add(begin, begin + seconds, widths[i])
        start[i] = begin
    return start


def ordered_schedule(graph: TaskGraph, capacity: Mapping[str, int], order: Sequence[str]) -> dict[str, float]:
    """The schedule the reservation controller realizes for a start order (plan-order weights, lookahead
    on): each task of a capacity pool starts at the earliest time its dependencies and its pool allow,
    but not before the task of its pool placed before it; a task of an unlimited pool starts when it is
    ready. ``order`` must list every task after its upstream tasks. For DAGs whose tasks all hold slots
    of capacity pools this is exactly what the simulator predicts
    (``tests/unit/core/simulation/test_simulator.py``); the planner scores start orders with it because
    it costs one pass, not a simulation."""
    profiles = {pool: UsageProfile(cap) for pool, cap in capacity.items()}
    last = dict.fromkeys(capacity, 0.0)
    start: dict[str, float] = {}
    tasks = TaskTable(graph)
    for task_id in order:
        pool = tasks.pool[task_id]
        begin, limited = _place(tasks, profiles, start, task_id, tasks.up[task_id], last.get(pool, 0.0))
        if limited:
            last[pool] = begin
    return start


def priority_serial_schedule(
    graph: TaskGraph,
    capacity: Mapping[str, int],
    priority: Mapping[str, float],
    table: TaskTable | None = None,
) -> dict[str, float]:
    """Serial schedule generation by a priority rule: of the tasks whose upstream tasks are all
    placed, the one with the highest ``priority`` (ties by graph order) is placed next, at the earliest
    time its dependencies and its pool allow. Unlike Airflow's greedy admission (parallel generation),
    a task may be placed before work that was placed earlier, into a hole that work left; the schedule
    is *active*, and some active schedule is optimal."""
    tasks = TaskTable.of(graph, table)
    placed: list[int] = []
    start = _serial_by_number(tasks, capacity, _by_priority(tasks, priority, placed), reverse=False)
    ids = list(tasks.number)
    return dict(zip(map(ids.__getitem__, placed), map(start.__getitem__, placed), strict=True))


def _by_priority(tasks: TaskTable, priority: Mapping[str, float], placed: list[int]) -> Iterator[int]:
    """The task numbers in the order of :func:`priority_serial_schedule`: of the tasks whose upstream
    tasks have all been yielded, the one of the highest priority, ties by topological position. Each
    is also appended to ``placed``."""
    number = tasks.number
    key = [-priority.get(t, 0.0) for t in number]
    position = [0] * len(key)
    for rank, i in enumerate(tasks.topo_numbers):
        position[i] = rank
    missing = [len(ups) for ups in tasks.ups]
    downs = tasks.downs
    eligible = [(key[i], position[i], i) for i, count in enumerate(missing) if count == 0]
    heapq.heapify(eligible)
    while eligible:
        i = heapq.heappop(eligible)[2]
        placed.append(i)
        yield i
        for down in downs[i]:
            missing[down] -= 1
            if missing[down] == 0:
                heapq.heappush(eligible, (key[down], position[down], down))


def justify(
    graph: TaskGraph,
    capacity: Mapping[str, int],
    start: Mapping[str, float],
    max_rounds: int = 4,
    table: TaskTable | None = None,
) -> tuple[dict[str, float], float]:
    """Improve a resource-feasible schedule (task -> start) by forward-backward passes.

    Returns the best schedule found and its makespan (never longer than the input's). Stops after
    ``max_rounds`` rounds or when a round does not shorten the schedule.
    """
    tasks = TaskTable.of(graph, table)
    dur = tasks.duration
    best = dict(start)
    best_makespan = max((best[t] + dur[t] for t in best), default=0.0)
    # by task number: the starts of the current schedule, its tasks in topological order
    ids, number, durations = list(tasks.number), tasks.number, tasks.durations
    current = [0.0] * len(durations)
    for task_id, begin in best.items():
        current[number[task_id]] = begin
    by_topo = tasks.topo_numbers
    if len(best) != len(by_topo):
        scheduled = set(map(number.__getitem__, best))
        by_topo = [i for i in by_topo if i in scheduled]
    by_topo_reversed = by_topo[::-1]
    for _round in range(max_rounds):
        # latest finish first, ties by the later topological position (stable sort of that order)
        latest_first = list(map(operator.neg, map(operator.add, current, durations)))
        backward_order = sorted(by_topo_reversed, key=latest_first.__getitem__)
        mirrored = _serial_by_number(tasks, capacity, backward_order, reverse=True)
        # latest mirrored finish first (the earliest start right-justified), ties by topological
        # position: no subtraction from the makespan, whose rounding put a task ahead of its 0-s
        # upstream task
        mirrored_finish = list(map(operator.neg, map(operator.add, mirrored, durations)))
        forward_order = sorted(by_topo, key=mirrored_finish.__getitem__)
        forward = _serial_by_number(tasks, capacity, forward_order, reverse=False)
        ends = map(
            operator.add, map(forward.__getitem__, forward_order), map(durations.__getitem__, forward_order)
        )
        new_makespan = max(ends, default=0.0)
        if new_makespan < best_makespan - 1e-9 * max(1.0, best_makespan):
            best = dict(
                zip(map(ids.__getitem__, forward_order), map(forward.__getitem__, forward_order), strict=True)
            )
            best_makespan = new_makespan
            current = forward
        else:
            break
    return best, best_makespan
