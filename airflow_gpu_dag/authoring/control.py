"""Control edges: the downstream chain runs depending on the upstream's exit code or on a
validation of what the upstream produced (e.g. a convergence check).

    exit_code_edge(train, evaluate, skip_on=99)          # exit 0 continue, 99 skip the chain
    validation_edge(train, evaluate, check=converged)     # short-circuit when check() is False
    branch_edge(train, {"good": deploy, "bad": retrain}, choose=pick)

Mapping onto Airflow: an exit code in ``skip_on`` marks the (Bash) task *skipped*, and downstream
tasks with the default ``all_success`` rule are skipped in turn; any other non-zero code fails it.
A validation edge inserts a ``ShortCircuitOperator``: False skips every downstream task (also those
with other trigger rules when ``skip_whole_chain=True``), or fails the run with
``on_invalid="fail"``. All edges are labelled ``control`` in the graph view.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any

from airflow.providers.standard.operators.python import (
    BranchPythonOperator,
    PythonOperator,
    ShortCircuitOperator,
)
from airflow.sdk.exceptions import AirflowFailException

from airflow_gpu_dag.authoring._wiring import labelled, require_dag
from airflow_gpu_dag.hints import control_task_hints

__all__ = ["CONTROL", "ON_INVALID", "branch_edge", "exit_code_edge", "validation_edge"]

#: Edge label of control edges.
CONTROL = "control"
#: What a failed validation does.
ON_INVALID = ("skip", "fail")


def exit_code_edge(upstream: Any, downstream: Any, *, skip_on: int | Container[int] = 99) -> None:
    """``upstream -control-> downstream``: exit 0 continues, a code in ``skip_on`` skips the chain.

    ``upstream`` must support ``skip_on_exit_code`` (BashOperator and the provider's GPU operators).
    """
    require_dag(upstream, "exit_code_edge")
    if not hasattr(upstream, "skip_on_exit_code"):
        raise ValueError(
            f"task {upstream.task_id!r}: exit_code_edge needs an operator with skip_on_exit_code "
            f"(e.g. BashOperator); {type(upstream).__name__} has none. Raise AirflowSkipException "
            "in the task instead, or use validation_edge()."
        )
    codes = [skip_on] if isinstance(skip_on, int) else list(skip_on)  # type: ignore[call-overload]
    if not codes or any(isinstance(c, bool) or not isinstance(c, int) or not 0 < c < 256 for c in codes):
        raise ValueError(
            f"task {upstream.task_id!r}: skip_on={skip_on!r} must be exit codes 1..255 (0 always continues)."
        )
    upstream.skip_on_exit_code = codes
    labelled(upstream, downstream, CONTROL)


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
    """
    dag = require_dag(upstream, "validation_edge")
    gate_id = task_id or f"check_{upstream.task_id}"
    if on_invalid not in ON_INVALID:
        raise ValueError(
            f"task {gate_id!r}: on_invalid={on_invalid!r} is not a policy; use 'skip' or 'fail'."
        )
    if not callable(check):
        raise ValueError(f"task {gate_id!r}: check={check!r} is not callable; pass a function value -> bool.")
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
    all); the other branches are skipped. Edges are labelled ``control``."""
    dag = require_dag(upstream, "branch_edge")
    gate_id = task_id or f"branch_{upstream.task_id}"
    if not branches:
        raise ValueError(f"task {gate_id!r}: branch_edge needs at least one branch.")
    targets = {key: task.task_id for key, task in branches.items()}

    def _choose(**context: Any) -> list[str]:
        key = choose(context["ti"].xcom_pull(task_ids=upstream.task_id))
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
    for task in branches.values():
        labelled(gate, task, CONTROL)
    return gate
