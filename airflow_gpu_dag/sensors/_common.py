"""Shared parse-time checks for the provider's sensors."""

from __future__ import annotations

from datetime import timedelta

__all__ = ["require_timeout"]


def require_timeout(task_id: str, sensor: str, timeout: float | timedelta | None) -> float:
    """Seconds of ``timeout``; a missing or non-positive one is a parse-time error naming the task."""
    if timeout is None:
        raise ValueError(
            f"task {task_id!r}: {sensor} needs an explicit timeout; a dataset that never completes would "
            f"otherwise block the run for days. Pass timeout=timedelta(hours=2) (or seconds)."
        )
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(
            f"task {task_id!r}: {sensor} timeout={timeout!r} must be a positive number of seconds "
            "or a timedelta, e.g. timeout=timedelta(hours=2)."
        )
    return float(seconds)
