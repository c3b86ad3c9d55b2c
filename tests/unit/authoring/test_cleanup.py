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


def test_cleanup_returns_the_task_and_labels_an_edge_from_each_task_of_after() -> None:
    with DAG("cl_many", schedule=None) as dag:
        train, evaluate = EmptyOperator(task_id="train"), EmptyOperator(task_id="evaluate")
        free = EmptyOperator(task_id="free")
        assert cleanup(free, after=(t for t in (train, evaluate))) is free
    kinds = edge_kinds(dag)
    assert kinds[("train", "free")] == kinds[("evaluate", "free")] == "cleanup"
    assert free.upstream_task_ids == {"train", "evaluate"}
    assert free.is_teardown and not train.is_setup and not evaluate.is_setup


def test_cleanup_without_setups_is_a_teardown_of_no_setup() -> None:
    with DAG("cl_nosetup", schedule=None):
        train, free = EmptyOperator(task_id="train"), EmptyOperator(task_id="free")
        cleanup(free, after=train)
    assert free.is_teardown and free.trigger_rule == "all_done_setup_success"
    assert free.upstream_task_ids == {"train"}
    assert not free.on_failure_fail_dagrun


def test_fail_run_on_cleanup_failure_makes_a_failed_cleanup_fail_the_run() -> None:
    with DAG("cl_fail", schedule=None):
        train, free = EmptyOperator(task_id="train"), EmptyOperator(task_id="free")
        cleanup(free, after=train, fail_run_on_cleanup_failure=True)
    assert free.is_teardown and free.on_failure_fail_dagrun


def test_several_setups_each_become_a_setup_upstream_of_the_cleanup() -> None:
    with DAG("cl_setups", schedule=None) as dag:
        scratch, lease = EmptyOperator(task_id="scratch"), EmptyOperator(task_id="lease")
        train, free = EmptyOperator(task_id="train"), EmptyOperator(task_id="free")
        [scratch, lease] >> train
        cleanup(free, after=[train], setups=[scratch, lease])
    assert scratch.is_setup and lease.is_setup and free.is_teardown
    assert free.upstream_task_ids == {"scratch", "lease", "train"}
    assert edge_kinds(dag)[("train", "free")] == "cleanup"


def test_cleanup_takes_taskflow_results_for_every_argument() -> None:
    from airflow.sdk import task

    with DAG("cl_taskflow", schedule=None) as dag:

        @task
        def allocate() -> None:
            pass

        @task
        def train() -> None:
            pass

        @task
        def release() -> None:
            pass

        alloc, work, free = allocate(), train(), release()
        alloc >> work
        returned = cleanup(free, after=work, setups=alloc)
    assert returned is free.operator and free.operator.is_teardown and alloc.operator.is_setup
    assert edge_kinds(dag)[("train", "release")] == "cleanup"


def test_an_empty_after_is_refused_naming_the_dag_the_task_and_what_is_missing() -> None:
    with DAG("cl_empty", schedule=None):
        free = EmptyOperator(task_id="free")
        with pytest.raises(ValueError, match=r"DAG 'cl_empty', task 'free': cleanup\(\) needs after="):
            cleanup(free, after=[])
    assert not free.is_teardown


def test_a_task_outside_any_dag_is_refused_with_the_fix() -> None:
    loose = EmptyOperator(task_id="loose")
    with DAG("cl_in", schedule=None):
        train = EmptyOperator(task_id="train")
    with pytest.raises(
        ValueError, match=r"task 'loose': create it inside a DAG .* before calling cleanup\(\)"
    ):
        cleanup(loose, after=train)
    assert not loose.is_teardown


def test_listing_itself_in_after_changes_nothing() -> None:
    """The refusal comes before ``as_teardown``: the task is not left half converted."""
    with DAG("cl_self", schedule=None):
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        with pytest.raises(ValueError, match="Fix: list the work it cleans up"):
            cleanup(b, after=[a, b])
    assert not b.is_teardown and b.upstream_task_ids == set() and a.downstream_task_ids == set()


def test_calling_cleanup_twice_adds_no_second_edge() -> None:
    with DAG("cl_twice", schedule=None) as dag:
        alloc, train, free = (EmptyOperator(task_id=t) for t in ("alloc", "train", "free"))
        alloc >> train
        cleanup(free, after=train, setups=alloc)
        cleanup(free, after=train, setups=alloc)
    assert free.upstream_task_ids == {"alloc", "train"}
    assert free.is_teardown and alloc.is_setup
    assert edge_kinds(dag)[("train", "free")] == "cleanup"


def test_a_mapped_task_can_be_cleaned_up_after() -> None:
    with DAG("cl_mapped", schedule=None) as dag:
        trials = EmptyOperator.partial(task_id="trials").expand(doc=["a", "b"])
        free = EmptyOperator(task_id="free")
        cleanup(free, after=trials)
    assert free.is_teardown and edge_kinds(dag)[("trials", "free")] == "cleanup"


def test_a_task_id_string_in_after_is_refused_naming_the_dag_and_task() -> None:
    with DAG("cl_str", schedule=None):
        EmptyOperator(task_id="train")
        free = EmptyOperator(task_id="free")
        with pytest.raises((ValueError, TypeError), match=r"DAG 'cl_str', task 'free'.*after="):
            cleanup(free, after="train")
    assert not free.is_teardown


def test_after_none_is_refused_naming_the_dag_and_task() -> None:
    with DAG("cl_none", schedule=None):
        free = EmptyOperator(task_id="free")
        with pytest.raises(ValueError, match=r"DAG 'cl_none', task 'free': cleanup\(\) needs after="):
            cleanup(free, after=None)


def test_a_task_of_another_dag_in_after_is_refused_before_anything_changes() -> None:
    with DAG("cl_other", schedule=None):
        train = EmptyOperator(task_id="train")
    with DAG("cl_mine", schedule=None):
        free = EmptyOperator(task_id="free")
    with pytest.raises(ValueError, match=r"DAG 'cl_mine', task 'free'"):
        cleanup(free, after=train)
    assert not free.is_teardown


def test_the_task_in_its_own_setups_is_refused_before_anything_changes() -> None:
    with DAG("cl_selfsetup", schedule=None):
        train, free = EmptyOperator(task_id="train"), EmptyOperator(task_id="free")
        with pytest.raises(ValueError, match=r"DAG 'cl_selfsetup', task 'free'.*Fix"):
            cleanup(free, after=train, setups=free)
    assert not free.is_teardown


def test_cleanup_after_work_that_runs_after_it_is_refused_as_a_cycle() -> None:
    """``free >> train`` then ``cleanup(free, after=train)``: the cleanup would have to run before and
    after the work; the helper adds ``train >> free`` and the cycle only surfaces in ``check_cycle``."""
    with DAG("cl_cycle", schedule=None) as dag:
        train, free = EmptyOperator(task_id="train"), EmptyOperator(task_id="free")
        free >> train
        with pytest.raises(ValueError, match=r"DAG 'cl_cycle', task 'free'"):
            cleanup(free, after=train)
    dag.check_cycle()
