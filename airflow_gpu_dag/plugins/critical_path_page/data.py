"""What the critical-path page shows, computed from the api-server's database session: the DAG's
plan (from its serialized version, the one the scheduler runs), the live GPU pools, and predicted
schedules on those pools. No Airflow web objects here, so it is testable with plain objects."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_gpu_dag.core.analysis.weight_rules import CROSS_DAG_RULE_CLASSES, RuleUse, incomparable_rules
from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool
from airflow_gpu_dag.core.model.ladders import unfit_rungs
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL, is_gpu_pool
from airflow_gpu_dag.core.planning.plan import Plan, build_plan
from airflow_gpu_dag.core.planning.planner import predict

__all__ = [
    "PoolView",
    "ScheduleView",
    "parse_pool_description",
    "pool_views",
    "predicted_schedules",
    "rule_uses_of_serialized",
    "too_large_of",
    "weight_rule_notes",
]

_CONTROLLER_PREFIX = "gpu-dag watermark:"
_CAPACITY = re.compile(r"of capacity (\d+)")
_RESERVING = re.compile(r"reserving (\d+) slots for (.+?): -?\d+ of \d+ free")
_TOO_LARGE = re.compile(r"too large: (.+?)(?: \| | \[gpu-dag-state |$)")


def parse_pool_description(description: str | None) -> tuple[int | None, int, str | None]:
    """``(capacity, reserved_slots, reserved_for)`` from a description written by the watermark
    controller (``gpu-dag watermark: pool 6 of capacity 8 | ... | reserving 4 slots for dag/task: ...``);
    ``(None, 0, None)`` for any other description."""
    if description is None or not _by_the_controller(description):  # a person's text may say it too
        return None, 0, None
    capacity_match = _CAPACITY.search(description)
    capacity = int(capacity_match.group(1)) if capacity_match else None
    reserving = _RESERVING.search(description)
    if reserving:
        return capacity, int(reserving.group(1)), reserving.group(2)
    return capacity, 0, None


def too_large_of(description: str | None) -> str | None:
    """The waiting tasks the watermark controller found larger than the pool (``too large: ...``)."""
    match = _TOO_LARGE.search(description or "") if _by_the_controller(description) else None
    return match.group(1) if match else None


def _by_the_controller(description: str | None) -> bool:
    """True for a description the watermark controller wrote (it starts with its prefix)."""
    return bool(description) and str(description).startswith(_CONTROLLER_PREFIX)


@dataclass(frozen=True)
class PoolView:
    """One pool as the page shows it. ``slots`` is the pool size the watermark controller set
    (the watermark); ``capacity`` the live capacity it measured (None when the pool is not managed)."""

    name: str
    slots: int
    used: int
    running: int
    queued: int
    open: int
    capacity: int | None
    reserved: int
    reserved_for: str | None
    description: str
    used_by_dag: bool
    too_large: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pool_views(
    stats: Mapping[str, Mapping[str, Any]],
    descriptions: Mapping[str, str | None],
    dag_pools: Iterable[str] = (),
) -> list[PoolView]:
    """Pools from ``Pool.slots_stats()`` and their descriptions; the DAG's pools first."""
    mine = set(dag_pools)
    views = []
    for name, stat in stats.items():
        total = stat.get("total", 0)
        slots = -1 if total == float("inf") else int(total)
        running = int(stat.get("running", 0))
        queued = int(stat.get("queued", 0))
        open_slots = stat.get("open", 0)
        capacity, reserved, reserved_for = parse_pool_description(descriptions.get(name))
        views.append(
            PoolView(
                name=name,
                slots=slots,
                used=running + queued,
                running=running,
                queued=queued,
                # -1 means unlimited; a pool shrunk below its used slots has none open (Airflow: < 0)
                open=-1 if open_slots == float("inf") else max(0, int(open_slots)),
                capacity=capacity,
                reserved=reserved,
                reserved_for=reserved_for,
                description=descriptions.get(name) or "",
                used_by_dag=name in mine,
                too_large=too_large_of(descriptions.get(name)),
            )
        )
    return sorted(views, key=lambda v: (not v.used_by_dag, v.name))


@dataclass
class ScheduleView:
    """Predicted schedules for the page: per policy label, a simulator result; or why there is none."""

    capacity: dict[str, int] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    #: Fallback rungs too large for the live pools, planned as waiting their start_within (then the
    #: next rung): :meth:`airflow_gpu_dag.core.model.ladders.UnfitRung.describe` of each.
    unfit_rungs: list[str] = field(default_factory=list)


def predicted_schedules(graph: TaskGraph, pools: Iterable[PoolView]) -> ScheduleView:
    """Simulate the DAG under stock admission and under reservation on the live pool capacities
    (the measured capacity when the watermark controller manages the pool, else its size)."""
    pools = list(pools)
    used = {task_pool(node) for node in graph.nodes.values()}
    capacity = {
        p.name: (p.capacity if p.capacity is not None else p.slots)
        for p in pools
        if p.name in used and p.slots >= 0
    }
    view = ScheduleView(capacity=capacity)
    # GPU tasks: a GPU request, or slots of a GPU pool (the plan counts those slots as GPUs)
    gpu_pools = {task_pool(n) for n in graph.nodes.values() if n.gpu is not None or is_gpu_pool(n.pool)}
    missing = sorted(gpu_pools - {p.name for p in pools})
    if missing:  # Airflow never runs a task in a pool that does not exist: no makespan to predict
        view.note = (
            f"No simulation: pool(s) {', '.join(missing)} do not exist, so their tasks would never run. "
            "Create them (airflow pools set NAME SLOTS ...) or start the watermark controller."
        )
        return view
    try:
        view.results["stock"] = predict(graph, capacity, policy="stock")
        view.results["reservation"] = predict(graph, capacity, policy="reservation")
    except ValueError as err:  # CapacityError: a request no pool can hold
        view.results.clear()
        view.note = f"No simulation: {err}"
        return view
    view.unfit_rungs = [rung.describe() for rung in unfit_rungs(graph, capacity)]
    return view


def plan_of(graph: TaskGraph, findings: Iterable[Any] = ()) -> Plan:
    """The plan of a graph (a cycle has already been refused at parse time)."""
    return build_plan(graph, findings)


def _plain(value: Any) -> Any:
    """A value of a serialized DAG's JSON without its ``{"__var": ..., "__type": ...}`` wrappers."""
    while isinstance(value, Mapping) and "__var" in value:
        value = value["__var"]
    return value


def rule_uses_of_serialized(dag_id: str, data: Mapping[str, Any] | None) -> list[RuleUse]:
    """The weight rules of a DAG's tasks per pool, read from its serialized JSON (``SerializedDagModel.data``)
    without deserializing it: the page reads every DAG its user may read, on each view. A value Airflow
    left out is its default (``default_pool``, ``downstream``); a mapped task's are in its partial
    arguments."""
    dag = _plain((data or {}).get("dag")) or {}
    uses: dict[tuple[str, str], RuleUse] = {}
    for entry in dag.get("tasks") or ():
        task = _plain(entry)
        if not isinstance(task, Mapping):
            continue
        partial = _plain(task.get("partial_kwargs")) or {}
        pool = str(task.get("pool") or partial.get("pool") or DEFAULT_POOL)
        rule = str(_plain(task.get("weight_rule") or partial.get("weight_rule")) or "downstream")
        hints = _plain(
            (_plain(task.get("executor_config") or partial.get("executor_config")) or {}).get("gpu_dag")
        )
        gpu = isinstance(hints, Mapping) and hints.get("gpus") is not None
        before = uses.get((pool, rule))
        uses[(pool, rule)] = RuleUse(
            dag_id, pool, rule, rule.endswith(CROSS_DAG_RULE_CLASSES), gpu or bool(before and before.gpu)
        )
    return list(uses.values())


def weight_rule_notes(dag_id: str, uses: Iterable[RuleUse]) -> list[str]:
    """Sentences naming the DAGs whose weights cannot be compared with those of the DAGs they share GPU
    pools with (:func:`~airflow_gpu_dag.core.analysis.weight_rules.incomparable_rules`): ``dag_id`` itself,
    or the DAGs that share its pools on another rule."""
    return [
        found.describe()
        for found in incomparable_rules(uses)
        if found.dag_id == dag_id or dag_id in found.shared_with
    ]
