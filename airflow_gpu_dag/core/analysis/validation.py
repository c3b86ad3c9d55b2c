"""Validate a task graph before anything runs.

Pure: no Airflow. Each check returns :class:`Finding` objects that name the DAG, the task and the
fix. Errors (cycles, requests no pool can ever hold, unknown pools, malformed estimates) must stop a
DAG from running; warnings (missing estimates, granularity, hidden dependencies) are reported.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from airflow_gpu_dag.core.analysis.gpu_requests import (
    InventorySummary,
    RequestLimits,
    check_gpu_request,
    default_pool_finding,
)
from airflow_gpu_dag.core.model.findings import ERROR, WARNING, Finding
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode, task_pool
from airflow_gpu_dag.core.model.ladders import as_rung_findings
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL, normalize_gpu_type, pool_for_gpu_type
from airflow_gpu_dag.core.model.resources import MAX_ESTIMATE_S, format_duration, real_number

__all__ = [
    "Finding",
    "GraphValidationError",
    "HiddenDependency",
    "ValidationPolicy",
    "cycle_finding",
    "find_hidden_dependencies",
    "hidden_dependency_pairs",
    "validate_graph",
]


class GraphValidationError(ValueError):
    """Raised by :meth:`ValidationReport.raise_for_errors`; the message lists every error."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        super().__init__("\n".join(str(f) for f in findings))


@dataclass(frozen=True)
class ValidationPolicy:
    """What the checks compare against.

    ``pool_slots``: known pools and their total slots (GPU pools: GPUs). When given, a task in a pool
    not listed is an error. ``max_gpus_per_host``: the largest single host (or node); a task needing
    more GPUs than this can never be placed, even if the pool is larger. Granularity bounds follow
    the guidance that an atomic node should run between about 10 minutes and 2 hours. ``inventory``:
    the GPUs of the largest host (NVML or ``[gpu_dag] inventory``); a request more or bigger GPUs
    than it has is an error even when no pool sizes are known. ``cpu_estimates``: also warn about a CPU
    task without an estimate when its DAG sets no default duration (``lint --strict``); a GPU task
    without one is always warned about, a teardown never (it is assumed to take no time).
    """

    pool_slots: Mapping[str, int] | None = None
    max_gpus_per_host: int | None = None
    min_task_seconds: float = 600.0
    max_task_seconds: float = 7200.0
    check_granularity: bool = True
    known_gpu_types: frozenset[str] | None = None
    inventory: InventorySummary | None = None
    cpu_estimates: bool = False

    def request_limits(self) -> RequestLimits:
        """What :func:`~airflow_gpu_dag.core.analysis.gpu_requests.check_gpu_request` compares a task with."""
        return RequestLimits(
            pool_slots=self.pool_slots,
            max_gpus_per_host=self.max_gpus_per_host,
            inventory=self.inventory,
            known_gpu_types=self.known_gpu_types,
        )


@dataclass
class ValidationReport:
    """All findings for one DAG."""

    dag_id: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if not f.is_error]

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> None:
        if self.errors:
            raise GraphValidationError(self.errors)


def validate_graph(
    graph: TaskGraph,
    policy: ValidationPolicy | None = None,
    extra: Iterable[Finding] = (),
) -> ValidationReport:
    """Run every check on ``graph``; ``extra`` are findings the adapter made while reading the DAG
    (for example an estimate it could not parse)."""
    policy = policy or ValidationPolicy()
    report = ValidationReport(graph.dag_id, list(extra))
    cycle = graph.find_cycle()
    if cycle:
        report.findings.append(cycle_finding(graph.dag_id, cycle))
    report.findings.extend(_check_resources(graph, policy))
    report.findings.extend(_check_estimates(graph, policy))
    if not cycle:
        report.findings.extend(find_hidden_dependencies(graph))
    return report


def cycle_finding(dag_id: str, cycle: list[str]) -> Finding:
    """The error for a dependency cycle, naming every task of it (``[a, b, ..., a]``).

    Airflow's DagBag checks cycles (``DAG.check_cycle``) before any cluster policy runs, so a cyclic
    DAG's import error is Airflow's, naming one task; the message says so and that this lint (or
    ``airflow gpu-dag plan``) names the whole cycle.
    """
    return Finding(
        ERROR,
        "cycle",
        dag_id,
        cycle[0],
        f"dependency cycle {' -> '.join(cycle)}. Airflow's import error for it names only one task "
        f"('Cycle detected in Dag: {dag_id}. Faulty task: ...'): Airflow checks cycles before cluster "
        "policies run, so only this lint names the whole cycle.",
        "remove one edge of the cycle; a pipeline must be acyclic. Run `airflow gpu-dag lint` in CI before "
        "deploying DAG files (docs/edges.md#cycles).",
    )


def _check_resources(graph: TaskGraph, policy: ValidationPolicy) -> Iterable[Finding]:
    pools = policy.pool_slots
    limits = policy.request_limits()
    for node in graph.nodes.values():
        pool = task_pool(node)
        # the known pools are the GPU pools ([gpu_dag] pools, lint --pool): a CPU task's pool is not
        # among them and may well exist in Airflow
        if (
            pools is not None
            and node.gpus > 0
            and pool not in pools
            and pool != DEFAULT_POOL
            and not _pool_of_unknown_type(node, pool, limits.gpu_types)
        ):
            known = ", ".join(sorted(pools)) or "none"
            yield Finding(
                ERROR,
                "unknown-pool",
                graph.dag_id,
                node.task_id,
                f"pool {pool!r} does not exist (known pools: {known}).",
                f"create it (airflow pools set {shlex.quote(pool)} <slots> '<description>') "
                "or use a known pool.",
            )
        if node.gpu is not None and node.pool == DEFAULT_POOL:  # as read from Airflow: no pool named
            yield default_pool_finding(graph.dag_id, node.task_id, node.gpu.count)
        found = check_gpu_request(graph.dag_id, node.task_id, node.gpu, pool, node.pool_slots, limits)
        yield from as_rung_findings(found, node.attrs.get("fallback"))


def _pool_of_unknown_type(node: TaskNode, pool: str, types: frozenset[str] | None) -> bool:
    """Whether ``pool`` is the ``gpu_<type>`` pool of a GPU type not among ``types``: the type is the
    mistake (``unknown-gpu-type``), and creating the pool would not help, so it is not also an
    ``unknown-pool``."""
    if node.gpu is None or node.gpu.gpu_type is None or types is None:
        return False
    try:
        gpu_type = normalize_gpu_type(node.gpu.gpu_type)
    except ValueError:
        return False
    return gpu_type not in types and pool == pool_for_gpu_type(gpu_type)


def _check_estimates(graph: TaskGraph, policy: ValidationPolicy) -> Iterable[Finding]:
    for node in graph.nodes.values():
        rung = node.attrs.get("fallback")
        # a fallback rung: its own estimate, not what the plan counts for it (the wait of one that
        # falls back, 0 for one skipped)
        raw = (rung.get("expected_duration") or 0.0) if isinstance(rung, dict) else node.duration
        duration = real_number(raw)  # NaN for text: a rung's estimate stored by hand
        if not (math.isfinite(duration) and 0 <= duration <= MAX_ESTIMATE_S):  # the DAG reader refuses
            yield Finding(  # these; a graph built another way gets the same error, not a crash
                ERROR,
                "bad-estimate",
                graph.dag_id,
                node.task_id,
                f"estimate {raw!r} is not a duration."
                if not (math.isfinite(duration) and duration >= 0)
                else f"estimate {duration:g} s is over 366 days (a typo or the wrong unit?).",
                "declare a finite estimate of 0 or more, e.g. duration='2h'.",
            )
            continue
        if not node.duration_declared:
            if finding := _missing_estimate(graph.dag_id, node, duration, policy):
                yield finding
            continue
        if not policy.check_granularity or duration == 0:
            continue
        # compared as printed (whole seconds): never "estimated 10m, under 10m"
        if round(duration) < policy.min_task_seconds:
            yield Finding(
                WARNING,
                "granularity-too-fine",
                graph.dag_id,
                node.task_id,
                f"estimated {format_duration(duration)}, under "
                f"{format_duration(policy.min_task_seconds)}: scheduling overhead dominates.",
                "merge it with a neighbouring step.",
            )
        elif round(duration) > policy.max_task_seconds:
            shown = format_duration(duration)
            if shown == format_duration(policy.max_task_seconds):  # "2h00m, over 2h00m": its seconds
                shown = f"{round(duration)} s"
            yield Finding(
                WARNING,
                "granularity-too-coarse",
                graph.dag_id,
                node.task_id,
                f"estimated {shown}, over "
                f"{format_duration(policy.max_task_seconds)}: the scheduler loses flexibility.",
                "split it into atomic steps (load, preprocess, init, train, checkpoint, evaluate).",
            )


#: Where the duration a task without an estimate is assumed to take comes from, in words (the graph
#: reader's ``attrs["duration_default"]``).
_ASSUMED = {"dag": "the DAG's gpu_dag_default_duration", "deployment": "[gpu_dag] default_duration"}


def _missing_estimate(
    dag_id: str, node: TaskNode, duration: float, policy: ValidationPolicy
) -> Finding | None:
    """The ``missing-estimate`` warning of a task that declares no duration: always for a GPU task (its
    estimate orders it against every other DAG's GPU tasks), for a CPU task only with
    ``policy.cpu_estimates`` and no DAG default, never for a teardown (assumed to take no time)."""
    source = node.attrs.get("duration_default")
    if source == "teardown" or (node.gpus == 0 and not (policy.cpu_estimates and source != "dag")):
        return None
    assumed = (
        f"{format_duration(duration)}, {_ASSUMED[str(source)]}"
        if source in _ASSUMED
        else format_duration(duration)
    )
    return Finding(
        WARNING,
        "missing-estimate",
        dag_id,
        node.task_id,
        f"no duration estimate; assuming {assumed}.",
        'declare one, e.g. executor_config=gpu_hints(duration="30m") (a GPU operator: duration="30m"), or '
        "the DAG's default: default_args={'gpu_dag_default_duration': '20m'}.",
    )


def normalise_path(path: str) -> str:
    """Strip blanks and trailing slashes (``/`` stays ``/``)."""
    path = path.strip()
    return path.rstrip("/") or "/"


def path_contains(outer: str, inner: str) -> bool:
    """True when ``inner`` equals ``outer`` or lies inside it (by whole path components)."""
    return inner == outer or inner.startswith(outer if outer.endswith("/") else outer + "/")


def paths_overlap(a: str, b: str) -> bool:
    """True when one path equals or contains the other (by whole path components)."""
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return path_contains(short, long_)


@dataclass(frozen=True)
class HiddenDependency:
    """A writer and another task touching overlapping paths with nothing ordering them."""

    writer: str
    writer_path: str
    other: str
    other_path: str
    other_writes: bool


def hidden_dependency_pairs(graph: TaskGraph) -> list[HiddenDependency]:
    """Pairs of tasks touching the same dataset path (equal, or one containing the other) where at
    least one writes it and neither is upstream of the other: the reader may see a half-written
    dataset, or two writers race. A reader is safe when it, or a task upstream of it, awaits the
    completeness of an overlapping path (a completeness sensor). Assumes an acyclic graph."""
    touches: list[tuple[str, str, bool]] = []  # (path, task_id, writes)
    for node in graph.nodes.values():
        for path in node.outputs:
            touches.append((normalise_path(path), node.task_id, True))
        for path in node.inputs:
            touches.append((normalise_path(path), node.task_id, False))
    if not touches:
        return []
    touches.sort()
    descendants: dict[str, set[str]] = {}
    awaited: dict[str, list[str]] = {}

    def ordered(a: str, b: str) -> bool:
        for x, y in ((a, b), (b, a)):
            if x not in descendants:
                descendants[x] = graph.descendants(x)
            if y in descendants[x]:
                return True
        return False

    def guarded(reader: str, written: str, read: str) -> bool:
        """A completeness sensor before ``reader`` on a path holding all it shares with the writer (the
        more specific of the two paths): a sensor on another part of the dataset guards nothing."""
        if reader not in awaited:
            waits = [reader, *graph.ancestors(reader)]
            awaited[reader] = [normalise_path(p) for t in waits for p in graph.nodes[t].awaits]
        shared = read if len(read) > len(written) else written
        return any(path_contains(p, shared) for p in awaited[reader])

    pairs: list[HiddenDependency] = []
    reported: set[tuple[str, str]] = set()
    for i, (path_a, task_a, writes_a) in enumerate(touches):
        for path_b, task_b, writes_b in touches[i + 1 :]:
            if not paths_overlap(path_a, path_b):
                if not path_b.startswith(path_a):
                    break  # sorted: no later path can be inside path_a
                continue
            if task_a == task_b or not (writes_a or writes_b):
                continue
            pair = (min(task_a, task_b), max(task_a, task_b))
            if pair in reported or ordered(task_a, task_b):
                continue
            if writes_a:
                found = HiddenDependency(task_a, path_a, task_b, path_b, writes_b)
            else:
                found = HiddenDependency(task_b, path_b, task_a, path_a, writes_a)
            if not found.other_writes and guarded(found.other, found.writer_path, found.other_path):
                continue
            reported.add(pair)
            pairs.append(found)
    return pairs


def find_hidden_dependencies(graph: TaskGraph) -> list[Finding]:
    """:func:`hidden_dependency_pairs` as lint findings (warnings on the non-writing / second task)."""
    return [
        Finding(
            WARNING,
            "hidden-dependency",
            graph.dag_id,
            dep.other,
            f"{dep.other!r} {'also writes' if dep.other_writes else 'reads'} {dep.other_path!r}, which "
            f"overlaps {dep.writer_path!r} written by {dep.writer!r}, with no dependency between the two "
            "tasks.",
            f"add the edge {dep.writer} >> {dep.other}, or a completeness sensor on the dataset "
            "(airflow_gpu_dag.authoring.fix_hidden_dependencies does either).",
        )
        for dep in hidden_dependency_pairs(graph)
    ]
