"""Failure policies where they act: the 'skip' wrapper at run time (the copy of the operator Airflow
runs, failures Airflow never retries, tries after a clear, a later policy replacing it) and the
'abort' policy above a fallback ladder."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, AirflowTaskTimeout

from airflow_gpu_dag.authoring import Rung, fallback_ladder
from airflow_gpu_dag.authoring.failure_policy import Skip, failure_policy


def _raise(error: BaseException) -> Any:
    def fail() -> None:
        raise error

    return fail


def _task(error: BaseException, retries: int = 1) -> PythonOperator:
    with DAG("p", schedule=None):
        task = PythonOperator(task_id="t", python_callable=_raise(error))
    failure_policy(task, Skip(retries=retries))
    return task


def _context(try_number: int, max_tries: int | None = None, task: Any = None) -> dict[str, Any]:
    ti = SimpleNamespace(try_number=try_number)
    if max_tries is not None:
        ti.max_tries = max_tries
    return {"ti": ti, "task": task} if task is not None else {"ti": ti}


def test_a_failure_airflow_never_retries_is_skipped_at_once() -> None:
    # before: re-raised on try 1 of 2 "for the retry", which Airflow never makes: the task failed
    task = _task(AirflowFailException("bad config"))
    with pytest.raises(AirflowSkipException, match=r"AirflowFailException: bad config"):
        task.execute(_context(1, max_tries=1))


def test_an_execution_timeout_on_the_last_try_is_skipped() -> None:
    task = _task(AirflowTaskTimeout("took too long"), retries=0)
    with pytest.raises(AirflowSkipException, match=r"AirflowTaskTimeout"):
        task.execute(_context(1, max_tries=0))


def test_tries_after_a_clear_count_against_max_tries() -> None:
    # cleared after its first two tries: max_tries is now 3, try 3 is retried, try 4 is the last
    task = _task(RuntimeError("disk full"), retries=1)
    with pytest.raises(RuntimeError, match=r"disk full"):
        task.execute(_context(3, max_tries=3))
    with pytest.raises(AirflowSkipException):
        task.execute(_context(4, max_tries=3))


def test_the_wrapper_runs_the_rendered_copy_airflow_runs() -> None:
    # Airflow runs prepare_for_execution()'s copy with its templates rendered; before, the wrapper
    # called the parsed object's execute, whose op_args still held "{{ run_id }}"
    seen: list[str] = []
    with DAG("r", schedule=None):
        task = PythonOperator(task_id="t", python_callable=seen.append, op_args=["{{ run_id }}"])
    failure_policy(task, "skip")
    runs = task.prepare_for_execution()
    runs.op_args = ["manual__2026-12-03"]  # what rendering does to the copy
    runs.execute(_context(1, max_tries=0, task=runs) | {"params": {}})
    assert seen == ["manual__2026-12-03"]


def test_a_later_policy_replaces_skip() -> None:
    task = _task(RuntimeError("disk full"), retries=0)
    failure_policy(task, "retry", retries=0)
    with pytest.raises(RuntimeError, match=r"disk full"):  # fails as 'retry' says, not skipped
        task.execute(_context(1, max_tries=0))
    failure_policy(task, "skip")
    with pytest.raises(AirflowSkipException):
        task.execute(_context(1, max_tries=0))


def _rule(task: Any) -> str:
    return str(getattr(task.trigger_rule, "value", task.trigger_rule))


def test_abort_above_a_fallback_ladder_leaves_the_ladder_alone() -> None:
    # before: the ladder's fallback_to_* / exhausted / result were switched to none_failed, so a rung
    # that did not start in time (a failure by design) stopped the ladder even when prepare succeeded
    with DAG("fa", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
        prepare = EmptyOperator(task_id="prepare")
        ladder = fallback_ladder(
            "train",
            [Rung("a", gpus=2, start_within="20m"), Rung("b", gpus=1, start_within="20m")],
            lambda rung: EmptyOperator(task_id=rung.name),
        )
        report = EmptyOperator(task_id="report", trigger_rule="all_done")
        prepare >> ladder >> report
    rules = {t.task_id: _rule(t) for t in dag.tasks if t.task_id.startswith("train.")}
    changed = failure_policy(prepare, "abort")
    assert changed == ["report"]
    assert {t.task_id: _rule(t) for t in dag.tasks if t.task_id.startswith("train.")} == rules
    assert rules["train.fallback_to_b"] == "all_done" and rules["train.result"] == "one_success"


SKIP_DAG = """
from pathlib import Path

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import failure_policy


def record_then_fail(value, where):
    Path(where).write_text(value)
    raise RuntimeError("disk full")


with DAG("fp_templated_skip", schedule=None) as fp_templated_skip:
    t = PythonOperator(task_id="t", python_callable=record_then_fail, op_args=["{{ run_id }}", "WHERE"])
    after = PythonOperator(task_id="after", python_callable=lambda: 1, trigger_rule="none_failed")
    t >> after
    failure_policy(t, "skip")
"""


def test_under_dag_test_the_skipped_task_ran_with_its_templates_rendered(tmp_path) -> None:
    from airflow.utils.session import create_session

    from tests.unit.dag_files import dag_module

    where = tmp_path / "seen.txt"
    with dag_module("gpu_dag_fp_templated_skip", SKIP_DAG.replace("WHERE", str(where))) as module:
        run = module.fp_templated_skip.test()
        with create_session() as session:
            states = {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}
    assert states == {"t": "skipped", "after": "success"}
    assert where.read_text() == run.run_id  # rendered, not "{{ run_id }}"
