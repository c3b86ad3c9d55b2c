"""A gate inserted before a task (``start_window``'s sensor, ``budget_gate``) takes the task's trigger
rule. Before, it kept ``all_success``: a join after a branch (``none_failed_min_one_success``) was
skipped with its gate, because the branch not taken skipped the gate.

Run with ``dag.test()``, which evaluates trigger rules as the scheduler does (pools and priority play no
part here).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, TriggerRule

from airflow_gpu_dag.authoring import budget_gate, start_window
from tests.unit.dag_files import dag_module

BRANCH_DAGS = textwrap.dedent(
    """
    import datetime
    from airflow.sdk import DAG
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.providers.standard.operators.python import BranchPythonOperator
    from airflow_gpu_dag.authoring import start_window

    for dag_id, gated in (("join_plain", False), ("join_window", True)):
        with DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
            branch = BranchPythonOperator(task_id="branch", python_callable=lambda: "a")
            a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
            train = EmptyOperator(task_id="train", trigger_rule="none_failed_min_one_success")
            branch >> [a, b] >> train
            if gated:
                start_window(train, opens="2000-01-01T00:00:00", closes="2999-01-01T00:00:00")
        globals()[dag_id] = dag
    """
)


@pytest.fixture(scope="module")
def branch_dags() -> Iterator[Any]:
    with dag_module("gpu_dag_gate_rules", BRANCH_DAGS) as module:
        yield module


def _states(dag: Any) -> tuple[str, dict[str, str]]:
    from airflow.utils.session import create_session

    run = dag.test()
    with create_session() as session:
        return str(run.state), {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}


def test_a_window_before_a_branch_join_keeps_the_join_running(branch_dags: Any) -> None:
    plain_state, plain = _states(branch_dags.join_plain)
    state, gated = _states(branch_dags.join_window)
    assert (plain_state, plain["train"]) == ("success", "success")
    assert (state, gated["train"], gated["b"]) == ("success", "success", "skipped")


def test_the_gate_takes_the_rule_and_the_task_follows_its_gate(tmp_path: Path) -> None:
    with DAG("rules", schedule=None):
        up = EmptyOperator(task_id="up")
        alert = EmptyOperator(task_id="alert", trigger_rule="one_failed")
        up >> alert
        gate = budget_gate(alert, gpu_hours_per_run=10, ledger=str(tmp_path / "u.jsonl"))
        plain = EmptyOperator(task_id="plain")
        up >> plain
        plain_gate = budget_gate(plain, gpu_hours_per_run=10, ledger=str(tmp_path / "u.jsonl"))
        teardown = EmptyOperator(task_id="clean").as_teardown()
        with pytest.raises(ValueError, match="task 'clean' is a teardown"):
            start_window(teardown, opens="00:00", closes="01:00")
    assert (gate.trigger_rule, alert.trigger_rule) == (TriggerRule.ONE_FAILED, TriggerRule.ALL_SUCCESS)
    assert gate.upstream_task_ids == {"up"} and alert.upstream_task_ids == {gate.task_id}
    assert (plain_gate.trigger_rule, plain.trigger_rule) == (TriggerRule.ALL_SUCCESS, TriggerRule.ALL_SUCCESS)
