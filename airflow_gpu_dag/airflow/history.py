"""Past runs of a DAG from Airflow's metadata database: durations and map counts to plan with.

For the processes that have a database session: the scheduler (the priority strategy), the
api-server (the Critical path page) and the CLI (``airflow gpu-dag plan`` / ``estimates``). The
watermark controller has no database access and reads the same over REST
(:mod:`airflow_gpu_dag.watermark.durations`). The estimation itself is pure
(:mod:`airflow_gpu_dag.core.analysis.estimates`).

The API the rest of the provider calls::

    estimates = learned_durations(dag_id, graph)           # task_id -> DurationEstimate
    learned = learned_task_graph(dag)                       # the DAG's graph planned with them
    learned.graph, learned.estimates, learned.map_counts, learned.findings

Both block on one or two queries (an index range scan of ``task_instance`` by ``dag_id``) and never
raise: when the history cannot be read (no database, a migration running, a permission problem)
every task falls back to its declared duration, each estimate's ``note`` says why, and the problem is
logged once per process and message, not once per task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from airflow.utils.session import create_session
from sqlalchemy import func, or_, select

from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.airflow.mapped import mapped_task_ids
from airflow_gpu_dag.core.analysis.estimates import (
    DurationEstimate,
    EstimateSettings,
    RunSample,
    estimate_durations,
    with_estimates,
)
from airflow_gpu_dag.core.analysis.validation import Finding
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.mapping import typical_map_count
from airflow_gpu_dag.log_once import LogOnce
from airflow_gpu_dag.settings import estimate_settings

log = logging.getLogger(__name__)

__all__ = [
    "MAP_COUNT_RUNS",
    "LearnedGraph",
    "learned_durations",
    "learned_task_graph",
    "read_history",
    "read_map_counts",
]

#: Map counts are taken from this many of the DAG's latest runs where the task was expanded (the
#: median, rounded up), looked for among MAP_COUNT_SCAN times as many of the DAG's latest runs.
MAP_COUNT_RUNS = 5
MAP_COUNT_SCAN = 4
#: Extra rows read per task beyond the window, so dropped tries (zero-length, skew) leave enough.
_SLACK = 2

_warned = LogOnce(log)

T = TypeVar("T")


def _epoch(value: Any) -> float | None:
    return value.timestamp() if value is not None else None


@contextmanager
def _session(session: Any) -> Iterator[Any]:
    if session is not None:
        yield session
        return
    # not the thread's scoped session: in the scheduler's thread (plan_in_background = false) that is
    # the scheduler's own, mid-transaction, and create_session() would commit and close it
    with create_session(scoped=False) as own:
        yield own


def read_history(
    dag_id: str, task_ids: Collection[str] | None = None, window: int = 20, *, session: Any = None
) -> dict[str, list[RunSample]]:
    """The latest successful tries of each task of ``dag_id`` (``task_id -> samples``, most recent
    first; about ``window`` of them per task, every map index counting as a try).

    Reads the ``task_instance`` table: a task instance's final try. Raises what the database raises.
    """
    # start-up: the ORM models load at the first read, not when the weight rule imports this module
    from airflow.models.taskinstance import TaskInstance as TI

    rank = (
        func.row_number()
        .over(partition_by=TI.task_id, order_by=(TI.end_date.desc(), TI.map_index.desc()))
        .label("rank")
    )
    query = select(
        TI.task_id, TI.map_index, TI.run_id, TI.state, TI.start_date, TI.end_date, TI.duration, rank
    ).where(TI.dag_id == dag_id, TI.state == "success")
    if task_ids is not None and len(task_ids) <= 500:
        query = query.where(TI.task_id.in_(list(task_ids)))
    ranked = query.subquery()
    limit = max(1, int(window)) * _SLACK + 2
    history: dict[str, list[RunSample]] = {}
    with _session(session) as active:
        rows = active.execute(
            select(ranked).where(ranked.c.rank <= limit).order_by(ranked.c.task_id, ranked.c.rank)
        ).all()
    for row in rows:
        history.setdefault(str(row.task_id), []).append(
            RunSample(
                duration=float(row.duration) if row.duration is not None else None,
                state=str(row.state),
                start=_epoch(row.start_date),
                end=_epoch(row.end_date),
                map_index=int(row.map_index),
                run_id=str(row.run_id),
            )
        )
    return history


def has_history(dag_id: str, *, session: Any = None) -> bool:
    """Whether ``dag_id`` has anything to learn from: a successful task instance, or a mapped one (its
    map count). One indexed ``LIMIT 1`` query; raises what the database raises."""
    from airflow.models.taskinstance import TaskInstance as TI  # start-up: see read_history

    query = (
        select(TI.task_id).where(TI.dag_id == dag_id, or_(TI.state == "success", TI.map_index >= 0)).limit(1)
    )
    with _session(session) as active:
        return active.execute(query).first() is not None


def read_map_counts(
    dag_id: str, task_ids: Collection[str], runs: int = MAP_COUNT_RUNS, *, session: Any = None
) -> dict[str, int]:
    """How many instances each mapped task of ``task_ids`` had in the DAG's latest ``runs`` runs
    where it was expanded (the median, rounded up; instances marked ``removed`` do not count)."""
    if not task_ids:
        return {}
    from airflow.models.dagrun import DagRun  # start-up: see read_history
    from airflow.models.taskinstance import TaskInstance as TI

    # the runs looked at: more than `runs`, as the newest ones may not have expanded the task yet
    # (queued, running, failed before it): they hold no instance and are skipped, not counted as none.
    # A derived table joined on, not `run_id IN (SELECT ... LIMIT n)`: MySQL and MariaDB refuse LIMIT
    # inside an IN subquery (error 1235); every database Airflow supports takes it in a FROM.
    recent = (
        select(DagRun.run_id.label("run_id"), DagRun.run_after.label("run_after"))
        .where(DagRun.dag_id == dag_id)
        .order_by(DagRun.run_after.desc())
        .limit(max(1, runs) * MAP_COUNT_SCAN)
        .subquery("recent_runs")
    )
    newest = func.max(recent.c.run_after)
    query = (
        select(TI.task_id, TI.run_id, func.count(), newest)
        .join(recent, recent.c.run_id == TI.run_id)
        .where(
            TI.dag_id == dag_id,
            TI.map_index >= 0,
            TI.task_id.in_(list(task_ids)),
            (TI.state.is_(None)) | (TI.state != "removed"),
        )
        .group_by(TI.task_id, TI.run_id)
        .order_by(newest.desc())
    )
    with _session(session) as active:
        rows = active.execute(query).all()
    per_task: dict[str, list[int]] = {}
    for task_id, _run_id, count, _after in rows:
        counts = per_task.setdefault(str(task_id), [])
        if len(counts) < max(1, runs):  # the latest `runs` runs where it was expanded
            counts.append(int(count))
    return {task_id: typical_map_count(counts) or 0 for task_id, counts in per_task.items() if counts}


def _once(message: str) -> None:
    _warned.warning(message, "%s", message)


def _guarded(what: str, dag_id: str, read: Callable[[], T]) -> tuple[T | None, str]:
    """``read()``, or None and a note when the history cannot be read (logged once)."""
    try:
        return read(), ""
    except Exception as err:
        reason = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        _once(
            f"airflow-gpu-dag: cannot read the {what} of DAG {dag_id!r} from the metadata database "
            f"({reason}); planning with the declared durations instead"
        )
        return None, f"history unreadable ({reason})"


def learned_durations(
    dag_id: str, graph: TaskGraph, settings: EstimateSettings | None = None, *, session: Any = None
) -> dict[str, DurationEstimate]:
    """``task_id -> DurationEstimate`` for every task of ``graph`` (read from DAG ``dag_id``) from its
    recent successful tries; never raises (see the module docstring)."""
    settings = settings or estimate_settings()
    if not settings.enabled:
        return estimate_durations(graph, {}, settings)
    task_ids = {str(n.attrs.get("map_of") or n.task_id) for n in graph.nodes.values()}
    history, note = _guarded(
        "task history", dag_id, lambda: read_history(dag_id, task_ids, settings.window, session=session)
    )
    return estimate_durations(graph, history or {}, settings, note=note)


@dataclass
class LearnedGraph:
    """A DAG's task graph planned with learned durations (and mapped tasks expanded).

    ``declared``: the graph as declared (mapped tasks expanded the same way), for comparisons.
    ``map_counts``: the instances of each mapped task in past runs (what the expansion used when no
    literal ``expand()`` argument said it).
    """

    graph: TaskGraph
    declared: TaskGraph
    estimates: dict[str, DurationEstimate]
    findings: list[Finding] = field(default_factory=list)
    map_counts: dict[str, int] = field(default_factory=dict)
    note: str = ""


def learned_task_graph(
    dag: Any,
    *,
    expand_mapped: bool = True,
    settings: EstimateSettings | None = None,
    default_duration: float | None = None,
    session: Any = None,
    past_runs: bool = True,
) -> LearnedGraph:
    """The graph of ``dag`` (authoring or serialized) with durations learned from its past runs and,
    with ``expand_mapped``, its mapped tasks expanded (N from literal ``expand()`` arguments, the last
    runs' map counts, or ``gpu_hints(map_length=N)``). Never raises because of the history.

    ``past_runs=False``: the DAG as declared, the metadata database is not read (declared estimates,
    map counts from literal arguments or ``map_length`` only)."""
    settings = settings or estimate_settings()
    if not past_runs:
        settings = replace(settings, enabled=False)
    dag_id = str(dag.dag_id)
    map_counts: dict[str, int] = {}
    note = ""
    if expand_mapped and past_runs:
        mapped = mapped_task_ids(dag)
        if mapped:
            counts, note = _guarded(
                "map counts", dag_id, lambda: read_map_counts(dag_id, mapped, session=session)
            )
            map_counts = counts or {}
    declared, findings = build_task_graph(
        dag, default_duration, expand_mapped=expand_mapped, map_counts=map_counts
    )
    estimates = learned_durations(dag_id, declared, settings, session=session)
    if not past_runs:
        note = "declared only, past runs not read"
    note = note or next((e.note for e in estimates.values() if e.note), "")
    return LearnedGraph(with_estimates(declared, estimates), declared, estimates, findings, map_counts, note)
