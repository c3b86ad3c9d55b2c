"""Fix hidden dependencies: tasks touching the same dataset path with no edge between them.

    from airflow_gpu_dag.authoring import fix_hidden_dependencies

    with DAG(...) as dag:
        ...  # tasks declaring gpu_hints(inputs=[...], outputs=[...])
    fix_hidden_dependencies(dag, mode="sensor", timeout=timedelta(hours=1))

``find_hidden_dependencies`` (the lint) reports a writer and a reader (or two writers) of
overlapping paths that are not ordered. This opt-in helper repairs each one, visibly:

- ``mode="edge"``: adds ``writer -data-> reader``.
- ``mode="sensor"``: adds a completeness sensor on the writer's path before the reader
  (``sensor -data-> reader``): the reader waits for a *complete* dataset but not for the writer task
  to end (useful when the writer keeps running). A reader sharing several of the writer's paths gets
  one sensor per path, all awaited before it starts: ``wait_<writer>_for_<reader>`` for a single path,
  ``wait_<writer>_for_<reader>__<path>`` (the path as an id, e.g. ``__lake_a``) for each of several.
  Two writers of one path always get an edge: a sensor cannot stop a write race (nor when the reader
  also writes a path the writer writes).

Calling it again is a no-op: a path a sensor already awaits, or a pair already ordered, is not
reported again, so nothing new is added (a path an earlier sensor left out gets its own sensor).

It never creates a cycle. Every repair is planned on a copy of the graph first, and nothing is
changed unless all of them can be made:

- two writers are ordered in whichever direction keeps the graph acyclic;
- a pair the repairs already ordered (writer upstream of the reader) needs nothing more;
- a reader that must run *before* its writer (the reader is already upstream of the writer, or each
  of two tasks reads what the other writes) cannot be repaired in either mode, so the helper raises
  :class:`HiddenDependencyCycle` naming the two tasks, the shared path, the edge that would close the
  cycle and the path it would close. A completeness sensor does not help there: the reader would
  wait for data that is only written after it ends (a deadlock until the sensor's timeout).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.authoring._wiring import labelled
from airflow_gpu_dag.core.analysis.validation import (
    HiddenDependency,
    hidden_dependency_pairs,
    normalise_path,
    path_contains,
    paths_overlap,
)
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.datasets.completeness import parse_completeness
from airflow_gpu_dag.deferral import require_poke_interval, require_timeout
from airflow_gpu_dag.sensors.dataset import DatasetCompleteSensor

__all__ = ["HiddenDependencyCycle", "HiddenDependencyFix", "fix_hidden_dependencies"]

MODES = ("edge", "sensor")


class HiddenDependencyCycle(ValueError):
    """A hidden dependency that no edge or sensor can repair without a cycle (or a deadlock)."""


@dataclass(frozen=True)
class HiddenDependencyFix:
    """One repair: ``how`` is ``"edge"``, ``"sensor"`` or ``"ordered"`` (earlier repairs already
    ordered the pair, or already await its paths before the reader; nothing added); ``added`` is the
    new task (sensor mode: one fix, and one sensor, per shared path)."""

    writer: str
    other: str
    path: str
    how: str
    added: str | None = None


def _path_between(graph: TaskGraph, start: str, goal: str) -> list[str] | None:
    """One path ``start -> ... -> goal`` in ``graph`` (breadth first), or None."""
    parents: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        if node == goal:
            path = [node]
            while parents[path[-1]] is not None:
                path.append(parents[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for down in graph.downstream(node):
            if down not in parents:
                parents[down] = node
                queue.append(down)
    return None


def _reverse_need(graph: TaskGraph, writer: str, other: str) -> tuple[str, str] | None:
    """``(path other writes, path writer reads)`` when ``writer`` also reads what ``other`` writes."""
    for out in graph.nodes[other].outputs:
        for read in graph.nodes[writer].inputs:
            if paths_overlap(normalise_path(out), normalise_path(read)):
                return out, read
    return None


def _write_race(graph: TaskGraph, writer: str, other: str) -> str | None:
    """A path both tasks write (overlapping), or None: a sensor cannot order two writers."""
    for out in graph.nodes[writer].outputs:
        if any(paths_overlap(normalise_path(out), normalise_path(o)) for o in graph.nodes[other].outputs):
            return out
    return None


def _unguarded_paths(graph: TaskGraph, writer: str, reader: str) -> list[str]:
    """The writer's paths (normalised, in declaration order) that overlap a path ``reader`` reads and
    that neither the reader nor a task upstream of it already awaits (a completeness sensor): the
    paths to put a sensor on. Judged like :func:`hidden_dependency_pairs` judges a guarded reader."""
    awaited = [normalise_path(p) for t in (reader, *graph.ancestors(reader)) for p in graph.nodes[t].awaits]
    reads = [normalise_path(p) for p in graph.nodes[reader].inputs]
    paths: list[str] = []
    for out in (normalise_path(p) for p in graph.nodes[writer].outputs):
        shared = [r if len(r) > len(out) else out for r in reads if paths_overlap(out, r)]
        if out in paths or not shared:
            continue
        # guarded: each part the two share lies inside a path already awaited
        if not all(any(path_contains(a, part) for a in awaited) for part in shared):
            paths.append(out)
    return paths


def _refuse(dag_id: str, dep: HiddenDependency, edge: tuple[str, str], closes: list[str], why: str) -> None:
    verb = "also writes" if dep.other_writes else "reads"
    raise HiddenDependencyCycle(
        f"DAG {dag_id!r}: cannot fix the hidden dependency between {dep.writer!r} "
        f"(writes {dep.writer_path!r}) and {dep.other!r} ({verb} {dep.other_path!r}): the edge "
        f"{edge[0]} >> {edge[1]} would close the cycle {' -> '.join([*closes, closes[0]])} ({why}), and "
        f"a completeness sensor before {dep.other!r} would wait for data written only after it ends. "
        "Fix: decide the order yourself (an explicit edge), or give the two tasks different paths."
    )


def _plan(
    dag_id: str, graph: TaskGraph, pairs: list[HiddenDependency], mode: str
) -> list[HiddenDependencyFix]:
    """The repairs, checked on ``graph`` (which they are added to); raises before anything changes.

    ``graph`` also gets the order a sensor gives (its reader after the data), for the cycle checks;
    whether two tasks are already *ordered* is judged on the real edges only (``real``): a sensor does
    not order its writer before anything, so two writers ordered only through one still race.
    """
    real = TaskGraph(graph.dag_id)
    for node in graph.nodes.values():
        real.add_task(node)
    for up, down, kind in graph.edges():
        real.add_edge(up, down, kind)
    fixes: list[HiddenDependencyFix] = []
    for dep in pairs:
        writer, other = dep.writer, dep.other
        if dep.other_writes:  # two writers: any order stops the race; take one that keeps it acyclic
            if writer in real.descendants(other) or other in real.descendants(writer):
                fixes.append(HiddenDependencyFix(writer, other, dep.writer_path, "ordered"))
                continue
            if writer in graph.descendants(other):  # only a sensor orders them that way: keep it
                writer, other = other, writer
            graph.add_edge(writer, other, "data")
            real.add_edge(writer, other, "data")
            fixes.append(HiddenDependencyFix(writer, other, dep.writer_path, "edge"))
            continue
        back = _path_between(graph, other, writer)
        if back is not None:
            _refuse(dag_id, dep, (writer, other), back, "the reader already runs before the writer")
        reverse = _reverse_need(graph, writer, other)
        if reverse is not None:
            _refuse(
                dag_id,
                dep,
                (writer, other),
                [writer, other],
                f"{writer!r} also reads {reverse[1]!r}, which {other!r} writes to {reverse[0]!r}",
            )
        if other in real.descendants(writer):
            fixes.append(HiddenDependencyFix(writer, other, dep.writer_path, "ordered"))
            continue
        race = _write_race(graph, writer, other) is not None  # then an edge, whatever the mode
        paths = _unguarded_paths(real, writer, other) if mode == "sensor" and not race else []
        if mode == "sensor" and not race and not paths:  # an earlier repair put a sensor before it
            fixes.append(HiddenDependencyFix(writer, other, dep.writer_path, "ordered"))
            continue
        graph.add_edge(writer, other, "data")  # a sensor also orders the reader after the data
        if mode == "edge" or race:
            real.add_edge(writer, other, "data")
            fixes.append(HiddenDependencyFix(writer, other, dep.writer_path, "edge"))
            continue
        fixes.extend(HiddenDependencyFix(writer, other, path, "sensor") for path in paths)
    return fixes


def _path_id(path: str) -> str:
    """``path`` as a task-id suffix (``/lake/a`` -> ``lake_a``; its last 60 characters)."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", path).strip("_")[-60:].strip("_") or "path"


#: Longest task id Airflow stores (250 characters), less room for a ``_<count>`` suffix.
_LONGEST_SENSOR_ID = 240


def _fitted(task_id: str) -> str:
    """``task_id``, or when it is longer than Airflow takes (two ids of deep task groups) its start and
    a digest of the whole: the same id from parse to parse, and two long ids stay apart."""
    if len(task_id) <= _LONGEST_SENSOR_ID:
        return task_id
    digest = hashlib.sha1(task_id.encode()).hexdigest()[:10]
    return f"{task_id[: _LONGEST_SENSOR_ID - 11]}_{digest}"


def _name_sensors(dag: Any, fixes: list[HiddenDependencyFix]) -> list[HiddenDependencyFix]:
    """``fixes`` with the task id of each planned sensor in ``added``: ``wait_<writer>_for_<reader>``
    when the pair needs one sensor and that id is free, else ``wait_<writer>_for_<reader>__<path>``
    (``_2``, ``_3``, ... appended should that be taken too), so a DAG keeps its ids from parse to parse."""
    per_pair: dict[tuple[str, str], int] = {}
    for fix in fixes:
        if fix.how == "sensor":
            per_pair[(fix.writer, fix.other)] = per_pair.get((fix.writer, fix.other), 0) + 1
    taken = set(dag.task_dict)
    named: list[HiddenDependencyFix] = []
    for fix in fixes:
        if fix.how != "sensor":
            named.append(fix)
            continue
        task_id = base = _fitted(f"wait_{fix.writer}_for_{fix.other}")
        if per_pair[(fix.writer, fix.other)] > 1 or task_id in taken:
            task_id = base = _fitted(f"{base}__{_path_id(fix.path)}")
            count = 1
            while task_id in taken:
                count += 1
                task_id = f"{base}_{count}"
        taken.add(task_id)
        named.append(replace(fix, added=task_id))
    return named


def fix_hidden_dependencies(
    dag: Any,
    mode: str = "edge",
    *,
    completeness: object = "marker",
    timeout: float | timedelta | None = None,
    poke_interval: float = 10.0,
) -> list[HiddenDependencyFix]:
    """Insert the missing edge or a completeness sensor for every hidden dependency; returns the fixes.

    :param mode: ``"edge"`` or ``"sensor"``.
    :param timeout: required in sensor mode (how long a reader may wait for the dataset).
    :raises HiddenDependencyCycle: a repair would close a cycle (nothing was changed); the message
        names the two tasks, the path, the edge and the cycle.
    """
    if mode not in MODES:
        raise ValueError(
            f"DAG {dag.dag_id!r}: fix_hidden_dependencies(mode={mode!r}) is unknown; use 'edge' or 'sensor'."
        )
    graph, _ = build_task_graph(dag)
    fixes = _name_sensors(dag, _plan(str(dag.dag_id), graph, hidden_dependency_pairs(graph), mode))
    first_sensor = next((f for f in fixes if f.how == "sensor"), None)
    if first_sensor is not None:  # the sensors' arguments, checked before any edge is added
        where = f"DAG {dag.dag_id!r}, task {first_sensor.added!r}"
        require_timeout(str(first_sensor.added), "DatasetCompleteSensor", timeout, where=where)
        try:
            parse_completeness(completeness)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None
        require_poke_interval(poke_interval, where)
    added = {f.added for f in fixes if f.added}
    done: list[HiddenDependencyFix] = []
    for fix in fixes:
        writer = dag.get_task(fix.writer)
        other = dag.get_task(fix.other)
        if fix.how in ("edge", "ordered"):
            if fix.how == "edge":
                labelled(writer, other, "data")
            done.append(fix)
            continue
        sensor = DatasetCompleteSensor(
            task_id=str(fix.added),
            path=fix.path,
            completeness=completeness,
            timeout=timeout,
            poke_interval=poke_interval,
            dag=dag,
        )
        sensor.doc_md = f"Hidden dependency: {fix.other} reads {fix.path} written by {fix.writer}."
        for up_id in sorted(other.upstream_task_ids - added):  # the reader's sensors wait side by side
            dag.get_task(up_id) >> sensor
        labelled(sensor, other, "data")
        done.append(replace(fix, added=sensor.task_id))
    return done
