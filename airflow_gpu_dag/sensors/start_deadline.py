"""Start deadline: skip a task of the same run that has not got its resources in time.

Used by :func:`airflow_gpu_dag.authoring.fallback_ladder` for a rung that waits in an Airflow pool.
"""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.bases.skipmixin import SkipMixin
from airflow.sdk.exceptions import DownstreamTasksSkipped

from airflow_gpu_dag.core.model.resources import parse_duration
from airflow_gpu_dag.deferral import declared_where
from airflow_gpu_dag.operators.fallback import (
    FALLBACK_XCOM_KEY,
    NOT_STARTED_STATES,
    own_map_index,
    task_states,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["ENDED_STATES", "StartDeadlineSensor"]

#: States of a watched task that ended without telling whether it ever got its resources.
ENDED_STATES = frozenset({"failed", "upstream_failed", "skipped", "removed"})


class StartDeadlineSensor(BaseSensorOperator, SkipMixin):
    """Watch a task of the same run; if it has not started after ``start_within``, skip it.

    Succeeds with XCom ``{"outcome": "started", "state": ...}`` as soon as the watched task is
    queued, running or has succeeded, and with ``{"outcome": "ended", "state": ...}`` when it left
    its pool's queue some other way (failed, skipped or removed: by hand, by an upstream failure, by
    the controller): the sensor cannot tell whether it ever ran, and the ladder's decision reads the
    rung's own state and marks. After the deadline it pushes ``{"outcome": "not_started", ...}``
    under :data:`FALLBACK_XCOM_KEY` and skips the watched task, which removes it from its pool's
    queue (a task instance that is already running or finished is left alone by the skip).

    Runs in ``poke`` mode by default: one worker slot for at most ``start_within``. ``reschedule``
    mode frees the slot between checks, but with a short ``poke_interval`` Airflow 3.3's scheduler
    can see the previous check's executor event after it re-queued the sensor and fail it as
    "state changed externally" (observed here with a 2 s interval); use it with intervals of a
    minute or more.
    """

    ui_color = "#fde9c8"

    def __init__(
        self,
        *,
        watched_task_id: str,
        start_within: float | str | datetime.timedelta,
        poke_interval: float = 10,
        mode: str = "poke",
        **kwargs: Any,
    ) -> None:
        try:
            self.start_within = parse_duration(start_within)
        except ValueError as err:
            raise ValueError(f"{declared_where(kwargs)}: start_within: {err}") from None
        kwargs.setdefault("timeout", self.start_within + max(3600.0, 10 * float(poke_interval)))
        super().__init__(poke_interval=poke_interval, mode=mode, **kwargs)
        self.watched_task_id = watched_task_id
        self._first_poke: float | None = None

    def _waited(self, context: Context) -> float:
        """Seconds since the watch began: the first reschedule (reschedule mode) or this try's start."""
        ti = context["ti"]
        first = ti.get_first_reschedule_date(context) if self.reschedule else None
        if first is None:
            first = getattr(ti, "start_date", None)
        if first is not None:
            return (datetime.datetime.now(datetime.UTC) - first).total_seconds()
        if self._first_poke is None:
            self._first_poke = time.monotonic()
        return time.monotonic() - self._first_poke

    def poke(self, context: Context) -> bool | PokeReturnValue:
        state = task_states(context, [self.watched_task_id])[self.watched_task_id]
        if state in ENDED_STATES:
            self.log.info(
                "%s is %s: it left its pool's queue without this watcher (the ladder decides from its "
                "outcome)",
                self.watched_task_id,
                state,
            )
            return PokeReturnValue(is_done=True, xcom_value={"outcome": "ended", "state": state})
        if state not in NOT_STARTED_STATES:
            self.log.info("%s is %s: it got its resources in time", self.watched_task_id, state)
            return PokeReturnValue(is_done=True, xcom_value={"outcome": "started", "state": state})
        waited = self._waited(context)
        if waited < self.start_within:
            self.log.info(
                "%s still waiting (%s) after %.0fs of %.0fs",
                self.watched_task_id,
                state,
                waited,
                self.start_within,
            )
            return False
        reason = (
            f"{self.watched_task_id} did not start within {self.start_within:.0f}s "
            f"(still {state or 'not scheduled'} after {waited:.0f}s: its pool had no room)"
        )
        self.log.warning("%s; skipping it so the next rung can run", reason)
        context["ti"].xcom_push(
            key=FALLBACK_XCOM_KEY, value={"outcome": "not_started", "reason": reason, "by": self.task_id}
        )
        map_index = own_map_index(context)
        if map_index is not None:
            # in an expanded task group SkipMixin.skip() leaves mapped task instances alone (it would
            # return and the rung would wait forever): skip the rung of this map index
            raise DownstreamTasksSkipped(tasks=[(self.watched_task_id, map_index)])
        watched = self.get_dag().get_task(self.watched_task_id)  # type: ignore[union-attr]
        self.skip(context["ti"], [watched])  # raises DownstreamTasksSkipped: this task ends "success"
        return True  # pragma: no cover - skip() raises
