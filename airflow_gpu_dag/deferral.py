"""Shared parse-time checks and retry defaults for the provider's sensors and deferring gates."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException

from airflow_gpu_dag.airflow.declaring import declaring_dag, declaring_group, partial_default
from airflow_gpu_dag.core.model.resources import real_number

__all__ = [
    "RESUME_RACE_RETRIES",
    "RESUME_RACE_RETRY_DELAY",
    "declared_where",
    "is_deferrable",
    "require_timeout",
    "resume_race_retry",
    "soft_failing",
]

#: Retries a deferrable task of this provider gets unless its author sets ``retries``. Airflow 3.3
#: (apache/airflow#72716, #71580; open in 3.3.2) can fail a deferred task whose trigger fires at once:
#: the executor's "success" for the worker's defer exit is drained only after the resumed try is
#: queued or running, and the scheduler takes it for an external kill ("state mismatch"). One quick
#: retry runs ``execute()`` again, which checks before it defers, so a met condition succeeds at once.
#: Intended failures (sensor timeouts, a missed window with ``on_missed="fail"``) raise
#: ``AirflowSensorTimeout`` / ``AirflowFailException`` and are never retried. A retried sensor starts
#: its timeout again.
RESUME_RACE_RETRIES = 1
#: Delay before that retry (Airflow's default of 5 minutes would hold the whole chain back).
RESUME_RACE_RETRY_DELAY = timedelta(seconds=5)


def is_deferrable(deferrable: bool | None) -> bool:
    """Whether a sensor or gate defers: ``deferrable`` when its author gave it (also through
    ``default_args``), else ``[operators] default_deferrable`` (False unless set), as Airflow's own
    deferrable operators choose. Deferring needs a running ``airflow triggerer``: a deployment without
    one keeps the default and waits in a worker instead of leaving the task deferred for ever."""
    if deferrable is not None:
        return bool(deferrable)
    return conf.getboolean("operators", "default_deferrable", fallback=False)


def declared_where(kwargs: dict[str, Any]) -> str:
    """``DAG 'd', task 't'`` for a sensor being constructed with ``kwargs`` (``task 't'`` outside any
    DAG): how its constructor errors name it. ``t`` carries its task group's prefix, as Airflow will."""
    task_id = str(kwargs.get("task_id", "?"))
    dag = declaring_dag(kwargs)
    dag_id = getattr(dag, "dag_id", None)
    if dag_id is None:
        return f"task {task_id!r}"
    try:
        group = declaring_group(kwargs, dag)
        task_id = group.child_id(task_id) if group is not None else task_id
    except Exception:  # the plain id is still a useful name
        pass
    return f"DAG {dag_id!r}, task {task_id!r}"


@contextmanager
def soft_failing(sensor: Any) -> Iterator[None]:
    """Raise what Airflow's own sensor loop raises for a failure the sensor finds outside ``poke()`` (its
    first check, before it defers or pokes): ``AirflowSkipException`` under ``soft_fail`` or
    ``never_fail``, the failure itself otherwise."""
    try:
        yield
    except (AirflowFailException, AirflowSensorTimeout) as err:
        for flag in ("soft_fail", "never_fail"):
            if getattr(sensor, flag, False):
                raise AirflowSkipException(f"Skipping due to {flag} is set to True: {err}") from err
        raise


#: The longest timeout taken (100 years): Airflow keeps a sensor's timeout as a ``timedelta`` and adds
#: it to dates, which overflow long before ``float`` does (``1e300`` s); a longer one is a typo.
_LONGEST_TIMEOUT_S = timedelta(days=36500).total_seconds()


def require_timeout(
    task_id: str, sensor: str, timeout: float | timedelta | None, *, where: str | None = None
) -> float:
    """Seconds of ``timeout``; a missing or non-positive one is a parse-time error naming the task
    (``where``, e.g. ``DAG 'd', task 't'``, instead of ``task 't'`` when given)."""
    where = where or f"task {task_id!r}"
    if timeout is None:
        raise ValueError(
            f"{where}: {sensor} needs an explicit timeout; a dataset that never completes would "
            f"otherwise block the run for days. Pass timeout=timedelta(hours=2) (or seconds)."
        )
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else real_number(timeout)
    if not 0 < seconds <= _LONGEST_TIMEOUT_S:  # NaN fails too; an int beyond a float reads as inf
        raise ValueError(
            f"{where}: {sensor} timeout={timeout!r} must be a positive (finite) number of "
            "seconds or a timedelta, e.g. timeout=timedelta(hours=2)."
        )
    return seconds


def require_poke_interval(poke_interval: object, where: str) -> float:
    """Seconds between a sensor's checks; one that is not a finite number > 0 (NaN, ``inf``, ``-1``) is a
    parse-time error naming the task (``where``), where Airflow's own names neither DAG nor task."""
    seconds = real_number(poke_interval)
    if not 0 < seconds < math.inf:  # NaN fails too
        raise ValueError(
            f"{where}: poke_interval={poke_interval!r} is not a finite number of seconds > 0. Fix: pass "
            "e.g. poke_interval=30."
        )
    return seconds


def resume_race_retry(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with ``retries``/``retry_delay`` defaulted for the resume race.

    The task's own values win. Else ``retries`` is the ``default_args`` one of its DAG or task group,
    at least :data:`RESUME_RACE_RETRIES` (set here, it is an explicit argument, which Airflow prefers
    to ``default_args``: before, ``default_args={"retries": 3}`` gave every other task 3 retries and
    these sensors 1), and ``retry_delay`` stays :data:`RESUME_RACE_RETRY_DELAY`: a retried sensor
    only checks again, and a DAG's 5- or 10-minute delay would hold the whole chain back.
    """
    retries = partial_default(kwargs, "retries")  # the task's own, else its default_args
    if isinstance(retries, int) and not isinstance(retries, bool):
        kwargs.setdefault("retries", max(retries, RESUME_RACE_RETRIES))
    kwargs.setdefault("retries", RESUME_RACE_RETRIES)
    kwargs.setdefault("retry_delay", RESUME_RACE_RETRY_DELAY)
    return kwargs
