"""Task-instance contexts for the fallback ladder's decision, join and start-deadline tasks (the
operators, the sensor and the authoring of a ladder): a DAG to hold them and the context of a task
instance whose Execution API answers with given task states and XComs, plain or at map index 1 of an
expanded task group."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

from airflow.sdk import DAG

#: The run every context is in.
RUN_ID = "manual__2026-11-30T00:00:00+00:00"


def ladder_dag(dag_id: str = "fb", **kwargs: Any) -> DAG:
    """A DAG without a schedule to hold the tasks of a ladder (``fba`` for the mapped contexts)."""
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), **kwargs)


def mapped_ladder_context(
    states: dict[str, str | None], xcoms: dict[tuple[str, str], Any] | None = None, waited=0.0
):
    """:func:`ladder_context` for a task instance of DAG ``fba`` with map index 1 in an expanded task
    group: the Execution API keys the states of mapped task instances ``<task_id>_<map_index>``, and an
    XCom pull without ``map_indexes`` returns the values of every map index."""
    xcoms = dict(xcoms or {})
    pushed: list[tuple[str, Any]] = []

    def get_task_states(dag_id, task_ids, run_ids, map_index=None):
        rows = {f"{t}_{i}": states.get(t) for t in task_ids for i in (0, 1, 2) if map_index in (None, i)}
        return {RUN_ID: rows}

    def xcom_pull(task_ids, key="return_value", map_indexes=None):
        value = xcoms.get((task_ids, key))
        if map_indexes is None:  # the Task SDK returns the values of every map index
            return [value, value, value]
        return value if map_indexes == 1 else None

    ti = SimpleNamespace(
        dag_id="fba",
        map_index=1,
        start_date=datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=waited),
        get_task_states=get_task_states,
        get_first_reschedule_date=lambda context: None,
        xcom_pull=xcom_pull,
        xcom_push=lambda key, value: pushed.append((key, value)),
    )
    return {"ti": ti, "run_id": RUN_ID}, pushed


def ladder_context(
    states: dict[str, str | None], xcoms: dict[tuple[str, str], Any] | None = None, waited: float = 0
):
    """A task instance of DAG ``fb`` (no map index) that started ``waited`` seconds ago: the Execution API
    answers with these task ``states`` and ``xcoms`` (by task id and key); the context and the list of
    what the task pushed."""
    xcoms = dict(xcoms or {})
    pushed: list[tuple[str, Any]] = []

    def xcom_pull(task_ids: str, key: str = "return_value") -> Any:
        return xcoms.get((task_ids, key))

    ti = SimpleNamespace(
        dag_id="fb",
        map_index=-1,
        start_date=datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=waited),
        get_task_states=lambda dag_id, task_ids, run_ids: {RUN_ID: {t: states.get(t) for t in task_ids}},
        get_first_reschedule_date=lambda context: None,
        xcom_pull=xcom_pull,
        xcom_push=lambda key, value: pushed.append((key, value)),
    )
    return {"ti": ti, "run_id": RUN_ID}, pushed
