"""Fallback ladders next to capacity: a rung too large for its pool is not a task that waits forever.

A fallback ladder (:func:`airflow_gpu_dag.authoring.fallback_ladder`) runs its first rung, and when that
rung has not *started* within its ``start_within`` its watcher skips it and the next rung runs. A rung
needing more GPUs than its pool, the largest host or the inventory can ever give is therefore not an
error as long as a later rung can take over: every run waits that rung's ``start_within`` and falls
back. That is a warning (drop the rung or grow the pool), and

- :func:`as_rung_findings` turns the "can never run" findings of such a rung into warnings (parse
  time, ``lint``);
- :func:`can_fall_back` says whether a rung (its ``fallback`` hints, as the graph and the task instance
  carry them) is such a rung: not the last one, and watched or given a ``start_within``;
- :func:`fit_ladders` re-plans a graph for given pool capacities: a ladder whose assumed rung does not
  fit assumes the first later rung that does; the rungs before it only wait (their ``start_within``,
  holding no GPU), the rungs after it count 0, as :func:`airflow_gpu_dag.airflow.dag_reader` plans a ladder
  whose author chose ``plan_rung``. :func:`unfit_rungs` says which rungs were passed over and why.

Pure: no Airflow.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from airflow_gpu_dag.core.model.findings import WARNING, Finding
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode, task_pool, task_slots

__all__ = [
    "UnfitRung",
    "as_rung_findings",
    "can_fall_back",
    "fit_ladders",
    "fitted_once",
    "never_runs",
    "unfit_rungs",
]

#: The request findings (:func:`airflow_gpu_dag.core.analysis.gpu_requests.check_gpu_request`) a rung that
#: can fall
#: back turns into warnings: it never starts, but its ladder moves on.
_NEVER_STARTS = frozenset({"impossible-request", "unknown-gpu-type"})


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def can_fall_back(fallback: object) -> bool:
    """Whether a rung with these ``fallback`` hints hands over to the next rung when it cannot start:
    it is not the last rung, and a watcher skips it (``watched``; hints written before that field:
    a ``start_within``)."""
    if not isinstance(fallback, Mapping):
        return False
    index, rungs = _int(fallback.get("index")), _int(fallback.get("rungs"))
    if index is None or rungs is None or index >= rungs - 1:
        return False
    watched = fallback.get("watched")
    if isinstance(watched, bool):
        return watched
    return fallback.get("start_within_s") is not None


def never_runs(finding: Finding) -> str:
    """What a request finding says the task can never get, without its "(it would wait forever)"."""
    return finding.message.replace(" (it would wait forever)", "")


def as_rung_findings(findings: Iterable[Finding], fallback: object) -> list[Finding]:
    """``findings`` of a task's GPU request, with those that say it can never start as warnings when
    the task is a rung that can fall back (:func:`can_fall_back`): each run waits its ``start_within``
    and the ladder runs the next rung; the fix is to drop the rung or grow the pool."""
    found = list(findings)
    if not can_fall_back(fallback):
        return found
    assert isinstance(fallback, Mapping)
    wait = fallback.get("start_within_s")
    within = f" ({wait:.0f}s)" if isinstance(wait, int | float) and not isinstance(wait, bool) else ""
    place = (
        f"As rung {(_int(fallback.get('index')) or 0) + 1} of {fallback.get('rungs')} of fallback ladder "
        f"{fallback.get('ladder')!r} it never starts but does not wait forever: every run waits its "
        f"start_within{within}, then the ladder runs the next rung."
    )
    return [
        replace(
            f,
            severity=WARNING,
            code="rung-never-starts",
            message=f"{never_runs(f)} {place}",
            fix=f"drop the rung, or {f.fix}",
        )
        if f.is_error and f.code in _NEVER_STARTS
        else f
        for f in found
    ]


@dataclass(frozen=True)
class UnfitRung:
    """A rung passed over by :func:`fit_ladders`: it needs ``slots`` of ``pool``, which has ``capacity``."""

    dag_id: str
    ladder: str
    task_id: str
    slots: int
    pool: str
    capacity: int
    start_within: float
    assumed: str

    def describe(self) -> str:
        return (
            f"fallback ladder {self.ladder}: {self.task_id} needs {self.slots} slots of pool {self.pool!r} "
            f"(capacity {self.capacity}), so it never starts: simulated as waiting its start_within "
            f"({self.start_within:.0f}s), then {self.assumed} runs"
        )


def _fb(node: TaskNode) -> Mapping[str, Any]:
    """The node's ``fallback`` attrs (empty when it is no rung)."""
    fallback = node.attrs.get("fallback")
    return fallback if isinstance(fallback, Mapping) else {}


def _ladders(graph: TaskGraph) -> dict[str, list[TaskNode]]:
    """Each ladder's rungs in ladder order (nodes whose ``attrs["fallback"]`` names a ladder)."""
    found: dict[str, list[TaskNode]] = {}
    for node in graph.nodes.values():
        fallback = node.attrs.get("fallback")
        if isinstance(fallback, Mapping) and _int(fallback.get("index")) is not None:
            found.setdefault(str(fallback.get("ladder")), []).append(node)
    for rungs in found.values():
        rungs.sort(key=lambda n: _int(_fb(n).get("index")) or 0)
    return found


def _fits(node: TaskNode, capacity: Mapping[str, int]) -> bool:
    pool = task_pool(node)
    return pool not in capacity or task_slots(node) <= capacity[pool]


def _choice(rungs: list[TaskNode], capacity: Mapping[str, int]) -> int | None:
    """The index (in ``rungs``) the plan should assume, or None when the ladder needs no change: its
    assumed rung fits, or no rung after it both fits and can be reached (every rung passed over falls
    back)."""
    roles = [_fb(n).get("role") for n in rungs]
    if "assumed" not in roles:
        return None
    assumed = roles.index("assumed")
    if _fits(rungs[assumed], capacity):
        return None
    for index in range(assumed, len(rungs)):
        if _fits(rungs[index], capacity):
            return index
        if not can_fall_back(_fb(rungs[index])):
            return None
    return None


def _planned(node: TaskNode, role: str) -> TaskNode:
    fallback = dict(_fb(node))
    attrs = dict(node.attrs)
    raw: Any = attrs.get("contingent_duration", fallback.get("expected_duration") or node.duration)
    expected = float(raw)
    fallback["role"] = role
    attrs["fallback"] = fallback
    if role == "fell back":  # it waited in its pool's queue, holding nothing, then was skipped
        wait = float(fallback.get("start_within_s") or 0.0)
        return replace(node, duration=wait, gpu=None, pool=None, pool_slots=1, attrs=attrs)
    if role == "assumed":  # a later rung than planned (the one planned never fits): it runs
        attrs.pop("contingent_duration", None)
        return replace(node, duration=expected, attrs=attrs)
    # contingent: the decision skips it when the assumed rung runs, so it never enters its pool
    attrs["contingent_duration"] = expected
    return replace(node, duration=0.0, gpu=None, pool=None, pool_slots=1, attrs=attrs)


def unfit_rungs(graph: TaskGraph, capacity: Mapping[str, int]) -> list[UnfitRung]:
    """The rungs :func:`fit_ladders` passes over for ``capacity``, in ladder order."""
    found = []
    for ladder, rungs in _ladders(graph).items():
        chosen = _choice(rungs, capacity)
        if chosen is None:
            continue
        for node in rungs[:chosen]:
            if _fits(node, capacity):
                continue
            pool = task_pool(node)
            found.append(
                UnfitRung(
                    graph.dag_id,
                    ladder,
                    node.task_id,
                    task_slots(node),
                    pool,
                    capacity[pool],
                    float(_fb(node).get("start_within_s") or 0.0),
                    rungs[chosen].task_id,
                )
            )
    return found


def fit_ladders(graph: TaskGraph, capacity: Mapping[str, int]) -> TaskGraph:
    """``graph`` planned for pools of ``capacity``: in a ladder whose assumed rung needs more slots than
    its pool has, the first later rung that fits is assumed (see the module docstring), and in every
    ladder the rungs that do not run hold no pool slots (one that fell back only waited; the others are
    skipped). The same graph when nothing changes; the input is never modified."""
    changed: dict[str, TaskNode] = {}
    for rungs in _ladders(graph).values():
        chosen = _choice(rungs, capacity)
        if chosen is not None:
            for index, node in enumerate(rungs):
                role = "fell back" if index < chosen else ("assumed" if index == chosen else "contingent")
                changed[node.task_id] = _planned(node, role)
            continue
        for node in rungs:  # as planned; a rung that does not run holds no slots
            role = str(_fb(node).get("role"))
            if role in ("fell back", "contingent") and (node.gpu is not None or node.pool is not None):
                changed[node.task_id] = _planned(node, role)
    return graph.with_nodes(changed)


_FITTED: weakref.WeakKeyDictionary[TaskGraph, dict[tuple, TaskGraph]] = weakref.WeakKeyDictionary()


def fitted_once(graph: TaskGraph, capacity: Mapping[str, int]) -> TaskGraph:
    """:func:`fit_ladders`, made once per graph object and capacity (do not change a graph after
    planning it): the planner's caches are keyed by graph object, and a changed ladder is a new copy."""
    key = tuple(sorted((pool, int(slots)) for pool, slots in capacity.items()))
    per_graph = _FITTED.setdefault(graph, {})
    if key not in per_graph:
        per_graph[key] = fit_ladders(graph, dict(key))
    return per_graph[key]
