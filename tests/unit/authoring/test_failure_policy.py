"""Failure policies where they act: the 'skip' wrapper at run time (the copy of the operator Airflow
runs, failures Airflow never retries, tries after a clear, a later policy replacing it) and the
'abort' policy above a fallback ladder."""

from __future__ import annotations

import datetime
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, AirflowTaskTimeout

from airflow_gpu_dag.authoring import Rung, cleanup, fallback_ladder, stage_dependency, start_window
from airflow_gpu_dag.authoring.failure_policy import Abort, Retry, Skip, failure_policy, parse_policy


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


def _rule(task: Any) -> str:
    return str(getattr(task.trigger_rule, "value", task.trigger_rule))


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


# -- Failure policies: retry with backoff, skip, abort the downstream chain.


def _boom() -> None:
    raise RuntimeError("disk full")


def test_parse_policy_names_and_unknown() -> None:
    assert parse_policy("retry") == Retry()
    assert parse_policy(" SKIP ") == Skip()
    assert parse_policy(Abort()) == Abort()
    with pytest.raises(ValueError, match=r"task 't': unknown failure policy 'rollback'.*retry, skip, abort"):
        parse_policy("rollback", "task 't'")


def test_retry_policy_sets_backoff() -> None:
    with DAG("r", schedule=None):
        t = EmptyOperator(task_id="t")
    failure_policy(t, Retry(retries=4, delay="2m", max_delay="30m"))
    assert t.retries == 4 and t.retry_delay == timedelta(minutes=2)
    assert t.retry_exponential_backoff and t.max_retry_delay == timedelta(minutes=30)
    failure_policy(t, "retry", retries=1, delay=5, backoff=False)
    assert t.retries == 1 and not t.retry_exponential_backoff
    with pytest.raises(ValueError, match=r"task 't': retries=-1"):
        failure_policy(t, Retry(retries=-1))
    with pytest.raises(ValueError, match=r"task 't': delay"):
        failure_policy(t, Retry(delay="soon"))
    with pytest.raises(ValueError, match=r"bad options for failure policy Retry"):
        failure_policy(t, "retry", tries=3)
    with pytest.raises(ValueError, match=r"unknown failure policy 'retyr'"):
        failure_policy(t, "retyr")


def test_skip_policy_turns_last_failure_into_skip() -> None:
    with DAG("s", schedule=None):
        t = PythonOperator(task_id="t", python_callable=_boom)
    failure_policy(t, Skip(retries=1))
    assert t.retries == 1
    first_try = {"ti": SimpleNamespace(try_number=1)}
    with pytest.raises(RuntimeError, match=r"disk full"):  # a try is left: Airflow retries
        t.execute(first_try)
    with pytest.raises(AirflowSkipException, match=r"failure policy 'skip': RuntimeError: disk full"):
        t.execute({"ti": SimpleNamespace(try_number=2)})
    wrapped = t.execute
    failure_policy(t, "skip")  # idempotent: not wrapped twice
    assert t.execute is wrapped


def test_abort_policy_blocks_failure_tolerant_descendants_but_not_cleanup_or_alerts() -> None:
    with DAG("a", schedule=None):
        pre = EmptyOperator(task_id="pretrain", retries=3)
        report = EmptyOperator(task_id="report", trigger_rule="all_done")
        alert = EmptyOperator(task_id="alert", trigger_rule="one_failed")
        sft = EmptyOperator(task_id="sft")
        free = EmptyOperator(task_id="free")
        other = EmptyOperator(task_id="other", trigger_rule="all_done")
        pre >> sft >> report
        pre >> alert
        cleanup(free, after=sft)
        notify = EmptyOperator(task_id="notify", trigger_rule="all_failed")
        sft >> notify
    changed = failure_policy(pre, "abort")
    assert changed == ["report"]
    assert pre.retries == 0
    assert report.trigger_rule == "none_failed"
    # failure handlers keep their rule: under none_failed the alert would fire when nothing failed
    assert alert.trigger_rule == "one_failed" and notify.trigger_rule == "all_failed"
    assert sft.trigger_rule == "all_success"
    assert free.trigger_rule == "all_done_setup_success"  # cleanup still runs
    assert other.trigger_rule == "all_done"  # not downstream: untouched


def test_helpers_take_taskflow_results() -> None:
    with DAG("flow", schedule=None) as dag:

        @task
        def work() -> int:
            return 1

        @task
        def tidy() -> None:
            pass

        @task
        def evaluate() -> None:
            pass

        done, cleaned, checked = work(), tidy(), evaluate()
        failure_policy(done, "skip")
        cleanup(cleaned, after=done)
        sensor = stage_dependency(done, checked, checkpoint_dir="/ckpt", step=2, timeout=60)
    assert dag.get_task("tidy").is_teardown and "work" in dag.get_task("tidy").upstream_task_ids
    assert dag.get_task("evaluate").upstream_task_ids == {sensor.task_id}


def test_mapped_tasks_are_refused_before_anything_changes() -> None:
    with DAG("mapped", schedule=None) as dag:

        @task
        def trial(x: int) -> int:
            return x

        up = EmptyOperator(task_id="up")
        trials = trial.expand(x=[1, 2])
        up >> trials
        with pytest.raises(
            ValueError, match=r"DAG 'mapped', task 'trial': the 'skip' policy needs a task that is not mapped"
        ):
            failure_policy(trials, "skip", retries=1)
        failure_policy(trials, "retry", retries=3, delay="1m")  # retry works on a mapped task
        with pytest.raises(
            ValueError, match=r"task 'trial' is mapped \(\.expand\(\)\): a gate cannot be inserted"
        ):
            start_window(trials, opens="00:00", closes="06:00")
    mapped = dag.get_task("trial")
    assert mapped.upstream_task_ids == {"up"} and len(dag.tasks) == 2  # no sensor, edges untouched
    assert mapped.retries == 3 and mapped.retry_delay.total_seconds() == 60


def test_failure_policy_overrides_keep_the_fields_of_a_policy_object() -> None:
    with DAG("policy_merge", schedule=None):
        train = EmptyOperator(task_id="train")
        failure_policy(train, Retry(retries=5, max_delay="1h"), delay="5m")
    assert train.retries == 5
    assert train.retry_delay == timedelta(minutes=5)
    assert train.max_retry_delay == timedelta(hours=1)


def test_abort_on_a_task_outside_a_dag_names_the_task_and_the_fix() -> None:
    lonely = EmptyOperator(task_id="lonely", retries=2)
    with pytest.raises(ValueError, match=r"task 'lonely': add the task to a DAG"):
        failure_policy(lonely, "abort")
    assert lonely.retries == 2
