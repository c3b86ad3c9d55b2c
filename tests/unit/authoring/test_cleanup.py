"""Tests of ``airflow_gpu_dag.authoring.cleanup``."""

from __future__ import annotations

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import cleanup
from tests.unit.authoring.conftest import edge_kinds


def test_cleanup_after_itself_is_an_error() -> None:
    with DAG("self", schedule=None):
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        with pytest.raises(
            ValueError, match=r"DAG 'self', task 'b': cleanup\(\) lists the task in its own after="
        ):
            cleanup(b, after=[a, b])


@pytest.mark.usefixtures("_deferring")
def test_cleanup_is_a_teardown() -> None:
    with DAG("cl", schedule=None) as dag:
        alloc = EmptyOperator(task_id="alloc")
        train = EmptyOperator(task_id="train")
        free = EmptyOperator(task_id="free")
        alloc >> train
        cleanup(free, after=train, setups=alloc)
    assert free.is_teardown and alloc.is_setup
    assert free.trigger_rule == "all_done_setup_success"
    assert not free.on_failure_fail_dagrun
    assert edge_kinds(dag)[("train", "free")] == "cleanup"
