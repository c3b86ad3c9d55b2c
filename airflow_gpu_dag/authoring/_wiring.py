"""Small graph surgery used by the edge helpers (kept visible: every inserted task is a real node)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Label, TriggerRule

from airflow_gpu_dag.airflow.mapped import is_mapped

__all__ = [
    "as_operator",
    "check_gatable",
    "follow_gate",
    "insert_before",
    "labelled",
    "require_dag",
    "run_original",
    "where_of",
]


def where_of(task: Any) -> str:
    """``DAG 'd', task 't'`` (``task 't'`` when it is in no DAG yet): how messages name a task."""
    has_dag = getattr(task, "has_dag", None)
    dag = (task.dag if has_dag() else None) if callable(has_dag) else getattr(task, "dag", None)
    return f"DAG {dag.dag_id!r}, task {task.task_id!r}" if dag is not None else f"task {task.task_id!r}"


def require_dag(task: Any, helper: str) -> Any:
    """The task's DAG, or a clear error when the task is not in one yet (Airflow 3's ``task.dag`` raises
    then, so ``has_dag`` is asked first)."""
    dag = task.dag if task.has_dag() else None
    if dag is None:
        raise ValueError(
            f"task {task.task_id!r}: create it inside a DAG (with DAG(...):) before calling {helper}()."
        )
    return dag


def labelled(upstream: Any, downstream: Any, label: str) -> None:
    """``upstream >> downstream`` with the edge labelled ``label`` (the graph view shows the edge type).

    Set task to task, not as ``upstream >> Label(label) >> downstream``: for two tasks in different
    task groups Airflow's ``Label`` joins the *groups* (every leaf of ``upstream``'s group to every
    root of ``downstream``'s), which adds edges nobody asked for (``g.train >> h.eval`` for a checkpoint
    sensor in ``g``). ``downstream`` may be a task, a list of tasks or a group-like node (its roots).
    """
    upstream.set_downstream(downstream, edge_modifier=Label(label))


def check_gatable(task: Any) -> Any:
    """The task's DAG, when a gate can be inserted before ``task`` (:func:`insert_before`).

    :raises ValueError: the task is mapped (the gate would run once for all instances) or a teardown
        (its trigger rule is about its setups); the message names the DAG, the task and the fix.
    """
    dag = require_dag(task, "insert_before")
    if is_mapped(task):
        raise ValueError(
            f"DAG {dag.dag_id!r}, task {task.task_id!r} is mapped (.expand()): a gate cannot be inserted "
            "before it (the gate would run once for every instance). Fix: gate a task that is not mapped."
        )
    if getattr(task, "is_teardown", False):
        raise ValueError(
            f"DAG {dag.dag_id!r}, task {task.task_id!r} is a teardown: nothing can be inserted before it "
            "(its trigger rule is about its setups). Fix: put the gate before the work it cleans up after."
        )
    return dag


def run_original(parsed: Any, original: Any, runs: Any, *args: Any) -> Any:
    """Call ``original`` (a method of the parsed operator ``parsed``, saved before a helper wrapped it on
    the instance) on ``runs``, the copy of the operator Airflow runs with its templates rendered, when
    ``runs`` is one (else on ``parsed``); a plain function is called as it is."""
    function = getattr(original, "__func__", None)
    if function is None:
        return original(*args)
    return function(runs if isinstance(runs, type(parsed)) else parsed, *args)


#: Where a branching task keeps the gates it must follow along with the tasks they were put before.
_GATES_ATTR = "_gpu_dag_gates_of"


def follow_gate(branch: Any, task_id: str, gate_id: str) -> None:
    """Make ``branch`` (a branching task: ``BranchPythonOperator``, ``@task.branch``, ``branch_edge``'s
    gate, any ``SkipMixin``) follow ``gate_id`` whenever it follows ``task_id``.

    A branch skips every task directly downstream of it that it does not follow; once a gate sits
    between the branch and ``task_id``, the branch still returns ``task_id``, so without this it would
    skip the gate, and with it the task it chose. Its ``skip_all_except`` is wrapped once (on the
    instance, as DAG files are parsed again where tasks run); the wrapper runs the original on the task
    that runs (Airflow runs a rendered copy of the operator).
    """
    gates = branch.__dict__.get(_GATES_ATTR)
    if gates is None:
        gates = {}
        original = branch.skip_all_except

        def skip_all_except(ti: Any, branch_task_ids: Any) -> Any:
            if branch_task_ids is not None:
                chosen = [branch_task_ids] if isinstance(branch_task_ids, str) else list(branch_task_ids)
                more = [gates[t] for t in chosen if isinstance(t, str) and t in gates]
                branch_task_ids = chosen + [g for g in more if g not in chosen]
            return run_original(branch, original, getattr(ti, "task", None), ti, branch_task_ids)

        branch.skip_all_except = skip_all_except
        setattr(branch, _GATES_ATTR, gates)
    gates[task_id] = gate_id


def insert_before(task: Any, new: Any, label: str | None = None) -> None:
    """Move every upstream edge of ``task`` onto ``new`` and add ``new >> task`` (labelled).

    ``new`` becomes the task's entrance, so it takes the task's trigger rule (a join after a branch,
    ``all_done``, an alert on ``one_failed``: judged on the same upstream tasks as before), and the
    task then runs when ``new`` succeeded (``all_success``; skipped or failed with it otherwise). A
    branching upstream that chooses ``task`` now follows ``new`` too (:func:`follow_gate`).

    :raises ValueError: ``task`` is a teardown (its rule is about its setups; gate the work instead).
    """
    dag = check_gatable(task)
    rule = getattr(task, "trigger_rule", TriggerRule.ALL_SUCCESS)
    if str(getattr(rule, "value", rule)) != TriggerRule.ALL_SUCCESS.value:
        new.trigger_rule = rule
        task.trigger_rule = TriggerRule.ALL_SUCCESS
    for up_id in sorted(task.upstream_task_ids):
        up = dag.get_task(up_id)
        old = (dag.edge_info.get(up_id) or {}).get(task.task_id)
        up.downstream_task_ids.discard(task.task_id)
        task.upstream_task_ids.discard(up_id)
        if old is not None:  # the moved edge's label goes with it, not left on a missing edge
            dag.edge_info.get(up_id, {}).pop(task.task_id, None)
        if callable(getattr(up, "skip_all_except", None)):
            follow_gate(up, task.task_id, new.task_id)
        if old and old.get("label"):
            labelled(up, new, str(old["label"]))
        else:
            up >> new
    if label:
        labelled(new, task, label)
    else:
        new >> task


def as_operator(task: Any) -> Any:
    """The operator behind ``task`` (an ``@task`` call returns an ``XComArg``; its ``operator``)."""
    operator = getattr(task, "operator", None)
    return operator if operator is not None and hasattr(operator, "task_id") else task
