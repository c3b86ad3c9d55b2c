"""Tests of ``airflow_gpu_dag.airflow.declaring``: the DAG, task group and ``default_args`` an operator's
constructor ``kwargs`` are declared with, read as Airflow attaches them, with real ``airflow.sdk`` DAGs."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, TaskGroup

from airflow_gpu_dag.airflow import declaring
from airflow_gpu_dag.airflow.declaring import declaring_dag, declaring_group, partial_default


def _dag(dag_id: str, **default_args: Any) -> DAG:
    return DAG(dag_id, schedule=None, default_args=default_args)


# -- declaring_dag -------------------------------------------------------------------------------------------
def test_outside_any_dag_there_is_no_declaring_dag() -> None:
    assert declaring_dag({}) is None
    assert declaring_dag({"task_id": "t", "dag": None}) is None


def test_inside_a_with_dag_block_the_declaring_dag_is_the_innermost_open_one() -> None:
    with _dag("outer") as outer:
        assert declaring_dag({"task_id": "t"}) is outer
        with _dag("inner") as inner:
            assert declaring_dag({"task_id": "t"}) is inner
        assert declaring_dag({"task_id": "t"}) is outer  # the inner block is closed
    assert declaring_dag({"task_id": "t"}) is None


def test_a_dag_passed_as_dag_wins_over_the_with_dag_block_around_the_call() -> None:
    """Airflow attaches a task to ``dag=`` when given, whatever DAG block is open."""
    elsewhere = _dag("elsewhere")
    with _dag("around"):
        assert declaring_dag({"task_id": "t", "dag": elsewhere}) is elsewhere


def test_an_explicit_dag_none_falls_back_to_the_dag_block() -> None:
    """``dag=None`` is "not given" for Airflow too (``BaseOperator`` reads the context then)."""
    with _dag("around") as around:
        assert declaring_dag({"task_id": "t", "dag": None}) is around


def test_an_unreadable_dag_context_reads_as_no_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure inside Airflow's context stack must not break a declaration: it reads as no DAG."""

    class BrokenContext:
        @classmethod
        def get_current(cls) -> Any:
            raise RuntimeError("context stack unavailable")

    monkeypatch.setattr(declaring, "DagContext", BrokenContext)
    assert declaring_dag({"task_id": "t"}) is None
    given = _dag("given")
    assert declaring_dag({"task_id": "t", "dag": given}) is given  # the context is not even read


# -- declaring_group -----------------------------------------------------------------------------------------
def test_without_a_dag_there_is_no_declaring_group() -> None:
    """Even inside an open DAG and group block: the group is read for the DAG given (None, when the
    DAG could not be read) and never from Airflow's context alone."""
    assert declaring_group({"task_id": "t"}, None) is None
    with _dag("open"), TaskGroup("g"):
        assert declaring_group({"task_id": "t"}, None) is None


def test_a_dag_with_no_group_block_open_declares_into_its_root_group() -> None:
    with _dag("flat") as dag:
        group = declaring_group({"task_id": "t"}, dag)
    assert group is dag.task_group and group.is_root
    # the DAG passed counts even when no block is open
    other = _dag("other")
    assert declaring_group({"task_id": "t"}, other) is other.task_group


def test_the_innermost_open_task_group_is_the_declaring_group() -> None:
    with _dag("grouped") as dag, TaskGroup("outer") as outer:
        assert declaring_group({"task_id": "t"}, dag) is outer
        with TaskGroup("inner") as inner:
            assert declaring_group({"task_id": "t"}, dag) is inner


def test_a_task_group_passed_as_task_group_wins_over_the_open_one() -> None:
    with _dag("grouped") as dag:
        with TaskGroup("chosen") as chosen:
            pass
        with TaskGroup("open"):
            assert declaring_group({"task_id": "t", "task_group": chosen}, dag) is chosen


# -- partial_default -----------------------------------------------------------------------------------------
def test_a_value_given_in_the_kwargs_wins_over_every_default() -> None:
    """Airflow fills only keys not given, so a given ``None`` stays ``None`` too."""
    with _dag("defaults", retries=5), TaskGroup("g", default_args={"retries": 6}):
        assert partial_default({"task_id": "t", "retries": 2, "default_args": {"retries": 7}}, "retries") == 2
        assert partial_default({"task_id": "t", "retries": None}, "retries") is None


def test_a_key_not_given_comes_from_the_dags_default_args() -> None:
    with _dag("defaults", executor_config={"pod_override": "team-ml"}):
        assert partial_default({"task_id": "t"}, "executor_config") == {"pod_override": "team-ml"}
    # the same DAG passed as dag=, outside its block
    dag = _dag("passed", retries=4)
    assert partial_default({"task_id": "t", "dag": dag}, "retries") == 4


def test_the_task_groups_default_args_win_over_the_dags_and_nested_groups_inherit() -> None:
    with (
        _dag("defaults", retries=1, queue="dag-queue", owner="dag-owner"),
        TaskGroup("outer", default_args={"retries": 2, "queue": "outer-queue"}),
    ):
        assert partial_default({"task_id": "t"}, "retries") == 2
        with TaskGroup("inner", default_args={"retries": 3}):
            kwargs = {"task_id": "t"}
            assert partial_default(kwargs, "retries") == 3
            assert partial_default(kwargs, "queue") == "outer-queue"  # inherited from the outer group
            assert partial_default(kwargs, "owner") == "dag-owner"  # from the DAG


def test_the_tasks_own_default_args_win_over_its_groups_and_dags() -> None:
    with _dag("defaults", retries=1), TaskGroup("g", default_args={"retries": 2}):
        assert partial_default({"task_id": "t", "default_args": {"retries": 9}}, "retries") == 9
    # and they count outside any DAG, where nothing else does
    assert partial_default({"task_id": "t", "default_args": {"retries": 9}}, "retries") == 9


def test_the_task_group_passed_as_task_group_gives_its_default_args() -> None:
    with _dag("defaults", retries=1) as dag:
        with TaskGroup("chosen", default_args={"retries": 2}) as chosen:
            pass
        with TaskGroup("open", default_args={"retries": 3}):
            assert partial_default({"task_id": "t", "task_group": chosen}, "retries") == 2
    assert partial_default({"task_id": "t", "dag": dag, "task_group": chosen}, "retries") == 2


def test_a_key_no_default_fills_is_none() -> None:
    assert partial_default({"task_id": "t"}, "retries") is None  # no DAG at all
    with _dag("defaults", retries=1):
        assert partial_default({"task_id": "t"}, "queue") is None


def test_the_dag_block_closed_before_the_call_gives_no_defaults() -> None:
    with _dag("closed", retries=5):
        pass
    assert partial_default({"task_id": "t"}, "retries") is None


_GROUP = {"retries": 2}


@pytest.mark.parametrize(
    ("dag_defaults", "group_defaults", "task_defaults"),
    [
        ({"retries": 1}, None, None),
        ({"retries": 1}, _GROUP, None),
        ({"retries": 1}, _GROUP, {"retries": 3}),
        ({}, None, {"retries": 3}),
    ],
    ids=["dag", "group", "task", "task_only"],
)
def test_the_default_is_the_one_airflow_fills_into_the_task_and_its_partial(
    dag_defaults: dict[str, Any], group_defaults: dict[str, Any] | None, task_defaults: dict[str, Any] | None
) -> None:
    """What ``partial_default`` reads is what Airflow itself fills in, for an operator and a ``.partial()``
    declared with the same ``kwargs`` (the module's promise: "as Airflow will attach it")."""
    kwargs: dict[str, Any] = {"default_args": task_defaults} if task_defaults else {}
    with _dag("same", **dag_defaults) as dag:
        if group_defaults is None:
            read = partial_default({"task_id": "t", **kwargs}, "retries")
            op = EmptyOperator(task_id="t", **kwargs)
            mapped = BashOperator.partial(task_id="m", **kwargs).expand(bash_command=["true"])
        else:
            with TaskGroup("g", default_args=group_defaults):
                read = partial_default({"task_id": "t", **kwargs}, "retries")
                op = EmptyOperator(task_id="t", **kwargs)
                mapped = BashOperator.partial(task_id="m", **kwargs).expand(bash_command=["true"])
    assert read == op.retries == mapped.partial_kwargs["retries"]
    assert op.dag is dag
