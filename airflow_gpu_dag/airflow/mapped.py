"""Which tasks of an Airflow DAG are mapped, and how many task instances each will have.

Works on the authoring DAG (``airflow.sdk``) and on the scheduler's ``SerializedDAG``. The number of
instances N of a mapped task comes from, in this order:

1. ``expand``: every ``expand()`` / ``expand_kwargs()`` argument (and that of every enclosing mapped
   task group) is a literal list or dict: N is the product of their lengths, exactly what Airflow
   will create;
2. ``history``: the instances the task had in its DAG's latest runs (given by the caller, read by
   :func:`airflow_gpu_dag.airflow.history.read_map_counts` or over REST);
3. ``declared``: the task's ``gpu_hints(map_length=N)``, the expected length of a mapping over
   another task's output;

otherwise N is unknown and the task stays one node. :func:`expand_dag_graph` expands a task graph
read from the DAG with :func:`airflow_gpu_dag.core.model.mapping.expand_mapped`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow_gpu_dag.contract import read as read_contract
from airflow_gpu_dag.core.model.findings import ERROR, Finding
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.mapping import expand_mapped
from airflow_gpu_dag.settings import max_map_length

__all__ = [
    "declared_map_length",
    "expand_dag_graph",
    "index_wise_pairs",
    "is_mapped",
    "literal_map_length",
    "map_length_findings",
    "map_lengths",
    "mapped_task_ids",
]


def is_mapped(task: Any) -> bool:
    """True when ``task`` runs as several task instances (``.expand()``, or inside a mapped group)."""
    needs = getattr(task, "get_needs_expansion", None)
    if callable(needs):
        try:
            return bool(needs())
        except Exception:  # an unusual operator: fall back to the flag
            pass
    return bool(getattr(task, "is_mapped", False) or getattr(task, "_is_mapped", False))


def mapped_task_ids(dag: Any) -> list[str]:
    """The mapped tasks of ``dag``, in the DAG's task order."""
    return [task_id for task_id, task in dag.task_dict.items() if is_mapped(task)]


def _is_literal(value: object) -> bool:
    return isinstance(value, Sequence | Mapping | set | frozenset) and not isinstance(value, str | bytes)


def _literal_count(expand_input: Any) -> int | None:
    """Instances an expand input creates when all its arguments are literals, else None."""
    value = getattr(expand_input, "value", None)
    if isinstance(value, Mapping) and not _is_list_of_dicts(expand_input):
        count = 1
        for argument in value.values():
            if not _is_literal(argument):
                return None
            count *= len(argument)
        return count if value else 0
    if _is_literal(value):
        return len(value)  # type: ignore[arg-type]
    return None


def _is_list_of_dicts(expand_input: Any) -> bool:
    return "ListOfDicts" in type(expand_input).__name__


def _own_count(task: Any) -> int | None:
    getter = getattr(task, "_get_specified_expand_input", None)
    if not callable(getter):
        return 1  # not mapped itself (a task inside a mapped group)
    try:
        return _literal_count(getter())
    except Exception:
        return None


def _mapped_groups(task: Any) -> Iterator[Any]:
    groups = getattr(task, "iter_mapped_task_groups", None)
    if not callable(groups):
        return iter(())
    try:
        return iter(list(groups()))
    except Exception:
        return iter(())


def literal_map_length(task: Any) -> int | None:
    """N from literal ``expand()`` arguments (of the task and its mapped groups); None when any
    argument is only known at run time (an upstream task's output)."""
    count = _own_count(task)
    if count is None:
        return None
    for group in _mapped_groups(task):
        group_count = _literal_count(getattr(group, "_expand_input", None))
        if group_count is None:
            return None
        count *= group_count
    return count


def declared_map_length(task: Any) -> int | None:
    """``gpu_hints(map_length=N)`` of the task (its contract's ``map_length``), when it is at most
    Airflow's ``[core] max_map_length`` (a longer list fails the upstream task that pushes it)."""
    value = read_contract(getattr(task, "executor_config", None)).map_length
    if value is not None and value <= max_map_length():
        return value
    return None


def _map_length_problem(task: Any, value: int) -> tuple[str, str] | None:
    """``(problem, fix)`` of a task's ``map_length`` ``value`` (a whole number >= 0: the contract
    refuses any other), or None when it is fine."""
    limit = max_map_length()
    if value > limit:
        return (
            f"map_length {value} is more than Airflow's [core] max_map_length ({limit}): the upstream "
            "task pushing that many values would fail, so the task could never expand.",
            f"declare at most {limit} instances (split the work into chunks), or raise "
            "[core] max_map_length.",
        )
    if not is_mapped(task):
        return (
            "declares map_length but is not a mapped task.",
            "drop map_length, or map the task with .expand().",
        )
    return None


def map_length_findings(dag_id: str, tasks: Mapping[str, Any]) -> list[Finding]:
    """An error for every ``map_length`` more than Airflow's ``[core] max_map_length`` or on a task that
    is not mapped (one that is not a whole number >= 0 is the contract's ``bad-map-length`` problem)."""
    findings = []
    for task_id, task in tasks.items():
        value = read_contract(getattr(task, "executor_config", None)).map_length
        if value is None:
            continue
        problem = _map_length_problem(task, value)
        if problem is not None:
            findings.append(Finding(ERROR, "bad-map-length", dag_id, task_id, *problem))
    return findings


def map_lengths(
    dag: Any, history: Mapping[str, int] | None = None
) -> tuple[dict[str, int | None], dict[str, str]]:
    """``(task_id -> N or None, task_id -> source)`` for every mapped task of ``dag``; the source is
    ``expand``, ``history`` or ``declared`` (see the module docstring)."""
    counts: dict[str, int | None] = {}
    sources: dict[str, str] = {}
    for task_id in mapped_task_ids(dag):
        task = dag.task_dict[task_id]
        for source, count in (
            ("expand", literal_map_length(task)),
            ("history", (history or {}).get(task_id)),
            ("declared", declared_map_length(task)),
        ):
            if count is not None:
                counts[task_id], sources[task_id] = int(count), source
                break
        else:
            counts[task_id] = None
    return counts, sources


def _closest_group_id(task: Any) -> str | None:
    for group in _mapped_groups(task):
        return str(getattr(group, "group_id", None) or id(group))
    return None


def index_wise_pairs(dag: Any, task_ids: Sequence[str]) -> set[tuple[str, str]]:
    """Edges between two mapped tasks of the same mapped task group (joined instance by instance)."""
    group = {t: _closest_group_id(dag.task_dict[t]) for t in task_ids}
    pairs = set()
    for up in task_ids:
        for down in getattr(dag.task_dict[up], "downstream_task_ids", ()) or ():
            if down in group and group[up] is not None and group[up] == group[down]:
                pairs.add((up, str(down)))
    return pairs


def expand_dag_graph(dag: Any, graph: TaskGraph, history: Mapping[str, int] | None = None) -> TaskGraph:
    """``graph`` (read from ``dag``) with its mapped tasks expanded into their instances."""
    counts, sources = map_lengths(dag, history)
    if not counts:
        return graph
    return expand_mapped(graph, counts, index_wise_pairs(dag, list(counts)), sources)
