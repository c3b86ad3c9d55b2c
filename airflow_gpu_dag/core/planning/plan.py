"""The plan of a DAG: what the critical-path method says about every task, before anything runs.

One :class:`Plan` feeds both the ``airflow gpu-dag plan`` command and the critical-path page in the
Airflow UI, so the two always agree. Per task: earliest/latest start and finish (ES/EF/LS/LF),
slack, critical-path priority (the weight :class:`~airflow_gpu_dag.priority_strategy.
CriticalPathPriorityStrategy` gives it), the GPU request and GPU-hours; for the DAG: the critical
path, the makespan with unlimited GPUs and the total GPU-hours.

Pure: an Airflow DAG is read into a :class:`~airflow_gpu_dag.core.model.graph.TaskGraph` by
:func:`airflow_gpu_dag.airflow.dag_reader.plan_dag`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.analysis.validation import Finding
from airflow_gpu_dag.core.analysis.weight_rules import critical_path_weights
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.model.pools import is_gpu_pool
from airflow_gpu_dag.core.model.resources import format_duration

__all__ = ["Plan", "TaskPlan", "build_plan"]


def _gpus_of(node: TaskNode) -> int:
    """GPUs a task holds: its declared request, else its slots when it sits in a GPU pool."""
    if node.gpu is not None:
        return node.gpu.count
    if is_gpu_pool(node.pool):
        return node.pool_slots
    return 0


@dataclass(frozen=True)
class TaskPlan:
    """Everything the plan says about one task; times in seconds from the start of the run.

    ``layer`` is the length (in edges) of the longest chain of upstream tasks: the column of the
    task in a left-to-right layered drawing of the graph. ``not_before``: the task cannot start
    earlier (its start window opens then). ``duration`` is what the plan counts; ``expected_duration``
    the task's own estimate: they differ for the rungs of a fallback ladder, which ``fallback``
    describes (``ladder``, ``rung``, ``role``: ``assumed`` / ``fell back`` / ``contingent``,
    ``assumed_rung``).
    """

    task_id: str
    duration: float
    earliest_start: float
    earliest_finish: float
    latest_start: float
    latest_finish: float
    slack: float
    priority: int
    critical: bool
    gpus: int
    gpu: str
    pool: str | None
    pool_slots: int
    gpu_hours: float
    duration_declared: bool
    layer: int
    upstream: tuple[str, ...] = ()
    not_before: float = 0.0
    expected_duration: float | None = None
    fallback: dict[str, Any] | None = None

    @property
    def note(self) -> str:
        """What the plan assumes about this task, in words (empty when nothing special)."""
        notes = []
        if self.not_before > 0:
            notes.append(f"start window opens at +{format_duration(self.not_before)}")
        fb = self.fallback
        if fb:
            expected = format_duration(float(fb.get("expected_duration") or 0.0))
            of = f" {int(fb.get('index', 0)) + 1} of {fb['rungs']}" if fb.get("rungs") else ""
            if fb.get("role") == "assumed":
                notes.append(
                    f"fallback ladder {fb.get('ladder')}: the plan assumes this rung{of} ({expected})"
                )
            elif fb.get("role") == "fell back":
                notes.append(
                    f"fallback ladder {fb.get('ladder')}: rung{of} expected {expected}; the plan assumes "
                    f"{fb.get('assumed_rung')}, so this rung only waits "
                    f"{format_duration(self.duration)} to start"
                )
            else:
                notes.append(
                    f"fallback ladder {fb.get('ladder')}: rung{of} expected {expected}, counted 0: it runs "
                    f"only if {fb.get('assumed_rung')} (assumed) does not start in time"
                )
        return "; ".join(notes)


@dataclass(frozen=True)
class Plan:
    """The plan of one DAG (tasks in topological order)."""

    dag_id: str
    tasks: list[TaskPlan]
    edges: list[tuple[str, str]]
    makespan: float
    critical_path: list[str]
    total_gpu_hours: float
    findings: list[Finding] = field(default_factory=list)
    #: the priority policy the ``priority`` column and the predicted schedules assume (set by the caller)
    policy: str = ""

    @property
    def critical_tasks(self) -> list[str]:
        """Every zero-slack task (may span several parallel critical chains)."""
        return [t.task_id for t in self.tasks if t.critical]

    @property
    def layers(self) -> int:
        """Number of columns of the layered drawing."""
        return 1 + max((t.layer for t in self.tasks), default=-1)

    def task(self, task_id: str) -> TaskPlan:
        """The plan of one task; ``KeyError`` naming the DAG when unknown."""
        for task in self.tasks:
            if task.task_id == task_id:
                return task
        raise KeyError(f"DAG {self.dag_id!r} has no task {task_id!r}")

    def to_dict(self, graph: TaskGraph | None = None) -> dict[str, Any]:
        """JSON-ready form (used by ``--output json`` and the UI's data endpoint). With the planned
        ``graph``, each task also says where its duration comes from (``duration_source``,
        ``declared_duration``) and which mapped task it is an instance of (``map_of``, ``map_index``)."""
        data: dict[str, Any] = {
            "dag_id": self.dag_id,
            "makespan": self.makespan,
            "critical_path": list(self.critical_path),
            "critical_tasks": self.critical_tasks,
            "total_gpu_hours": self.total_gpu_hours,
            "tasks": [{**asdict(t), "upstream": list(t.upstream), "note": t.note} for t in self.tasks],
            "edges": [list(e) for e in self.edges],
            "findings": [f.to_dict() for f in self.findings],
            "policy": self.policy,
        }
        for task in data["tasks"]:
            attrs = graph.nodes[task["task_id"]].attrs if graph is not None else None
            if attrs is not None:
                task["duration_source"] = attrs.get("duration_source")
                task["declared_duration"] = attrs.get("declared_duration")
                task.update({key: attrs[key] for key in ("map_of", "map_index") if key in attrs})
        return data


def _fallback(node: TaskNode) -> dict[str, Any] | None:
    value = node.attrs.get("fallback")
    return dict(value) if isinstance(value, dict) else None


def _expected_duration(node: TaskNode) -> float:
    """The task's own estimate (a fallback rung's, even when the plan counts less)."""
    fallback = _fallback(node)
    if fallback and isinstance(fallback.get("expected_duration"), (int, float)):
        return float(fallback["expected_duration"])
    return node.duration


def build_plan(graph: TaskGraph, findings: Iterable[Finding] = ()) -> Plan:
    """Plan ``graph``: one CPM pass, O(V + E).

    :raises airflow_gpu_dag.core.model.graph.CycleError: the graph has a cycle (named in the message).
    """
    analysis = analyze(graph)
    weights = critical_path_weights(graph, analysis)  # what the critical-path strategy stores
    layer: dict[str, int] = {}
    tasks: list[TaskPlan] = []
    total_gpu_seconds = 0.0
    for task_id in analysis.order:
        node = graph.nodes[task_id]
        timing = analysis.timings[task_id]
        upstream = tuple(graph.upstream(task_id))
        layer[task_id] = max((layer[u] + 1 for u in upstream), default=0)
        gpus = _gpus_of(node)
        fallback = _fallback(node)
        held = 0.0 if fallback and fallback.get("role") == "fell back" else node.duration  # it only waited
        total_gpu_seconds += gpus * held
        tasks.append(
            TaskPlan(
                task_id=task_id,
                duration=node.duration,
                earliest_start=timing.earliest_start,
                earliest_finish=timing.earliest_finish,
                latest_start=timing.latest_start,
                latest_finish=timing.latest_finish,
                slack=timing.slack,
                priority=weights[task_id],
                critical=timing.critical,
                gpus=gpus,
                gpu=node.gpu.describe() if node.gpu else (f"{gpus} slot(s)" if gpus else "-"),
                pool=node.pool,
                pool_slots=node.pool_slots,
                gpu_hours=gpus * held / 3600.0,
                duration_declared=node.duration_declared,
                layer=layer[task_id],
                upstream=upstream,
                not_before=node.not_before,
                expected_duration=_expected_duration(node),
                fallback=fallback,
            )
        )
    return Plan(
        dag_id=graph.dag_id,
        tasks=tasks,
        edges=[(up, down) for up, down, _ in graph.edges()],
        makespan=analysis.makespan,
        critical_path=list(analysis.critical_path),
        total_gpu_hours=total_gpu_seconds / 3600.0,
        findings=list(findings),
    )
