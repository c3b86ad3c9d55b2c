"""Task-instance fields from the REST API, read defensively.

The controller reads task instances written by every DAG of the deployment; a field of the wrong type
(a string priority, NaN, a huge number, a missing key) must cost at most that task instance, never the
tick. Each reader returns a sane value (clamped to Airflow's own bounds) or the documented default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from airflow_gpu_dag.hooks.rest_client import parse_time

__all__ = [
    "INT32_MAX",
    "MAX_DURATION_S",
    "MAX_SLOTS",
    "as_int",
    "duration",
    "key",
    "order",
    "priority",
    "scheduled_time",
    "slots",
    "start_time",
]

INT32_MAX = 2**31 - 1
#: More slots than any pool could hold; a larger value is clamped.
MAX_SLOTS = 1_000_000
#: Ten years: a longer (or infinite) estimate is clamped.
MAX_DURATION_S = 10 * 365 * 86400.0


def as_int(value: object, default: int, low: int, high: int) -> int:
    """``value`` as an int within ``[low, high]``; ``default`` when it is not a finite number."""
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = value if isinstance(value, int) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return default
    if isinstance(number, float):
        if not math.isfinite(number):
            return default
        number = int(number)
    return max(low, min(high, number))


def slots(ti: Mapping[str, Any]) -> int:
    """``pool_slots`` (at least 1, as Airflow requires)."""
    return as_int(ti.get("pool_slots"), 1, 1, MAX_SLOTS)


def priority(ti: Mapping[str, Any]) -> int:
    """``priority_weight`` within int32 (0 when unreadable)."""
    return as_int(ti.get("priority_weight"), 0, -INT32_MAX - 1, INT32_MAX)


def key(ti: Mapping[str, Any]) -> str:
    """``dag/run/task/map_index``: the task instance's identity in decisions and descriptions."""
    index = as_int(ti.get("map_index"), -1, -1, INT32_MAX)
    return f"{ti.get('dag_id')}/{ti.get('dag_run_id')}/{ti.get('task_id')}/{index}"


def order(ti: Mapping[str, Any]) -> tuple[str, int]:
    """Airflow's tie-break after the priority: logical date (else run after), then map index."""
    when = ti.get("logical_date") or ti.get("run_after") or ""
    return str(when), as_int(ti.get("map_index"), -1, -1, INT32_MAX)


def start_time(ti: Mapping[str, Any]) -> float | None:
    """``start_date`` as epoch seconds (None when absent or unreadable)."""
    return _epoch_seconds(ti, "start_date")


def scheduled_time(ti: Mapping[str, Any]) -> float | None:
    """``scheduled_when`` (Airflow 3: when the task instance turned SCHEDULED, i.e. ready) as epoch
    seconds (None when absent or unreadable)."""
    return _epoch_seconds(ti, "scheduled_when")


def _epoch_seconds(ti: Mapping[str, Any], field: str) -> float | None:
    try:
        value = parse_time(ti.get(field))
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value is not None and math.isfinite(value) else None


def duration(value: float | None, default: float) -> float:
    """An estimate in seconds: ``default`` unless finite and >= 0; at most :data:`MAX_DURATION_S`."""
    if value is None or isinstance(value, bool):
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return default
    if not math.isfinite(seconds) or seconds < 0:
        return default
    return min(seconds, MAX_DURATION_S)
