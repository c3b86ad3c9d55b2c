"""The operators behind a fallback ladder (:func:`airflow_gpu_dag.authoring.fallback_ladder`).

:class:`FallbackDecision` decides after a rung whether the next rung runs (only when the rung did not
*start* in time), :class:`FallbackResult` returns the result of the rung that ran. A task that gives up
waiting for its resources itself raises :class:`NotStartedInTime` after :func:`mark_not_started` (the
GPU pod operator does); :class:`~airflow_gpu_dag.sensors.start_deadline.StartDeadlineSensor` does it
for a task waiting in an Airflow pool. See docs/fallback.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_gpu_dag.deferral import resume_race_retry

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = [
    "FALLBACK_XCOM_KEY",
    "NOT_STARTED_STATES",
    "RUNG_XCOM_KEY",
    "FallbackDecision",
    "FallbackResult",
    "NotStartedInTime",
    "mark_not_started",
    "own_map_index",
    "task_states",
]

#: XCom key under which a task or watcher records that a rung did not start in time.
FALLBACK_XCOM_KEY = "gpu_dag_fallback"
#: XCom key of ``<ladder>.result`` naming the rung whose result it returns.
RUNG_XCOM_KEY = "fallback_rung"
#: Task states of a rung that has not got its resources yet.
NOT_STARTED_STATES = frozenset({None, "none", "scheduled"})


class NotStartedInTime(AirflowFailException):
    """A task could not get its resources within its deadline (it never started its work).

    Subclass of ``AirflowFailException``: the task fails without retries, because retrying is the
    same as waiting longer; make the deadline longer instead. Raise it after
    :func:`mark_not_started` so a fallback ladder can tell this failure from a crash.
    """


def mark_not_started(context: Context, reason: str) -> None:
    """Record in XCom that this task did not start its work in time (read by the ladder)."""
    context["ti"].xcom_push(key=FALLBACK_XCOM_KEY, value={"outcome": "not_started", "reason": reason})


def own_map_index(context: Context) -> int | None:
    """The calling task instance's map index in an expanded task group; None when it is not mapped."""
    map_index = getattr(context["ti"], "map_index", None)
    return map_index if isinstance(map_index, int) and map_index >= 0 else None


def task_states(context: Context, task_ids: Sequence[str]) -> dict[str, str | None]:
    """States of ``task_ids`` in this DAG run, through the Task SDK (Execution API). In an expanded
    task group (the calling task instance is mapped) the states of the same map index: the API keys
    those ``<task_id>_<map_index>``."""
    ti = context["ti"]
    run_id = context["run_id"]
    map_index = own_map_index(context)
    if map_index is not None:
        found = ti.get_task_states(
            dag_id=ti.dag_id, task_ids=list(task_ids), run_ids=[run_id], map_index=map_index
        )
        by_task = (found or {}).get(run_id, {}) or {}
        return {task_id: _state_str(by_task.get(f"{task_id}_{map_index}")) for task_id in task_ids}
    found = ti.get_task_states(dag_id=ti.dag_id, task_ids=list(task_ids), run_ids=[run_id])
    by_task = (found or {}).get(run_id, {}) or {}
    return {task_id: _state_str(by_task.get(task_id)) for task_id in task_ids}


def _pull(context: Context, task_id: str, key: str = "return_value") -> Any:
    """XCom of ``task_id`` in this run (of the same map index in an expanded task group: without
    ``map_indexes`` the Task SDK returns the values of every map index)."""
    map_index = own_map_index(context)
    if map_index is None:
        return context["ti"].xcom_pull(task_ids=task_id, key=key)
    return context["ti"].xcom_pull(task_ids=task_id, key=key, map_indexes=map_index)


def _state_str(state: Any) -> str | None:
    if state is None:
        return None
    return str(getattr(state, "value", state))


def _not_started_reason(
    context: Context, rung_task_id: str, watcher_task_id: str | None
) -> tuple[str | None, str | None]:
    """``(reason, rung_state)``: reason is set when the rung provably did not start in time."""
    ids = [rung_task_id] + ([watcher_task_id] if watcher_task_id else [])
    states = task_states(context, ids)
    rung_state = states[rung_task_id]
    if watcher_task_id and rung_state == "skipped":
        mark = _pull(context, watcher_task_id, FALLBACK_XCOM_KEY)
        if isinstance(mark, Mapping) and mark.get("outcome") == "not_started":
            return str(mark.get("reason")), rung_state
    if rung_state in ("failed", "skipped"):
        mark = _pull(context, rung_task_id, FALLBACK_XCOM_KEY)
        if isinstance(mark, Mapping) and mark.get("outcome") == "not_started":
            return str(mark.get("reason")), rung_state
    return None, rung_state


def _infrastructure_retries(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The DAG's ``retries`` (at least 1, 5 s apart) for a ladder's decision and join tasks. Their own
    outcomes never retry (a skip, or ``AirflowFailException`` for an exhausted ladder); with none, a
    try killed with the scheduler or an Execution API call made while the api-server restarted failed
    the run (the chaos test caught an ``exhausted`` that way)."""
    return resume_race_retry(kwargs)


class FallbackDecision(BaseOperator):
    """After a rung is done: fall back to the next rung only if the rung did not start in time.

    Trigger rule ``all_done``. Succeeds (so its downstream, the next rung, runs) when the rung was
    skipped by its start-deadline watcher or failed with :class:`NotStartedInTime`; otherwise
    skips itself and thereby every later rung. With ``next_rung=None`` (the end of the ladder) a
    rung that did not start fails this task, with the reason of every rung, instead.
    """

    ui_color = "#f6d6ff"

    def __init__(
        self,
        *,
        rung_task_id: str,
        watcher_task_id: str | None,
        next_rung: str | None,
        ladder: Sequence[tuple[str, str | None]] = (),
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**_infrastructure_retries(kwargs))
        self.rung_task_id = rung_task_id
        self.watcher_task_id = watcher_task_id
        self.next_rung = next_rung
        self.ladder: list[tuple[str, str | None]] = [(str(a), b) for a, b in ladder]

    def execute(self, context: Context) -> Any:
        reason, state = _not_started_reason(context, self.rung_task_id, self.watcher_task_id)
        if reason is None:
            raise AirflowSkipException(
                f"{self.rung_task_id} ended {state or 'without running'}: it was not starved of resources, "
                "so no fallback"
            )
        if self.next_rung is not None:
            self.log.warning("%s; falling back to %s", reason, self.next_rung)
            return {"from": self.rung_task_id, "to": self.next_rung, "reason": reason}
        reasons = []
        for rung_task_id, watcher_task_id in self.ladder or [(self.rung_task_id, self.watcher_task_id)]:
            why, st = _not_started_reason(context, rung_task_id, watcher_task_id)
            reasons.append(f"{rung_task_id}: {why or st}")
        raise AirflowFailException(
            "fallback ladder exhausted, no rung could start: "
            + "; ".join(reasons)
            + ". Give the last rung a "
            "longer start_within, add a smaller rung, or free/add GPUs to the pools"
        )


class FallbackResult(BaseOperator):
    """Join of a ladder (trigger rule ``one_success``): the result of the rung that succeeded."""

    ui_color = "#d6f5d6"

    def __init__(self, *, rung_task_ids: Sequence[str], **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "one_success")
        super().__init__(**_infrastructure_retries(kwargs))
        self.rung_task_ids = list(rung_task_ids)

    def execute(self, context: Context) -> Any:
        states = task_states(context, self.rung_task_ids)
        winners = [t for t in self.rung_task_ids if states[t] == "success"]
        if not winners:  # one_success guarantees one; be explicit if it ever does not hold
            raise AirflowFailException(f"no rung succeeded: {states}")
        winner = winners[0]
        context["ti"].xcom_push(key=RUNG_XCOM_KEY, value=winner)
        self.log.info("result of %s (rung states: %s)", winner, states)
        return _pull(context, winner)
