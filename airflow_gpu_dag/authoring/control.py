"""Control edges: the downstream chain runs depending on the upstream's exit code or on a
validation of what the upstream produced (e.g. a convergence check). Every helper takes operators or
``@task`` calls' results (``XComArg``).

    exit_code_edge(train, evaluate, skip_on=99)          # exit 0 continue, 99 skip the chain
    validation_edge(train, evaluate, check=converged)     # short-circuit when check() is False
    branch_edge(train, {"good": deploy, "bad": retrain}, choose=pick)

Mapping onto Airflow: an exit code in ``skip_on`` marks the (Bash) task *skipped*, and downstream
tasks with the default ``all_success`` rule are skipped in turn; any other non-zero code fails it.
A validation edge inserts a ``ShortCircuitOperator``: False skips every downstream task (also those
with other trigger rules when ``skip_whole_chain=True``), or fails the run with
``on_invalid="fail"``. All edges are labelled ``control`` in the graph view.

The skip codes belong to the upstream task (a skipped task skips every ``all_success`` task after
it), so every ``exit_code_edge`` of one upstream must give the same ``skip_on``; a validation or a
branch needs an upstream that is not mapped (its gate runs once and reads one return value).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Container, Mapping
from typing import Any

from airflow.providers.standard.operators.python import (
    BranchPythonOperator,
    PythonOperator,
    ShortCircuitOperator,
)
from airflow.sdk.exceptions import AirflowFailException

from airflow_gpu_dag.airflow.mapped import is_mapped
from airflow_gpu_dag.authoring._wiring import as_operator, labelled, require_dag, where_of
from airflow_gpu_dag.executor_config import control_task_hints

__all__ = ["CONTROL", "ON_INVALID", "branch_edge", "exit_code_edge", "validation_edge"]

#: Edge label of control edges.
CONTROL = "control"
#: What a failed validation does.
ON_INVALID = ("skip", "fail")


#: Where ``exit_code_edge`` records the skip codes it gave a task (to check later calls against).
_SKIP_CODES_ATTR = "_gpu_dag_exit_skip_on"


def _tasks(value: Any) -> Any:
    """One task (an operator or an ``@task`` call's result) or a list of them, as operator(s)."""
    if isinstance(value, list | tuple):
        return [as_operator(v) for v in value]
    return as_operator(value)


def _takes_skip_codes(task: Any) -> bool:
    """True when ``task`` (or, for a mapped task, the class it maps) accepts ``skip_on_exit_code``."""
    operator_class = getattr(task, "operator_class", None)
    if isinstance(getattr(task, "partial_kwargs", None), dict) and isinstance(operator_class, type):
        for cls in operator_class.__mro__:
            init = cls.__dict__.get("__init__")
            try:
                if init is not None and "skip_on_exit_code" in inspect.signature(init).parameters:
                    return True
            except (TypeError, ValueError):  # a C or otherwise unreadable __init__
                continue
        return False
    return hasattr(task, "skip_on_exit_code")


def _set_skip_codes(task: Any, codes: list[int]) -> None:
    """Set ``skip_on_exit_code``; a ``.expand()``-ed operator passes it to every instance it creates."""
    if isinstance(getattr(task, "partial_kwargs", None), dict) and hasattr(task, "operator_class"):
        task.partial_kwargs["skip_on_exit_code"] = codes
    else:
        task.skip_on_exit_code = codes


def exit_code_edge(upstream: Any, downstream: Any, *, skip_on: int | Container[int] = 99) -> None:
    """``upstream -control-> downstream``: exit 0 continues, a code in ``skip_on`` skips the chain.

    ``upstream`` must support ``skip_on_exit_code`` (BashOperator, ``@task.bash`` and the provider's GPU
    operators; also mapped with ``.expand()``). ``downstream`` is a task or a list of tasks. A code in
    ``skip_on`` skips ``upstream`` itself, and so every ``all_success`` task after it, whatever edge
    leads there; any other non-zero code fails it.

    :raises ValueError: a bad ``skip_on``; ``upstream`` has no ``skip_on_exit_code``; or an earlier
        ``exit_code_edge`` of ``upstream`` gave other codes (the codes cannot differ per downstream
        task: each call would make the other's codes fail or skip the wrong chain).
    """
    upstream, downstream = as_operator(upstream), _tasks(downstream)
    require_dag(upstream, "exit_code_edge")
    where = where_of(upstream)
    if not _takes_skip_codes(upstream):
        raise ValueError(
            f"{where}: exit_code_edge needs an operator with skip_on_exit_code (e.g. BashOperator, "
            f"@task.bash); {type(upstream).__name__} has none. Fix: raise AirflowSkipException in the "
            "task instead, or use validation_edge()."
        )
    try:  # a float (99.0) or None is no code and no list of codes: refused below, naming the task
        codes = [skip_on] if isinstance(skip_on, int) else list(skip_on)  # type: ignore[call-overload]
    except TypeError:
        codes = [skip_on]
    if not codes or any(isinstance(c, bool) or not isinstance(c, int) or not 0 < c < 256 for c in codes):
        raise ValueError(
            f"{where}: skip_on={skip_on!r} must be exit codes 1..255 (0 always continues). "
            "Fix: pass skip_on=99 or a list such as [98, 99]."
        )
    codes = sorted(set(codes))
    earlier = getattr(upstream, _SKIP_CODES_ATTR, None)
    if earlier is not None and list(earlier) != codes:
        both = sorted({*earlier, *codes})
        raise ValueError(
            f"{where}: an earlier exit_code_edge() gave it skip_on={list(earlier)}, this one "
            f"skip_on={codes}. The codes skip the task itself, and so all its downstream chains: they "
            f"cannot differ per downstream task (each call's other codes would fail it). Fix: pass the "
            f"same skip_on={both} to every exit_code_edge() of {upstream.task_id!r} (or one call with a "
            "list of downstream tasks), or use branch_edge() to choose between chains."
        )
    _set_skip_codes(upstream, codes)
    setattr(upstream, _SKIP_CODES_ATTR, tuple(codes))
    labelled(upstream, downstream, CONTROL)


def _readable_upstream(upstream: Any, helper: str) -> Any:
    """The DAG of ``upstream`` whose return value a gate reads; refuses a mapped upstream."""
    dag = require_dag(upstream, helper)
    if is_mapped(upstream):
        raise ValueError(
            f"{where_of(upstream)} is mapped (.expand()): {helper}() reads one return value, but its gate "
            "runs once for all instances (it would get a list of their values, or a single value when "
            "there is one instance). Fix: check the results in a task that is not mapped and takes the "
            "mapped output as a list, or check each result in the mapped task itself."
        )
    return dag


def _run_check(check: Callable[..., Any], upstream_task_id: str, on_invalid: str, **context: Any) -> bool:
    value = context["ti"].xcom_pull(task_ids=upstream_task_id)
    ok = bool(check(value))
    if not ok and on_invalid == "fail":
        raise AirflowFailException(
            f"validation of {upstream_task_id!r} output failed ({getattr(check, '__name__', check)!s} "
            f"returned False for {value!r}); downstream will not run."
        )
    return ok


def validation_edge(
    upstream: Any,
    downstream: Any,
    *,
    check: Callable[[Any], bool],
    on_invalid: str = "skip",
    skip_whole_chain: bool = True,
    task_id: str | None = None,
) -> Any:
    """Insert a check of ``upstream``'s XCom return value between ``upstream`` and ``downstream``.

    :param check: ``check(value) -> bool`` (e.g. final loss below a threshold); defined at module
        level in the DAG file so the worker can run it.
    :param on_invalid: ``"skip"`` (downstream chain skipped, run succeeds) or ``"fail"``.
    :param skip_whole_chain: with "skip", also skip tasks whose trigger rule would otherwise run.
    :returns: the inserted check task.

    ``upstream`` is an operator or an ``@task`` call's result (not mapped); ``downstream`` a task or a
    list of tasks.
    """
    upstream, downstream = as_operator(upstream), _tasks(downstream)
    dag = _readable_upstream(upstream, "validation_edge")
    gate_id = task_id or f"check_{upstream.task_id}"
    if on_invalid not in ON_INVALID:
        raise ValueError(
            f"DAG {dag.dag_id!r}, task {gate_id!r}: on_invalid={on_invalid!r} is not a policy. "
            "Fix: use 'skip' or 'fail'."
        )
    if not callable(check):
        raise ValueError(
            f"DAG {dag.dag_id!r}, task {gate_id!r}: check={check!r} is not callable. "
            "Fix: pass a function value -> bool."
        )
    kwargs = {"check": check, "upstream_task_id": upstream.task_id, "on_invalid": on_invalid}
    gate: Any
    if on_invalid == "skip":
        gate = ShortCircuitOperator(
            task_id=gate_id,
            python_callable=_run_check,
            op_kwargs=kwargs,
            ignore_downstream_trigger_rules=skip_whole_chain,
            executor_config=control_task_hints(),
            dag=dag,
        )
    else:
        gate = PythonOperator(
            task_id=gate_id,
            python_callable=_run_check,
            op_kwargs=kwargs,
            executor_config=control_task_hints(),
            dag=dag,
        )
    labelled(upstream, gate, CONTROL)
    labelled(gate, downstream, CONTROL)
    return gate


def branch_edge(
    upstream: Any,
    branches: Mapping[str, Any],
    *,
    choose: Callable[[Any], str | None],
    task_id: str | None = None,
) -> Any:
    """Branch on ``upstream``'s output: ``choose(value)`` returns a key of ``branches`` (or None to skip
    all); the other branches are skipped. Edges are labelled ``control``.

    ``upstream`` and the branch targets are operators or ``@task`` calls' results; ``upstream`` is not
    mapped (the branch reads one return value).
    """
    upstream = as_operator(upstream)
    dag = _readable_upstream(upstream, "branch_edge")
    gate_id = task_id or f"branch_{upstream.task_id}"
    if not branches:
        raise ValueError(
            f"DAG {dag.dag_id!r}, task {gate_id!r}: branch_edge needs at least one branch. "
            'Fix: pass branches={"key": task, ...}.'
        )
    if not callable(choose):
        raise ValueError(
            f"DAG {dag.dag_id!r}, task {gate_id!r}: choose={choose!r} is not callable. "
            "Fix: pass a function value -> key of branches (or None to skip them all)."
        )
    operators = {key: as_operator(task) for key, task in branches.items()}
    targets = {key: task.task_id for key, task in operators.items()}
    upstream_task_id = upstream.task_id

    def _choose(**context: Any) -> list[str]:
        key = choose(context["ti"].xcom_pull(task_ids=upstream_task_id))
        if key is None:
            return []
        if key not in targets:
            raise AirflowFailException(
                f"task {gate_id!r}: choose() returned {key!r}; expected one of {sorted(targets)}."
            )
        return [targets[key]]

    gate = BranchPythonOperator(
        task_id=gate_id, python_callable=_choose, executor_config=control_task_hints(), dag=dag
    )
    labelled(upstream, gate, CONTROL)
    for task in operators.values():
        labelled(gate, task, CONTROL)
    return gate
