"""When a DAG run was triggered, as seen by ``get_weight`` (which gets a task instance, not its run).

In order: the run's ``run_after`` (or ``queued_at``; ``created_at`` for a scheduled or backfill run)
when the task instance carries its loaded run; the timestamp in the run id of a manual,
operator-triggered, asset-triggered or asset-materialization run
(``manual__2026-11-30T12:00:00+00:00``: the moment it was triggered), with whatever Airflow 3 appends
after it (:func:`parse_run_id_time`); otherwise the first moment this process saw the run (scheduled
runs are created when they are due, by the scheduler that creates their task instances). Never touches
the database: a lazy load inside the scheduler's transaction is exactly what ``get_weight`` must not do.

A time more than :data:`CLOCK_SKEW` in the future is taken as now, and one more than
:data:`MAX_RUN_AGE` before now as that: a run id is user-settable over REST
(``manual__0001-01-01T00:00:00+00:00`` would put every task of the run ahead of every other DAG's,
``manual__9999-...`` behind all of them for ever), and no run waits for its GPUs that long. Either is
logged once per run.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["CLOCK_SKEW", "MAX_RUN_AGE", "TriggerTimes", "parse_run_id_time"]

log = logging.getLogger(__name__)

#: The oldest trigger time a run is weighed with, in seconds before now (30 days).
MAX_RUN_AGE = 30 * 86400.0
#: How far ahead of this process's clock a trigger time is taken as it is (clocks of the api-server that
#: named the run and of this scheduler may differ a little); beyond it, the run is weighed as of now.
CLOCK_SKEW = 600.0

#: Run types whose run id carries the moment the run was created: its ``run_after``, which for these
#: runs is when it was triggered (Airflow 2: ``dataset_triggered``). Scheduled and backfill run ids carry
#: the moment they were due by the schedule (long ago for a catch-up or a backfill): first seen instead.
_CREATED_AT_ID = (
    "manual",
    "operator_triggered",
    "asset_triggered",
    "asset_materialization",
    "dataset_triggered",
)
#: ``<type>__<run_after.isoformat()>`` and what Airflow 3.3 may append after it (``DagRunType``'s
#: ``generate_run_id``): ``_<8 random letters>`` (``DagRun.generate_run_id`` without a logical date:
#: asset-triggered runs, ``TriggerDagRunOperator``), ``__<8 random letters>`` or
#: ``__<partition key>__<8 random letters>`` (``CronPartitionTimetable``).
_RUN_ID = re.compile(
    r"^(?P<type>[a-z_]+?)__"
    r"(?P<when>\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d(?::?\d\d)?)?)"
    r"(?:_.*)?$",
    re.DOTALL,
)


def parse_run_id_time(run_id: str) -> float | None:
    """Epoch seconds in a manual, operator-triggered, asset-triggered or asset-materialization run id
    (a random or partition suffix after the time ignored), else None."""
    match = _RUN_ID.match(run_id or "")
    if not match or match.group("type") not in _CREATED_AT_ID:
        return None
    try:
        moment = datetime.fromisoformat(match.group("when").replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _loaded_run_time(ti: Any) -> float | None:
    """The loaded run's trigger time: ``run_after`` (or ``queued_at``) for the run types whose
    ``run_after`` is when they were triggered; ``created_at`` for the others. A backfill's or a catch-up
    run's ``run_after`` is when it was due by the schedule, possibly weeks ago: a task of it cleared
    over the api-server (which loads the run) would go ahead of every other DAG's."""
    run = getattr(ti, "__dict__", {}).get("dag_run")  # loaded already: no lazy load, no query
    kind = getattr(run, "run_type", None)
    kind = getattr(kind, "value", kind)
    if not isinstance(kind, str) or not kind:
        kind = str(getattr(ti, "run_id", "") or "").partition("__")[0]
    for name in ("run_after", "queued_at") if kind in _CREATED_AT_ID else ("created_at",):
        value = getattr(run, name, None) if run is not None else None
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return None


class TriggerTimes:
    """Trigger time per ``(dag_id, run_id)``, remembered (at most ``size`` runs) so every task instance
    of a run, mapped ones expanded later included, gets the same time in this process."""

    def __init__(self, size: int = 20_000, clock: Callable[[], float] = time.time) -> None:
        self._size = size
        self._clock = clock
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, ti: Any) -> float:
        key = (str(getattr(ti, "dag_id", "")), str(getattr(ti, "run_id", "")))
        with self._lock:
            known = self._seen.get(key)
            if known is not None:
                self._seen.move_to_end(key)
                return known
        now = self._clock()
        found = _loaded_run_time(ti)
        if found is None:
            found = parse_run_id_time(key[1])
        if found is None:
            found = now
        elif not now - MAX_RUN_AGE <= found <= now + CLOCK_SKEW:
            bounded = min(max(found, now - MAX_RUN_AGE), now)
            log.warning(
                "airflow-gpu-dag: run %r of DAG %r says it was triggered %.0f s %s; weighed as triggered "
                "%s (trigger times are kept within the last %.0f days)",
                key[1],
                key[0],
                abs(now - found),
                "ago" if found < now else "from now",
                "now" if bounded == now else f"{MAX_RUN_AGE / 86400:.0f} days ago",
                MAX_RUN_AGE / 86400,
            )
            found = bounded
        with self._lock:  # a thread that computed it first wins: every task of the run gets one time
            found = self._seen.setdefault(key, found)
            self._seen.move_to_end(key)
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
        return found
