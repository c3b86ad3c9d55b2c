"""Cleanup edges: a task that runs whatever happened upstream, without lying about the outcome.

    cleanup(release_scratch, after=[train, evaluate], setups=[allocate_scratch])

Semantics (chosen deliberately): the cleanup task becomes an Airflow **teardown**
(``as_teardown``): it runs once its upstream tasks are done, whether they succeeded, failed or were
skipped (trigger rule ``all_done_setup_success``: it is skipped only when a setup it tears down
never succeeded, i.e. there is nothing to clean). A teardown is *not* a leaf that decides the DAG
run's state, so a failed training run ends ``failed`` even though cleanup succeeded. An ordinary
``all_done`` leaf would instead make such a run end ``success`` — we never do that. A failing
cleanup does not fail an otherwise successful run unless ``fail_run_on_cleanup_failure=True``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_gpu_dag.authoring._wiring import as_operator, labelled, require_dag, where_of

__all__ = ["CLEANUP", "cleanup"]

#: Edge label of cleanup edges.
CLEANUP = "cleanup"


def cleanup(
    task: Any,
    *,
    after: Any | Iterable[Any],
    setups: Any | Iterable[Any] | None = None,
    fail_run_on_cleanup_failure: bool = False,
) -> Any:
    """Make ``task`` a teardown that runs after ``after`` whatever their outcome; returns ``task``.

    :param after: the task(s) whose work is cleaned up (edges labelled ``cleanup``).
    :param setups: optional setup task(s) that create what is cleaned (scratch space, a lease).
    :param fail_run_on_cleanup_failure: a failed cleanup fails the run even if the work succeeded.
    """
    task = as_operator(task)  # an @task call's result: its operator
    require_dag(task, "cleanup")
    where = where_of(task)
    after_list = _tasks(after)
    if not after_list:
        raise ValueError(f"{where}: cleanup() needs after= the task(s) it cleans up after.")
    if any(t.task_id == task.task_id for t in after_list):
        raise ValueError(
            f"{where}: cleanup() lists the task in its own after=. Fix: list the work it cleans up."
        )
    setup_list = None if setups is None else _tasks(setups)
    task.as_teardown(setups=setup_list, on_failure_fail_dagrun=fail_run_on_cleanup_failure)
    for upstream in after_list:
        labelled(upstream, task, CLEANUP)
    return task


def _tasks(value: Any) -> list[Any]:
    """One task (an operator or an ``@task`` call's result) or several, as operators."""
    if hasattr(value, "task_id") or hasattr(value, "operator"):
        return [as_operator(value)]
    return [as_operator(v) for v in value]
