"""What ``plan`` and ``simulate`` compute from: the DAG's graph with the durations learned from its past
runs (the declared estimates where there is too little history, or everywhere with ``--declared-only``)
and its mapped tasks expanded into their instances, the same graph the priority strategy, the controller
and the UI's predicted schedule use (:func:`airflow_gpu_dag.airflow.history.learned_task_graph`).

:func:`input_notes` says in words what that graph assumed (learned durations, mapped tasks expanded or
left as one node, an unreadable history); :func:`input_json` gives the same for ``-o json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_gpu_dag.airflow.history import LearnedGraph, learned_task_graph
from airflow_gpu_dag.core.model.ladders import UnfitRung, unfit_rungs

if TYPE_CHECKING:
    from airflow_gpu_dag.core.analysis.estimates import DurationEstimate
    from airflow_gpu_dag.core.model.graph import TaskGraph

__all__ = [
    "history_note",
    "history_note_line",
    "input_json",
    "input_notes",
    "mapped_tasks",
    "planning_graph",
]

#: What the database drivers say about a table that is not there: SQLite, PostgreSQL, MySQL. Only a
#: *table*: a PostgreSQL role or database that does not exist is not fixed by ``airflow db migrate``.
_NO_TABLE = re.compile(
    r"no such table|UndefinedTable|relation \"[^\"]*\" does not exist|Table '[^']*' doesn't exist"
)


def history_note(note: str) -> str:
    """``note`` (why the history could not be read) with the fix when the metadata database has no
    tables: a fresh ``AIRFLOW_HOME`` where ``airflow db migrate`` never ran reads as ``no such table:
    task_instance``, which does not say what to do."""
    if note.startswith("history unreadable") and _NO_TABLE.search(note):
        return f"the metadata database is not set up: run `airflow db migrate` ({note})"
    return note


def planning_graph(dag: Any, *, declared_only: bool = False) -> LearnedGraph:
    """The graph of ``dag`` with learned durations and mapped tasks expanded; never raises because of
    the history (an unreadable one is in ``.note``, with the fix: :func:`history_note`).
    ``declared_only``: past runs are not read at all (declared estimates; map counts from literal
    ``expand()`` arguments or ``map_length``)."""
    learned = learned_task_graph(dag, past_runs=not declared_only)
    learned.note = history_note(learned.note)
    return learned


def mapped_tasks(graph: TaskGraph) -> tuple[dict[str, int], list[str]]:
    """``({mapped task: instances}, [mapped tasks whose number of instances is unknown])``; a task
    mapped over nothing (0 instances: Airflow skips it) counts 0."""
    counts: dict[str, int] = {}
    unknown = []
    for task_id, node in graph.nodes.items():
        if "map_of" in node.attrs:
            name = str(node.attrs["map_of"])
            counts[name] = counts.get(name, 0) + 1
        elif node.attrs.get("map_count") == 0:
            counts[task_id] = 0
        elif node.attrs.get("mapped"):
            unknown.append(task_id)
    return dict(sorted(counts.items())), sorted(unknown)


def _learned(estimates: Mapping[str, DurationEstimate]) -> list[str]:
    return sorted(t for t, e in estimates.items() if e.learned is not None)


def history_note_line(note: str) -> str:
    """The line saying why the history was not used (``note`` from the learned graph)."""
    return f"Note: {note}; the declared estimates are used."


def input_notes(
    graph: TaskGraph,
    estimates: Mapping[str, DurationEstimate],
    note: str,
    *,
    verb: str = "shown",
    label: str = "",
    capacity: Mapping[str, int] | None = None,
) -> list[str]:
    """Lines saying what ``graph`` assumed; ``verb``: what was done with a mapped task's instances
    (``shown``, ``simulated``); ``label``: a prefix naming the DAG when several are reported;
    ``capacity``: the pools simulated (fallback rungs too large for them are named)."""
    lines = []
    learned = _learned(estimates)
    if learned:
        lines.append(
            f"~ duration learned from past runs ({len(learned)} task(s)); `airflow gpu-dag estimates "
            f"{graph.dag_id}` compares them with the declared estimates."
        )
    if note:
        lines.append(history_note_line(note))
    counts, unknown = mapped_tasks(graph)
    if counts:
        listed = ", ".join(f"{task} ({n})" for task, n in counts.items())
        lines.append(f"Mapped tasks {verb} as their instances: {listed}.")
    if unknown:
        lines.append(
            f"Mapped tasks with an unknown number of instances ({verb} once): {', '.join(unknown)}; "
            "declare one with gpu_hints(map_length=N)."
        )
    lines += [f"{rung.describe()}." for rung in _unfit(graph, capacity)]
    return [f"{label}{line}" for line in lines]


def _unfit(graph: TaskGraph, capacity: Mapping[str, int] | None) -> list[UnfitRung]:
    return unfit_rungs(graph, capacity) if capacity else []


def input_json(learned: LearnedGraph, capacity: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The same as :func:`input_notes`, for ``-o json``."""
    counts, unknown = mapped_tasks(learned.graph)
    return {
        "learned_tasks": _learned(learned.estimates),
        "history_note": learned.note,
        "mapped_tasks": counts,
        "mapped_unknown": unknown,
        "unfit_rungs": [rung.describe() for rung in _unfit(learned.graph, capacity)],
    }
