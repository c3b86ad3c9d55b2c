"""Failure (rollback) policies per task: retry with backoff, skip, or abort the downstream chain.

    from airflow_gpu_dag.authoring import Retry, failure_policy

    failure_policy(train, Retry(retries=3, delay="2m", max_delay="30m"))  # exponential backoff
    failure_policy(evaluate_extra, "skip")   # a failure becomes "skipped"; downstream follows its rules
    failure_policy(pretrain, "abort")        # nothing downstream of it runs after it failed

- **retry**: Airflow retries with ``retry_exponential_backoff`` and ``max_retry_delay``; downstream
  waits (``up_for_retry`` is not a final state), and is blocked (``upstream_failed``) only when the
  last try failed.
- **skip**: after the last try the failure is turned into ``skipped`` (the task's log keeps the
  error); a failure Airflow never retries (``AirflowFailException``, a sensor timeout) at once.
  Downstream tasks then do what their trigger rule says: ``all_success`` tasks are skipped,
  ``none_failed``/``all_done`` tasks continue. The run does not fail because of this task.
- **abort**: no retries; every downstream task whose trigger rule would still run after a failed
  upstream (``all_done``, ``one_success``, ``always``, ...) is switched to ``none_failed``, so the
  whole chain below ends ``upstream_failed``. Teardown (cleanup) tasks keep their rule and still run,
  and so do failure handlers (``one_failed``, ``all_failed``: an alert): switched to ``none_failed``
  they would run only when nothing failed, alerting on success and never on the abort. So do the
  control tasks of a :func:`~airflow_gpu_dag.authoring.fallback_ladder` below it: they already stop
  the ladder when its rung never became ready, and under ``none_failed`` a rung that did not start in
  time (a failure by design) would stop it too. The tasks changed are returned and logged.

A task keeps the policy given last: ``"skip"`` followed by ``"retry"`` retries and does not skip.

A data producer's failure with a previous good artifact is handled on the data edge
(``data_edge(..., fallback_to_last_good=True)``), not here.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import TriggerRule
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
)

from airflow_gpu_dag.airflow.mapped import is_mapped
from airflow_gpu_dag.authoring._wiring import as_operator, run_original, where_of
from airflow_gpu_dag.core.model.resources import EstimateError, parse_duration
from airflow_gpu_dag.operators.fallback import FallbackDecision, FallbackResult

__all__ = ["POLICY_NAMES", "Abort", "Retry", "Skip", "failure_policy", "parse_policy"]

log = logging.getLogger(__name__)

#: Policy names accepted by :func:`failure_policy`.
POLICY_NAMES = ("retry", "skip", "abort")

#: Trigger rules under which a task can still run after an upstream failed.
RUNS_AFTER_FAILURE = frozenset(
    {
        "all_done",
        "all_done_min_one_success",
        "all_failed",
        "one_failed",
        "one_done",
        "one_success",
        "none_skipped",
        "always",
    }
)

#: Trigger rules of failure handlers (an alert, a rollback): they exist to run after a failure, so the
#: abort policy leaves them alone.
FAILURE_HANDLERS = frozenset({"one_failed", "all_failed"})


def _seconds(value: object, what: str, where: str) -> float:
    try:
        return parse_duration(value)
    except EstimateError as err:
        raise ValueError(f"{where}: {what}: {err}; use seconds or e.g. '2m', '1h'.") from None


@dataclass(frozen=True)
class Retry:
    """Retry ``retries`` times, waiting ``delay`` (doubling when ``backoff``) up to ``max_delay``."""

    retries: int = 3
    delay: float | str | timedelta = 60.0
    backoff: bool = True
    max_delay: float | str | timedelta | None = None


@dataclass(frozen=True)
class Skip:
    """Turn the failure into ``skipped`` after ``retries`` extra tries."""

    retries: int = 0


@dataclass(frozen=True)
class Abort:
    """Fail at once (no retries) and block the whole downstream chain."""


Policy = Retry | Skip | Abort


def parse_policy(spec: object, where: str = "") -> Policy:
    """A policy from an object or a name (``"retry"``, ``"skip"``, ``"abort"``).

    :raises ValueError: unknown name; the message lists the valid ones and names ``where``.
    """
    if isinstance(spec, (Retry, Skip, Abort)):
        return spec
    if isinstance(spec, str) and spec.strip().lower() in POLICY_NAMES:
        return {"retry": Retry, "skip": Skip, "abort": Abort}[spec.strip().lower()]()
    prefix = f"{where}: " if where else ""
    raise ValueError(
        f"{prefix}unknown failure policy {spec!r}; use one of {', '.join(POLICY_NAMES)} "
        "(or Retry(retries=..., delay=...), Skip(), Abort())."
    )


def _check_retries(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: retries={value!r} must be a whole number >= 0.")
    return value


#: The policy a task was given last; the 'skip' wrapper acts only while it is 'skip' (a later
#: ``failure_policy(task, "retry")`` or ``"abort"`` replaces it).
POLICY_ATTR = "_gpu_dag_failure_policy"


def _tries_left(ti: Any, task: Any) -> bool:
    """Whether Airflow will retry this failure: ``try_number <= max_tries`` (``max_tries`` grows when
    the task is cleared), else the task's ``retries``."""
    try_number = int(getattr(ti, "try_number", 1) or 1)
    max_tries = getattr(ti, "max_tries", None)
    if isinstance(max_tries, int) and not isinstance(max_tries, bool):
        return try_number <= max_tries
    return try_number <= int(getattr(task, "retries", 0) or 0)


def _skip_on_failure(task: Any) -> None:
    original = task.execute
    if getattr(original, "_gpu_dag_skip_policy", False):
        return

    @functools.wraps(original)
    def execute(context: Any) -> Any:
        # Airflow runs a rendered copy of the operator (context["task"]): run execute on it, not on
        # the parsed object, whose templated fields were never rendered
        runs = context.get("task") if isinstance(context, Mapping) else None
        runs = runs if isinstance(runs, type(task)) else task
        try:
            return run_original(task, original, runs, context)
        except AirflowSkipException:
            raise
        except (Exception, AirflowTaskTimeout) as err:
            if getattr(runs, POLICY_ATTR, "skip") != "skip":  # a later failure_policy() replaced it
                raise
            never_retried = isinstance(err, (AirflowFailException, AirflowSensorTimeout))
            if not never_retried and _tries_left(context.get("ti"), runs):
                raise  # tries left: let Airflow retry first
            log.warning("task %s failed (%s); skipping it (failure policy 'skip')", task.task_id, err)
            raise AirflowSkipException(f"failure policy 'skip': {type(err).__name__}: {err}") from err

    execute._gpu_dag_skip_policy = True  # type: ignore[attr-defined]
    task.execute = execute


def failure_policy(task: Any, policy: object = "retry", **overrides: Any) -> list[str]:
    """Apply ``policy`` to ``task``; returns the ids of other tasks it changed (abort only).

    ``overrides`` are fields of the policy, e.g. ``failure_policy(t, "retry", retries=5, delay="5m")``;
    on a policy object they replace only the fields they name (``Retry(retries=5), delay="5m"``).
    """
    task = as_operator(task)  # an @task call's result: its operator
    where = where_of(task)
    parsed = parse_policy(policy, where)
    if overrides:
        try:  # on a policy object: its own fields stay, the overrides replace only theirs
            parsed = dataclasses.replace(parsed, **overrides)
        except TypeError as err:
            raise ValueError(
                f"{where}: bad options for failure policy {type(parsed).__name__}: {err}"
            ) from None
    setattr(task, POLICY_ATTR, type(parsed).__name__.lower())
    if isinstance(parsed, Retry):
        task.retries = _check_retries(parsed.retries, where)
        task.retry_delay = timedelta(seconds=_seconds(parsed.delay, "delay", where))
        task.retry_exponential_backoff = bool(parsed.backoff)
        if parsed.max_delay is not None:
            task.max_retry_delay = timedelta(seconds=_seconds(parsed.max_delay, "max_delay", where))
        return []
    if isinstance(parsed, Skip):
        if is_mapped(task):  # its instances' execute is not this object's: it cannot be wrapped
            raise ValueError(
                f"{where}: the 'skip' policy needs a task that is not mapped (.expand()). Fix: catch the "
                "failure in the mapped task itself (raise AirflowSkipException), or use 'retry'/'abort'."
            )
        task.retries = _check_retries(parsed.retries, where)
        _skip_on_failure(task)
        return []
    if not task.has_dag():  # ``task.dag`` itself raises a RuntimeError naming neither task nor fix
        raise ValueError(
            f"{where}: add the task to a DAG (create it inside with DAG(...):) before applying the "
            "'abort' policy: it changes the tasks downstream of it."
        )
    task.retries = 0
    changed: list[str] = []
    for down in task.get_flat_relatives(upstream=False):
        if getattr(down, "is_teardown", False):
            continue
        if isinstance(down, (FallbackDecision, FallbackResult)):
            continue  # a ladder's own control tasks judge an upstream failure themselves
        rule = str(getattr(down.trigger_rule, "value", down.trigger_rule))
        if rule in RUNS_AFTER_FAILURE and rule not in FAILURE_HANDLERS:
            down.trigger_rule = TriggerRule.NONE_FAILED
            changed.append(down.task_id)
    if changed:
        log.info("abort policy of %s: trigger rule of %s set to none_failed", task.task_id, sorted(changed))
    return sorted(changed)
