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
    dag = require_dag(task, "cleanup")
    where = where_of(task)
    after_list = _tasks(after, where, "after")
    if not after_list:
        raise ValueError(f"{where}: cleanup() needs after= the task(s) it cleans up after.")
    if any(t.task_id == task.task_id for t in after_list):
        raise ValueError(
            f"{where}: cleanup() lists the task in its own after=. Fix: list the work it cleans up."
        )
    setup_list = None if setups is None else _tasks(setups, where, "setups")
    # everything checked before anything changes: a refused call leaves the DAG as it was
    for name, listed in (("after", after_list), ("setups", setup_list or [])):
        for other in listed:
            if not (other.has_dag() and other.dag is dag):
                raise ValueError(
                    f"{where}: cleanup({name}=...) names task {other.task_id!r} of another DAG (or none). "
                    "Fix: list tasks of this DAG."
                )
    if setup_list and any(t.task_id == task.task_id for t in setup_list):
        raise ValueError(
            f"{where}: cleanup() lists the task in its own setups=. Fix: list the tasks that create what it "
            "cleans up."
        )
    if any(task.task_id in t.get_flat_relative_ids(upstream=True) for t in after_list):
        raise ValueError(
            f"{where}: cleanup() would run after work that runs after it (a cycle). Fix: remove the edge "
            "from the cleanup to that work, or list other tasks in after=."
        )
    task.as_teardown(setups=setup_list, on_failure_fail_dagrun=fail_run_on_cleanup_failure)
    for upstream in after_list:
        labelled(upstream, task, CLEANUP)
    return task


def _tasks(value: Any, where: str, name: str) -> list[Any]:
    """One task (an operator or an ``@task`` call's result) or several, as operators.

    :raises ValueError: ``value`` is no task and no collection of tasks (a task id, None), naming the
        argument and the fix.
    """
    if hasattr(value, "task_id") or hasattr(value, "operator"):
        return [as_operator(value)]
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValueError(
            f"{where}: cleanup({name}={value!r}) needs the task objects, not task ids. Fix: pass the tasks, "
            f"e.g. {name}=train or {name}=[train, evaluate]."
        )
    tasks = [as_operator(v) for v in value]
    odd = next((t for t in tasks if not hasattr(t, "task_id")), None)
    if odd is not None:
        raise ValueError(
            f"{where}: cleanup({name}=...) holds {odd!r}, which is no task. Fix: pass the task objects."
        )
    return tasks
