"""When a DAG run was triggered, as seen by ``get_weight`` (which gets a task instance, not its run).

In order: the run's ``run_after`` (or ``queued_at``) when the task instance carries its loaded run; the
timestamp in the run id of a manual or asset-triggered run (``manual__2026-11-30T12:00:00+00:00``: the
moment it was triggered); otherwise the first moment this process saw the run (scheduled runs are
created when they are due, by the scheduler that creates their task instances). Never touches the
database: a lazy load inside the scheduler's transaction is exactly what ``get_weight`` must not do.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["TriggerTimes", "parse_run_id_time"]

#: Run types whose run id carries the moment the run was created (Airflow 3: run_after for a manual
#: run without a logical date). Scheduled and backfill run ids carry the logical date instead.
_CREATED_AT_ID = ("manual", "asset_triggered", "dataset_triggered")
_RUN_ID = re.compile(r"^(?P<type>[a-z_]+)__(?P<when>\d{4}-\d\d-\d\dT[^ ]+)$")


def parse_run_id_time(run_id: str) -> float | None:
    """Epoch seconds in a manual / asset-triggered run id, else None."""
    match = _RUN_ID.match(run_id or "")
    if not match or match.group("type") not in _CREATED_AT_ID:
        return None
    try:
        moment = datetime.fromisoformat(match.group("when").replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _loaded_run_time(ti: Any) -> float | None:
    run = getattr(ti, "__dict__", {}).get("dag_run")  # loaded already: no lazy load, no query
    for name in ("run_after", "queued_at"):
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
        found = _loaded_run_time(ti)
        if found is None:
            found = parse_run_id_time(key[1])
        if found is None:
            found = self._clock()
        with self._lock:
            self._seen[key] = found
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
        return found
