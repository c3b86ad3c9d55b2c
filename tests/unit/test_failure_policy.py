"""Failure policies: retry with backoff, skip, abort the downstream chain."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowSkipException

from airflow_gpu_dag.authoring import cleanup
from airflow_gpu_dag.authoring.failure_policy import Abort, Retry, Skip, failure_policy, parse_policy


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


def _boom() -> None:
    raise RuntimeError("disk full")


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
