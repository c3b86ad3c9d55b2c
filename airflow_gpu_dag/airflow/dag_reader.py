"""Read an Airflow DAG (authoring ``airflow.sdk.DAG`` or the scheduler's ``SerializedDAG``) into a
:class:`~airflow_gpu_dag.core.model.graph.TaskGraph`.

Only attributes that survive serialization are read: ``task_dict``, ``downstream_task_ids``,
``pool``, ``pool_slots``, ``retries`` and the task contract in ``executor_config``
(:mod:`airflow_gpu_dag.contract`, read with its one reader). So the same graph is built in the
dag-processor, the scheduler, the api-server and the CLI.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from airflow_gpu_dag.airflow.mapped import expand_dag_graph, map_length_findings
from airflow_gpu_dag.contract import FallbackHint, WindowHint
from airflow_gpu_dag.contract import read as read_contract
from airflow_gpu_dag.core.analysis.validation import ERROR, Finding
from airflow_gpu_dag.core.analysis.weight_rules import CROSS_DAG_RULE_CLASSES, RuleUse
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL
from airflow_gpu_dag.core.model.resources import EstimateError, parse_estimate
from airflow_gpu_dag.core.model.windows import seconds_until_open, window_from_hint
from airflow_gpu_dag.core.planning.plan import Plan, build_plan
from airflow_gpu_dag.settings import default_duration_seconds

__all__ = [
    "DAG_DEFAULT_DURATION_ARG",
    "build_task_graph",
    "dag_default_duration",
    "plan_dag",
    "priority_rule_of",
    "rule_name",
    "rule_uses",
    "windows_from",
]

#: The ``default_args`` key of a DAG's default duration: what a task of the DAG that declares no
#: estimate is assumed to take (docs/gpu-tasks.md#durations-estimates-and-defaults).
DAG_DEFAULT_DURATION_ARG = "gpu_dag_default_duration"

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


def rule_name(rule: object) -> str:
    """A task's weight rule as a DAG names it: Airflow's ``downstream`` / ``upstream`` / ``absolute`` (the
    enum, its value, or its strategy on a serialized DAG), else the class path or class name."""
    if rule is None:
        return "downstream"
    if isinstance(rule, enum.Enum):
        return str(rule.value)
    if isinstance(rule, str):
        return rule
    name = type(rule).__name__
    stock = name.strip("_").removesuffix("PriorityWeightStrategy").lower()
    return stock if stock in ("downstream", "upstream", "absolute") else name


def rule_uses(dag: Any) -> list[RuleUse]:
    """The weight rules of ``dag``'s tasks per pool (SDK or serialized DAG), for
    :func:`~airflow_gpu_dag.core.analysis.weight_rules.incomparable_rules`."""
    uses: dict[tuple[str, str], RuleUse] = {}
    for task in dag.task_dict.values():
        rule = rule_name(getattr(task, "weight_rule", None))
        pool = str(getattr(task, "pool", None) or DEFAULT_POOL)
        gpu = read_contract(getattr(task, "executor_config", None)).gpus is not None
        before = uses.get((pool, rule))
        uses[(pool, rule)] = RuleUse(
            str(dag.dag_id),
            pool,
            rule,
            rule.endswith(CROSS_DAG_RULE_CLASSES),
            gpu or bool(before and before.gpu),
        )
    return list(uses.values())


def dag_default_duration(dag: Any) -> tuple[float | None, Finding | None]:
    """The DAG's own default duration (``default_args["gpu_dag_default_duration"]``) in seconds, None
    when it sets none; and the ``bad-default-duration`` error when it cannot be parsed (then None)."""
    default_args = getattr(dag, "default_args", None)
    if not isinstance(default_args, Mapping) or default_args.get(DAG_DEFAULT_DURATION_ARG) is None:
        return None, None
    value = default_args[DAG_DEFAULT_DURATION_ARG]
    try:
        return parse_estimate(value), None
    except EstimateError as err:
        return None, Finding(
            ERROR,
            "bad-default-duration",
            str(dag.dag_id),
            None,
            f"default_args[{DAG_DEFAULT_DURATION_ARG!r}]: {err}.",
            f"give it like '20m' or '1h' (default_args={{{DAG_DEFAULT_DURATION_ARG!r}: '20m'}}), or drop it "
            "([gpu_dag] default_duration applies).",
        )


def build_task_graph(
    dag: Any,
    default_duration: float | None = None,
    run_start: datetime | None = None,
    *,
    expand_mapped: bool = False,
    map_counts: Mapping[str, int] | None = None,
) -> tuple[TaskGraph, list[Finding]]:
    """Return the task graph of ``dag`` and the findings made while reading it.

    A task without a duration estimate is marked undeclared and assumed to take (its
    ``attrs["duration_default"]`` says which): 0 for a teardown (it runs after the work it tears down:
    no task waits for it), else the DAG's default duration (:func:`dag_default_duration`, ``"dag"``),
    else ``default_duration`` (``[gpu_dag] default_duration`` when None, ``"deployment"``). A malformed
    estimate, GPU request or DAG default becomes an error finding naming the task or the DAG, and the
    default is used so planning can go on. A task with a start window gets ``not_before`` = seconds
    from ``run_start`` (default: now) until its window
    opens. The rungs of a fallback ladder are planned as the ladder assumes (:func:`_plan_rungs`).

    With ``expand_mapped``, a mapped task whose number of instances N is known (literal ``expand()``
    arguments, ``map_counts`` from past runs, or ``gpu_hints(map_length=N)``) becomes N nodes
    ``task_id[i]`` (see :mod:`airflow_gpu_dag.airflow.mapped`); otherwise every task is one node.
    """
    if default_duration is None:
        default_duration = default_duration_seconds()
    own, bad_default = dag_default_duration(dag)
    defaults = ("dag", own) if own is not None else ("deployment", default_duration)
    start = run_start if run_start is not None else datetime.now(UTC)
    dag_id = str(dag.dag_id)
    graph = TaskGraph(dag_id, priority_rule=priority_rule_of(dag))
    findings: list[Finding] = [bad_default] if bad_default is not None else []
    tasks = dag.task_dict
    for task_id, task in tasks.items():
        graph.add_task(_read_node(dag_id, task_id, task, defaults, findings, start))
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


def _plan_rungs(fallback: FallbackHint | None, duration: float, attrs: dict[str, object]) -> float:
    """The planned duration of a fallback rung; its expected duration and role go to ``attrs``.

    The ladder's hints say which rung the plan assumes (``assumed_index``, the first unless the author
    chose another). That rung counts its own estimate; a rung before it counts its ``start_within``
    (it waited that long, did not start, and the ladder fell back); a rung after it counts 0 (it
    runs only if the assumed rung could not start).
    """
    if fallback is None:
        return duration
    index, assumed = fallback.index, fallback.assumed_index
    role = "assumed" if index == assumed else ("fell back" if index < assumed else "contingent")
    planned = duration
    if role == "fell back":
        planned = fallback.start_within_s or 0.0
    elif role == "contingent":
        planned = 0.0
        attrs["contingent_duration"] = duration
    attrs["fallback"] = {
        "ladder": fallback.ladder,
        "rung": fallback.rung,
        "index": index,
        "rungs": fallback.rungs,
        "role": role,
        "assumed_rung": fallback.assumed_rung
        if fallback.assumed_rung is not None
        else (fallback.rung if index == 0 else None),
        "expected_duration": duration,
        "start_within_s": fallback.start_within_s,
        "watched": fallback.watched,
    }
    return planned


def windows_from(dag: Any, graph: TaskGraph, run_start: datetime) -> TaskGraph:
    """``graph`` (built from ``dag``) for a run starting at ``run_start``: every task with a start window
    gets its ``not_before`` from that moment (:func:`build_task_graph` measures it from when the graph is
    built). The same graph when no task has a window; the input is never changed."""
    offsets = {
        task_id: _not_before(window, run_start)
        for task_id, task in getattr(dag, "task_dict", {}).items()
        if (window := read_contract(getattr(task, "executor_config", None)).window) is not None
    }
    changed = {
        node.task_id: replace(node, not_before=offsets[task_id])
        for node in graph.nodes.values()
        if (task_id := str(node.attrs.get("map_of", node.task_id))) in offsets
    }
    return graph.with_nodes(changed)


def _not_before(hint: WindowHint | None, run_start: datetime) -> float:
    """Seconds after ``run_start`` before which a task with a start window cannot start."""
    window = window_from_hint(hint.to_wire()) if hint is not None else None
    return seconds_until_open(window, run_start) if window is not None else 0.0


def _read_node(
    dag_id: str,
    task_id: str,
    task: Any,
    defaults: tuple[str, float],
    findings: list[Finding],
    run_start: datetime,
) -> TaskNode:
    """The node of one task, read from its contract (:func:`airflow_gpu_dag.contract.read`); every
    problem of the contract becomes an error finding naming the task (the cluster policy refuses the DAG
    with it; a reader keeps the default, ``defaults``: where it comes from and its seconds, and no GPU)."""
    contract = read_contract(getattr(task, "executor_config", None))
    findings.extend(
        Finding(ERROR, problem.code, dag_id, task_id, problem.message, problem.fix)
        for problem in contract.problems
    )
    declared = contract.duration_s is not None
    attrs: dict[str, object] = {}
    if contract.duration_s is not None:
        duration = contract.duration_s
    elif getattr(task, "is_teardown", False) is True:
        duration, attrs["duration_default"] = 0.0, "teardown"
    else:
        attrs["duration_default"], duration = defaults
    gpu = contract.gpu_request
    pool_slots = getattr(task, "pool_slots", 1)
    if (
        gpu is not None
        and gpu.count != pool_slots
        and getattr(task, "pool", None) not in (None, DEFAULT_POOL)
    ):
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
    duration = _plan_rungs(contract.fallback, duration, attrs)
    return TaskNode(
        task_id=task_id,
        duration=duration,
        attrs=attrs,
        gpu=gpu,
        pool=getattr(task, "pool", None),
        pool_slots=pool_slots if isinstance(pool_slots, int) else 1,
        retries=int(getattr(task, "retries", 0) or 0),
        inputs=contract.inputs,
        outputs=contract.outputs,
        awaits=contract.awaits,
        duration_declared=declared,
        not_before=_not_before(contract.window, run_start),
    )


def plan_dag(dag: Any, default_duration: float | None = None, run_start: datetime | None = None) -> Plan:
    """Plan an Airflow DAG (authoring ``DAG`` or ``SerializedDAG``) for a run starting at
    ``run_start`` (default: now); findings made while reading its hints (bad estimates, bad GPU
    requests) are kept on the plan."""
    graph, findings = build_task_graph(dag, default_duration=default_duration, run_start=run_start)
    return build_plan(graph, findings)
