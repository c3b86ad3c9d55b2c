"""Read an Airflow DAG (authoring ``airflow.sdk.DAG`` or the scheduler's ``SerializedDAG``) into a
:class:`~airflow_gpu_dag.core.model.graph.TaskGraph`.

Only attributes that survive serialization are read: ``task_dict``, ``downstream_task_ids``,
``pool``, ``pool_slots``, ``retries`` and the provider's hints in ``executor_config``. So the same
graph is built in the dag-processor, the scheduler, the api-server and the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from airflow_gpu_dag.airflow.mapped import expand_dag_graph, map_length_findings
from airflow_gpu_dag.core.analysis.validation import ERROR, Finding
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL
from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest, parse_estimate
from airflow_gpu_dag.core.model.windows import seconds_until_open, window_from_hint
from airflow_gpu_dag.core.planning.plan import Plan, build_plan
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.settings import default_duration_seconds

__all__ = ["build_task_graph", "plan_dag", "priority_rule_of", "windows_from"]

#: Our weight-rule classes and the simulator's name for the rule each applies.
_RULES = {"CriticalPathPriorityStrategy": "critical_path", "PackingPriorityStrategy": "packing"}


def priority_rule_of(dag: Any) -> str | None:
    """``"critical_path"`` or ``"packing"`` when the DAG's tasks use that provider weight rule (the
    rule most of them use), else None (a stock Airflow rule). Works on SDK and serialized DAGs: the
    rule is a class-path string on the former and a strategy instance on the latter."""
    counts: dict[str | None, int] = {}
    for task in dag.task_dict.values():
        rule = getattr(task, "weight_rule", None)
        name = rule if isinstance(rule, str) else type(rule).__name__
        key = next((v for k, v in _RULES.items() if str(name).endswith(k)), None)
        counts[key] = counts.get(key, 0) + 1
    return max(counts, key=lambda k: (counts[k], k is not None)) if counts else None


def build_task_graph(
    dag: Any,
    default_duration: float | None = None,
    run_start: datetime | None = None,
    *,
    expand_mapped: bool = False,
    map_counts: Mapping[str, int] | None = None,
) -> tuple[TaskGraph, list[Finding]]:
    """Return the task graph of ``dag`` and the findings made while reading it.

    A task without a duration estimate gets ``default_duration`` (``[gpu_dag] default_duration``
    when None) and is marked undeclared; a malformed estimate or GPU request becomes an error
    finding naming the task, and the task is given the default so planning can go on. A task with a
    start window gets ``not_before`` = seconds from ``run_start`` (default: now) until its window
    opens. The rungs of a fallback ladder are planned as the ladder assumes (:func:`_plan_rungs`).

    With ``expand_mapped``, a mapped task whose number of instances N is known (literal ``expand()``
    arguments, ``map_counts`` from past runs, or ``gpu_hints(map_length=N)``) becomes N nodes
    ``task_id[i]`` (see :mod:`airflow_gpu_dag.airflow.mapped`); otherwise every task is one node.
    """
    if default_duration is None:
        default_duration = default_duration_seconds()
    start = run_start if run_start is not None else datetime.now(UTC)
    dag_id = str(dag.dag_id)
    graph = TaskGraph(dag_id, priority_rule=priority_rule_of(dag))
    findings: list[Finding] = []
    tasks = dag.task_dict
    for task_id, task in tasks.items():
        graph.add_task(_read_node(dag_id, task_id, task, default_duration, findings, start))
    for task_id, task in tasks.items():
        for down in sorted(getattr(task, "downstream_task_ids", ()) or ()):
            if down in tasks:
                graph.add_edge(task_id, down, _edge_kind(dag, task_id, down))
    findings.extend(map_length_findings(dag_id, tasks))
    if expand_mapped:
        graph = expand_dag_graph(dag, graph, map_counts)
    return graph, findings


def _group_prefixes(task_id: str) -> list[str]:
    """Enclosing task-group ids of a (group-prefixed) task id, innermost first: a.b.c -> a.b, a."""
    parts = task_id.split(".")[:-1]
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _group_ids(dag: Any, task_id: str) -> list[str]:
    """Enclosing task-group ids of a task, innermost first: its ``task_group`` chain (a group made with
    ``prefix_group_id=False`` does not prefix its tasks' ids), then the prefixes of its id."""
    ids: list[str] = []
    group = getattr(dag.task_dict.get(task_id), "task_group", None)
    try:
        while group is not None and getattr(group, "group_id", None):
            ids.append(str(group.group_id))
            group = getattr(group, "parent_group", None)
    except ReferenceError:  # a weak proxy to a group that is gone: the id's prefixes still count
        pass
    return ids + [g for g in _group_prefixes(task_id) if g not in ids]


def _edge_kind(dag: Any, upstream: str, downstream: str) -> str | None:
    """Edge kind from an edge label (``Label("data")``) if the DAG has one. A label on an edge that
    leaves a task group is stored on the group's ``downstream_join_id`` (one entering it on the
    ``upstream_join_id``), so those keys are looked at too."""
    edge_info = getattr(dag, "edge_info", None) or {}
    sources = [upstream, *(f"{g}.downstream_join_id" for g in _group_ids(dag, upstream))]
    targets = [downstream, *(f"{g}.upstream_join_id" for g in _group_ids(dag, downstream))]
    for source in sources:
        for target in targets:
            label = (edge_info.get(source) or {}).get(target, {}).get("label")
            if label:
                return str(label)
    return None


def _plan_rungs(
    hints: dict[str, Any], duration: float, attrs: dict[str, object], index: int, start_within: float | None
) -> float:
    """The planned duration of a fallback rung (``index``: its place in the ladder, from
    :func:`_fallback_index`; ``start_within``: its checked wait, from :func:`_start_within`); its
    expected duration and role go to ``attrs``.

    The ladder's hints say which rung the plan assumes (``plan_rung``, the first unless the author
    chose another). That rung counts its own estimate; a rung before it counts its ``start_within``
    (it waited that long, did not start, and the ladder fell back); a rung after it counts 0 (it
    runs only if the assumed rung could not start).
    """
    fallback = hints.get("fallback")
    if not isinstance(fallback, dict):
        return duration
    raw = fallback.get("assumed_index", 0) or 0
    assumed = raw if isinstance(raw, int) and not isinstance(raw, bool) else 0
    role = "assumed" if index == assumed else ("fell back" if index < assumed else "contingent")
    planned = duration
    if role == "fell back":
        planned = start_within or 0.0
    elif role == "contingent":
        planned = 0.0
        attrs["contingent_duration"] = duration
    attrs["fallback"] = {
        "ladder": fallback.get("ladder"),
        "rung": fallback.get("rung"),
        "index": index,
        "rungs": fallback.get("rungs"),
        "role": role,
        "assumed_rung": fallback.get("assumed_rung", fallback.get("rung") if index == 0 else None),
        "expected_duration": duration,
        "start_within_s": start_within,
        "watched": fallback.get("watched"),
    }
    return planned


def windows_from(dag: Any, graph: TaskGraph, run_start: datetime) -> TaskGraph:
    """``graph`` (built from ``dag``) for a run starting at ``run_start``: every task with a start window
    gets its ``not_before`` from that moment (:func:`build_task_graph` measures it from when the graph is
    built). The same graph when no task has a window; the input is never changed."""
    from dataclasses import replace

    offsets = {
        task_id: _not_before(hints, run_start)
        for task_id, task in getattr(dag, "task_dict", {}).items()
        if "window" in (hints := read_hints(getattr(task, "executor_config", None)))
    }
    changed = {
        node.task_id: replace(node, not_before=offsets[task_id])
        for node in graph.nodes.values()
        if (task_id := str(node.attrs.get("map_of", node.task_id))) in offsets
    }
    return graph.with_nodes(changed)


def _not_before(hints: dict[str, Any], run_start: datetime) -> float:
    """Seconds after ``run_start`` before which a task with a start window cannot start."""
    window = window_from_hint(hints.get("window"))
    return seconds_until_open(window, run_start) if window is not None else 0.0


def _read_node(
    dag_id: str,
    task_id: str,
    task: Any,
    default_duration: float,
    findings: list[Finding],
    run_start: datetime,
) -> TaskNode:
    hints = read_hints(getattr(task, "executor_config", None))
    declared = "duration_s" in hints
    duration = default_duration
    if declared:
        try:
            duration = parse_estimate(hints["duration_s"])
        except EstimateError as err:
            declared = False
            findings.append(
                Finding(
                    ERROR,
                    "bad-estimate",
                    dag_id,
                    task_id,
                    str(err) + ".",
                    'set a valid estimate, e.g. gpu_hints(duration="45m").',
                )
            )
    gpu = None
    pool_slots = getattr(task, "pool_slots", 1)
    if "gpus" in hints:
        try:
            gpu = GpuRequest.parse(hints["gpus"], hints.get("gpu_memory_mib"), hints.get("gpu_type"))
            if gpu.count != pool_slots and getattr(task, "pool", None) not in (None, DEFAULT_POOL):
                findings.append(
                    Finding(
                        ERROR,
                        "pool-slots-mismatch",
                        dag_id,
                        task_id,
                        f"requests {gpu.count} GPUs but takes {pool_slots} slots of pool {task.pool!r}; "
                        "the pool would not gate its GPUs.",
                        f"set pool_slots={gpu.count} (the GPU operators do this for you).",
                    )
                )
        except EstimateError as err:
            findings.append(
                Finding(
                    ERROR,
                    "bad-gpu-request",
                    dag_id,
                    task_id,
                    str(err) + ".",
                    _gpu_hint_fix(hints),
                )
            )
    attrs: dict[str, object] = {}
    index = _fallback_index(dag_id, task_id, hints.get("fallback"), findings)
    start_within = _start_within(dag_id, task_id, hints.get("fallback"), findings)
    duration = _plan_rungs(hints, duration, attrs, index, start_within)
    return TaskNode(
        task_id=task_id,
        duration=duration,
        attrs=attrs,
        gpu=gpu,
        pool=getattr(task, "pool", None),
        pool_slots=pool_slots if isinstance(pool_slots, int) else 1,
        retries=int(getattr(task, "retries", 0) or 0),
        inputs=_paths(dag_id, task_id, hints, "inputs", findings),
        outputs=_paths(dag_id, task_id, hints, "outputs", findings),
        awaits=_paths(dag_id, task_id, hints, "awaits", findings),
        duration_declared=declared,
        not_before=_not_before(hints, run_start),
    )


def _gpu_hint_fix(hints: dict[str, Any]) -> str:
    """The fix for GPU hints that do not parse: for the hint that is wrong."""
    for count, memory, fix in (
        (hints["gpus"], None, "request a whole number of GPUs >= 1, e.g. gpu_hints(gpus=2)."),
        (1, hints.get("gpu_memory_mib"), "give the memory per GPU as a size: gpu_hints(gpu_memory='40GiB')."),
    ):
        try:
            GpuRequest.parse(count, memory)
        except EstimateError:
            return fix
    return "give one GPU type name, e.g. gpu_hints(gpu_type='a100'), or none for any GPU."


def _paths(
    dag_id: str, task_id: str, hints: dict[str, Any], key: str, findings: list[Finding]
) -> tuple[str, ...]:
    """The dataset paths of hint ``key``: a list of paths (one string is one path); anything else is an
    error finding naming the task (no paths)."""
    value = hints.get(key) or ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple | set | frozenset):
        return tuple(str(p) for p in value)
    findings.append(
        Finding(
            ERROR,
            "bad-hint",
            dag_id,
            task_id,
            f"hint {key!r} must be a list of dataset paths, got {type(value).__name__}.",
            f"pass {key}=['/data/...'] to gpu_hints().",
        )
    )
    return ()


def _fallback_index(dag_id: str, task_id: str, fallback: object, findings: list[Finding]) -> int:
    """The rung index of a fallback-ladder hint (0: not a later rung); a malformed one is an error."""
    if not isinstance(fallback, dict):
        return 0
    index = fallback.get("index", 0) or 0
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    findings.append(_bad_fallback_hint(dag_id, task_id, f"index {str(index)[:40]!r} is not a whole number"))
    return 0


def _bad_fallback_hint(dag_id: str, task_id: str, problem: str) -> Finding:
    """The error for a fallback-ladder hint written by hand, not by :func:`fallback_ladder`."""
    return Finding(
        ERROR,
        "bad-hint",
        dag_id,
        task_id,
        f"fallback hint {problem}.",
        "build fallback rungs with airflow_gpu_dag.authoring.fallback_ladder, not by hand.",
    )


def _start_within(dag_id: str, task_id: str, fallback: object, findings: list[Finding]) -> float | None:
    """The ``start_within_s`` of a fallback-ladder hint (None: none); one that is not a finite number of
    seconds >= 0 is an error (it would have made the planned duration NaN, negative or a crash)."""
    value = fallback.get("start_within_s") if isinstance(fallback, dict) else None
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf  # float(10**400) raises
        if 0 <= seconds < math.inf:
            return seconds
    try:
        shown = repr(str(value)[:40])
    except ValueError:  # an int of over 4,300 digits
        shown = f"(a {type(value).__name__} too large to print)"
    findings.append(
        _bad_fallback_hint(dag_id, task_id, f"start_within_s {shown} is not a number of seconds >= 0")
    )
    return None


def plan_dag(dag: Any, default_duration: float | None = None, run_start: datetime | None = None) -> Plan:
    """Plan an Airflow DAG (authoring ``DAG`` or ``SerializedDAG``) for a run starting at
    ``run_start`` (default: now); findings made while reading its hints (bad estimates, bad GPU
    requests) are kept on the plan."""
    graph, findings = build_task_graph(dag, default_duration=default_duration, run_start=run_start)
    return build_plan(graph, findings)
