"""Priority rules: the number Airflow stores in ``priority_weight`` for each task.

All rules are pure functions ``TaskGraph -> {task_id: int}`` (Airflow's column is an int32; the
scheduler orders the SCHEDULED task instances of all DAGs by it, highest first):

* ``downstream``: Airflow's default ``weight_rule``: ``1 +`` the number of all downstream descendants
  (every ``priority_weight`` left at 1).
* ``critical_path``: the remaining critical-path length in whole seconds, own duration included
  (:class:`~airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy`).
* ``width_aware`` (needs the pool capacities): critical path where a wide task also pays for the
  drain it needs (:func:`width_aware_weights`).
* ``work`` (needs the pool capacities): slot-seconds a task and its descendants need, over the pool
  capacity (:func:`work_weights`).
* plan order (:func:`plan_order_weights`): the ranks that make Airflow follow a planned schedule.

The planned rule ``packing`` simulates these rules and keeps the best: it lives in
:mod:`airflow_gpu_dag.core.planning.planner`, which needs the simulator; this module does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from airflow_gpu_dag.core.analysis.critical_path import CriticalPathAnalysis, analyze
from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool, task_slots
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL, is_gpu_pool

__all__ = [
    "CAPACITY_RULES",
    "CROSS_DAG_RULE_CLASSES",
    "INT32_MAX",
    "INT32_MIN",
    "PRIORITY_RULES",
    "CapacityRule",
    "IncomparableRule",
    "PriorityRule",
    "RuleUse",
    "clamp_int32",
    "critical_path_weights",
    "descendant_counts",
    "downstream_weights",
    "incomparable_rules",
    "plan_order_weights",
    "resolve_priority",
    "width_aware_weights",
    "work_weights",
]

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

PriorityRule = Callable[[TaskGraph], Mapping[str, int]]
CapacityRule = Callable[[TaskGraph, Mapping[str, int]], Mapping[str, int]]


def clamp_int32(value: float) -> int:
    """Round to an int that fits Airflow's ``priority_weight`` column (an infinity to its bound; NaN
    raises ValueError)."""
    try:
        rounded = int(round(value))
    except OverflowError:  # inf (a priority rule's "always first"): int() cannot hold it
        return INT32_MAX if value > 0 else INT32_MIN
    return max(INT32_MIN, min(INT32_MAX, rounded))


def _descendant_bits(graph: TaskGraph, order: list[str]) -> dict[str, int]:
    """Bitset (Python int) of the descendants of every task, by topological index."""
    index = {t: i for i, t in enumerate(order)}
    bits: dict[str, int] = {}
    for task_id in reversed(order):
        acc = 0
        for down in graph.downstream(task_id):
            acc |= bits[down] | (1 << index[down])
        bits[task_id] = acc
    return bits


def downstream_weights(graph: TaskGraph) -> dict[str, int]:
    """Airflow's ``downstream`` weight rule: 1 + the number of all descendants."""
    order = graph.topological_order()
    bits = _descendant_bits(graph, order)
    return {t: clamp_int32(1 + bits[t].bit_count()) for t in order}


def descendant_counts(graph: TaskGraph, cap: int) -> dict[str, int]:
    """Per task, how many tasks are downstream of it (all descendants, as Airflow's ``downstream`` rule
    counts them less the task itself), counted up to ``cap``: ``min(descendants, cap)``.

    One pass in reverse topological order keeps, per task, the set of its descendants only while it has
    fewer than ``cap`` (a task with a child of ``cap`` or more has more itself): O(E x cap) at worst,
    however large the DAG, where the exact count is O(V x E)."""
    if cap <= 0:
        return {t: 0 for t in graph.nodes}
    below: dict[str, set[str] | None] = {}  # None: at least cap descendants
    counts: dict[str, int] = {}
    for task_id in reversed(graph.topological_order()):
        seen = _descendants_under(graph.downstream(task_id), below, cap)
        below[task_id] = seen
        counts[task_id] = cap if seen is None else len(seen)
    return counts


def _descendants_under(
    children: Iterable[str], below: Mapping[str, set[str] | None], cap: int
) -> set[str] | None:
    """The descendants of a task with these ``children`` (``below``: theirs), or None once they reach
    ``cap`` (a child already at the cap puts the task there too)."""
    seen: set[str] = set()
    for child in children:
        sub = below[child]
        if sub is None:
            return None
        seen.add(child)
        seen |= sub
        if len(seen) >= cap:
            return None
    return seen


def critical_path_weights(graph: TaskGraph, analysis: CriticalPathAnalysis | None = None) -> dict[str, int]:
    """Remaining critical-path length in whole seconds, own duration included (``analysis``: the
    graph's critical-path analysis when the caller has it already)."""
    analysis = analysis if analysis is not None else analyze(graph)
    return {t: clamp_int32(timing.remaining) for t, timing in analysis.timings.items()}


def width_aware_weights(graph: TaskGraph, capacity: Mapping[str, int]) -> dict[str, int]:
    """Critical path in which a wide task also pays for the drain it needs, in tenths of a second.

    A task holding ``w`` of a pool's ``C`` slots can only start once ``w`` slots are free at the same
    time; under greedy admission that happens when the narrow tasks around it drain. Its length in the
    path is ``duration + (w - 1) / (C - 1) * d_mean`` (``d_mean``: slot-weighted mean duration of the
    pool's tasks in this DAG), so chains through wide tasks are started before the pool fills up with
    long narrow work. With only 1-slot tasks this is the critical-path rule.
    """
    order = graph.topological_order()
    work: dict[str, float] = {}
    held: dict[str, int] = {}
    for node in graph.nodes.values():
        pool = task_pool(node)
        if pool in capacity:
            work[pool] = work.get(pool, 0.0) + node.duration * task_slots(node)
            held[pool] = held.get(pool, 0) + task_slots(node)
    mean = {p: work[p] / held[p] for p in work if held[p] > 0}
    length: dict[str, float] = {}
    for task_id in order:
        node = graph.nodes[task_id]
        pool, slots = task_pool(node), task_slots(node)
        extra = 0.0
        if pool in capacity and capacity[pool] > 1 and slots > 1:
            extra = (min(slots, capacity[pool]) - 1) / (capacity[pool] - 1) * mean.get(pool, 0.0)
        length[task_id] = node.duration + extra
    remaining: dict[str, float] = {}
    for task_id in reversed(order):
        tail = max((remaining[d] for d in graph.downstream(task_id)), default=0.0)
        remaining[task_id] = length[task_id] + tail
    return {t: clamp_int32(remaining[t] * 10) for t in order}


def work_weights(graph: TaskGraph, capacity: Mapping[str, int]) -> dict[str, int]:
    """Slot-seconds of the task and all its descendants over the pool capacity (tenths of a second):
    the time the pool needs for everything a task unlocks; favours tasks that open up a lot of work."""
    order = graph.topological_order()
    bits = _descendant_bits(graph, order)
    share: list[float] = []
    for task_id in order:
        node = graph.nodes[task_id]
        cap = capacity.get(task_pool(node))
        share.append(node.duration * task_slots(node) / cap if cap else 0.0)
    out: dict[str, int] = {}
    for i, task_id in enumerate(order):
        acc = share[i]
        b = bits[task_id]
        while b:
            low = b & -b
            acc += share[low.bit_length() - 1]
            b ^= low
        out[task_id] = clamp_int32(acc * 10)
    return out


PRIORITY_RULES: dict[str, PriorityRule] = {
    "downstream": downstream_weights,
    "critical_path": critical_path_weights,
}
#: rules that need the pool capacities: name -> f(graph, capacity)
CAPACITY_RULES: dict[str, CapacityRule] = {
    "width_aware": width_aware_weights,
    "work": work_weights,
}


def resolve_priority(rule: str | PriorityRule, capacity: Mapping[str, int] | None = None) -> PriorityRule:
    """Look a rule up by name or pass a callable ``graph -> {task_id: weight}`` through.

    Names: ``downstream``, ``critical_path``, and (given ``capacity``) ``width_aware``, ``work``. The
    planned rule ``packing`` needs the simulator: :func:`airflow_gpu_dag.core.planning.planner.resolve_rule`
    resolves every name, ``packing`` included.
    """
    if callable(rule):
        return rule
    if not isinstance(rule, str):
        raise ValueError(
            f"unknown priority rule {rule!r}: give a rule's name (a string) or a callable graph -> weights"
        )
    if rule == "packing":
        raise ValueError(
            "priority rule 'packing' is planned with the simulator: resolve it with "
            "airflow_gpu_dag.core.planning.planner.resolve_rule"
        )
    if rule in PRIORITY_RULES:
        return PRIORITY_RULES[rule]
    if rule in CAPACITY_RULES:
        if capacity is None:
            raise ValueError(f"priority rule {rule!r} needs the pool capacities")
        func = CAPACITY_RULES[rule]
        caps = dict(capacity)

        def bound(graph: TaskGraph) -> Mapping[str, int]:
            return func(graph, caps)

        bound.__name__ = rule
        return bound
    names = ", ".join(sorted([*PRIORITY_RULES, *CAPACITY_RULES]))
    raise ValueError(
        f"unknown priority rule {rule!r}; use one of {names}, a callable graph -> weights, or 'packing' "
        "through airflow_gpu_dag.core.planning.planner.resolve_rule"
    )


def plan_order_weights(graph: TaskGraph, start: Mapping[str, float]) -> dict[str, int]:
    """Weights that make Airflow follow a planned schedule: a task that starts earlier in the plan has
    a higher weight (``n`` for the first, ``1`` for the last; ties by graph order)."""
    topo = {t: i for i, t in enumerate(graph.topological_order())}
    ordered = sorted(start, key=lambda t: (start[t], topo[t]))
    count = len(ordered)
    return {t: count - i for i, t in enumerate(ordered)}


# -- which DAGs' weights compare ----------------------------------------------------------------------------
#: The class names of the weight rules whose weights are cross-DAG keys, comparable across DAGs (the
#: strategies of :mod:`airflow_gpu_dag.priority_strategy`); every other rule's weights are not.
CROSS_DAG_RULE_CLASSES = ("CriticalPathPriorityStrategy", "PackingPriorityStrategy")


@dataclass(frozen=True)
class RuleUse:
    """A DAG's tasks on one weight rule in one pool: ``rule`` as the DAG names it, ``cross_dag`` when its
    weights are cross-DAG keys, ``gpu`` when one of those tasks asks for GPUs."""

    dag_id: str
    pool: str
    rule: str
    cross_dag: bool
    gpu: bool = False


@dataclass(frozen=True)
class IncomparableRule:
    """A DAG whose tasks run on a weight rule that is not cross-DAG (``rules``) in GPU ``pools`` that DAGs
    on a cross-DAG rule (``shared_with``) also use: the scheduler orders the tasks of every DAG in one
    pool by their weights, and a stock weight (a small count of tasks) always sorts after the cross-DAG
    keys, so its tasks wait behind theirs whatever their size or how long they waited."""

    dag_id: str
    rules: tuple[str, ...]
    pools: tuple[str, ...]
    shared_with: tuple[str, ...]

    def describe(self) -> str:
        """One sentence naming the DAG, its rules, the pools and the DAGs it shares them with."""
        shown = ", ".join(repr(d) for d in self.shared_with[:5])
        more = f" and {len(self.shared_with) - 5} more" if len(self.shared_with) > 5 else ""
        return (
            f"DAG {self.dag_id!r} uses weight rule {', '.join(map(repr, self.rules))} in GPU pool(s) "
            f"{', '.join(self.pools)}, which DAG(s) {shown}{more} use with cross-DAG keys: its weights "
            "cannot be compared with theirs (they always sort after them), so its tasks there wait behind "
            "theirs whatever their size or how long they waited."
        )


def incomparable_rules(uses: Iterable[RuleUse]) -> list[IncomparableRule]:
    """Every DAG with tasks on a weight rule that is not cross-DAG in a GPU pool where another DAG's tasks
    use a cross-DAG rule, sorted by DAG id. A GPU pool: one of the provider's names (``gpu_<type>``) or
    one a task asks GPUs in; never ``default_pool`` (it counts tasks, and every DAG uses it)."""
    uses = list(uses)
    gpu_pools = {u.pool for u in uses if u.gpu or is_gpu_pool(u.pool)} - {DEFAULT_POOL}
    keyed: dict[str, set[str]] = {}
    for use in uses:
        if use.cross_dag and use.pool in gpu_pools:
            keyed.setdefault(use.pool, set()).add(use.dag_id)
    found: dict[str, tuple[set[str], set[str], set[str]]] = {}
    for use in uses:
        others = keyed.get(use.pool, set()) - {use.dag_id}
        if use.cross_dag or not others:
            continue
        rules, pools, shared = found.setdefault(use.dag_id, (set(), set(), set()))
        rules.add(use.rule)
        pools.add(use.pool)
        shared.update(others)
    return [
        IncomparableRule(dag_id, tuple(sorted(rules)), tuple(sorted(pools)), tuple(sorted(shared)))
        for dag_id, (rules, pools, shared) in sorted(found.items())
    ]
