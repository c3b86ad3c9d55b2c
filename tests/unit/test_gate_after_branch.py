"""A gate put before a task that a branch chooses (``start_window``, ``budget_gate``) must not make the
branch skip that task.

A branch skips every task directly downstream of it that it does not follow. Once a gate sits between
the branch and the chosen task, the branch still returns the task's id; before, it skipped the gate,
and so the task it chose, and the run ended ``success`` with the chosen branch never run.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.dag_files import dag_module

BRANCH_DAGS = textwrap.dedent(
    """
    from airflow.providers.standard.operators.python import BranchPythonOperator, PythonOperator
    from airflow.sdk import DAG, task

    from airflow_gpu_dag.authoring import branch_edge, start_window

    ALWAYS = {"opens": "00:00", "closes": "23:59:59"}

    # our branch_edge, the gate added after the branch
    with DAG("gab_branch_edge", schedule=None) as gab_branch_edge:
        ev = PythonOperator(task_id="evaluate", python_callable=lambda: {"acc": 0.95})
        deploy = PythonOperator(task_id="deploy", python_callable=lambda: "deployed")
        retrain = PythonOperator(task_id="retrain", python_callable=lambda: "retrained")
        pick = lambda r: "good" if r["acc"] > 0.9 else "bad"  # noqa: E731
        branch_edge(ev, {"good": deploy, "bad": retrain}, choose=pick)
        start_window(deploy, **ALWAYS)

    # Airflow's own branch operators, a templated task behind the gate
    with DAG("gab_task_branch", schedule=None) as gab_task_branch:
        @task.branch
        def pick():
            return "deploy"

        deploy = PythonOperator(task_id="deploy", python_callable=lambda x: x, op_args=["{{ run_id }}"])
        other = PythonOperator(task_id="other", python_callable=lambda: 1)
        pick() >> [deploy, other]
        start_window(deploy, **ALWAYS)
        start_window(other, **ALWAYS)

    with DAG("gab_operator_list", schedule=None) as gab_operator_list:
        b = BranchPythonOperator(task_id="pick", python_callable=lambda: ["a", "c"])
        a, bb, c = (PythonOperator(task_id=t, python_callable=lambda: 1) for t in ("a", "b", "c"))
        b >> [a, bb, c]
        for t in (a, bb):
            start_window(t, **ALWAYS)
    """
)


@pytest.fixture(scope="module")
def dags() -> Iterator[Any]:
    with dag_module("gpu_dag_gate_after_branch", BRANCH_DAGS) as module:
        yield module


def _states(module: Any, dag_id: str) -> tuple[str, dict[str, str | None]]:
    from airflow.utils.session import create_session

    run = getattr(module, dag_id).test()
    with create_session() as session:
        tis = run.get_task_instances(session=session)
        return str(run.state), {ti.task_id: (str(ti.state) if ti.state else None) for ti in tis}


def test_branch_edge_runs_the_chosen_task_behind_its_gate(dags: Any) -> None:
    state, states = _states(dags, "gab_branch_edge")
    assert states["deploy__window"] == "success" and states["deploy"] == "success", states
    assert states["retrain"] == "skipped", states
    assert state == "success"


def test_task_branch_runs_the_chosen_task_and_skips_the_other_gate(dags: Any) -> None:
    state, states = _states(dags, "gab_task_branch")
    assert states["deploy__window"] == "success" and states["deploy"] == "success", states
    assert states["other__window"] == "skipped" and states["other"] == "skipped", states
    assert state == "success"


def test_a_branch_to_several_tasks_follows_each_gate(dags: Any) -> None:
    _, states = _states(dags, "gab_operator_list")
    assert states["a__window"] == states["a"] == "success", states
    assert states["b__window"] == states["b"] == "skipped", states
    assert states["c"] == "success", states  # not gated: followed as before


def test_the_gate_is_followed_once_however_often_gates_are_added() -> None:
    from airflow.providers.standard.operators.python import BranchPythonOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag.authoring._wiring import follow_gate

    with DAG("gab_unit", schedule=None):
        branch = BranchPythonOperator(task_id="pick", python_callable=lambda: "x")
    seen: list[Any] = []
    branch.skip_all_except = lambda ti, ids: seen.append(ids)  # what Airflow's method would receive
    follow_gate(branch, "x", "x__window")
    wrapped = branch.skip_all_except
    follow_gate(branch, "y", "y__budget")
    assert branch.skip_all_except is wrapped  # wrapped once
    branch.skip_all_except(object(), "x")
    branch.skip_all_except(object(), ["y", "z"])
    branch.skip_all_except(object(), None)  # skip everything: nothing to add
    assert seen == [["x", "x__window"], ["y", "z", "y__budget"], None]
