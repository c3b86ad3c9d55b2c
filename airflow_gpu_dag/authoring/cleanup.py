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

from airflow_gpu_dag.authoring._wiring import labelled, require_dag

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
    require_dag(task, "cleanup")
    after_list = [after] if hasattr(after, "task_id") else list(after)
    if not after_list:
        raise ValueError(f"task {task.task_id!r}: cleanup() needs after= the task(s) it cleans up after.")
    setup_list = None if setups is None else ([setups] if hasattr(setups, "task_id") else list(setups))
    task.as_teardown(setups=setup_list, on_failure_fail_dagrun=fail_run_on_cleanup_failure)
    for upstream in after_list:
        labelled(upstream, task, CLEANUP)
    return task
