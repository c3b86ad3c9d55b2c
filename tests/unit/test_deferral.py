"""The provider's sensors and gates take the DAG's ``default_args`` retries.

They default ``retries`` to one quick retry for Airflow's resume race (``deferral``). Set in
the constructor, that default was an explicit argument, which Airflow prefers to ``default_args``:
with ``default_args={"retries": 3}`` every other task got 3 retries and these sensors 1, so two
infrastructure faults (a scheduler restart, an api-server restart) in one sensor's life failed the
run (seen in the chaos test: ``wait_clean_corpus`` failed on try 2 of 2 while the DAG asked for 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, TaskGroup

from airflow_gpu_dag.authoring import data_edge, fix_hidden_dependencies, stage_dependency, start_window
from airflow_gpu_dag.deferral import RESUME_RACE_RETRIES, RESUME_RACE_RETRY_DELAY
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor, StartWindowSensor


def test_the_dags_default_retries_reach_every_sensor_a_helper_adds() -> None:
    with DAG("r", schedule=None, default_args={"retries": 3, "retry_delay": timedelta(minutes=1)}) as dag:
        prep, train, evaluate = (EmptyOperator(task_id=t) for t in ("prep", "train", "evaluate"))
        writer = EmptyOperator(task_id="write", executor_config=gpu_hints(outputs=["/lake/a"]))
        reader = EmptyOperator(task_id="read", executor_config=gpu_hints(inputs=["/lake/a"]))
        prep >> train
        added = [
            data_edge(prep, train, path="/lake/clean", timeout=60),
            start_window(train, opens="01:00", closes="02:00"),
            stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=1, timeout=60),
            DatasetCompleteSensor(task_id="plain", path="/x", timeout=60),
        ]
    added += [dag.get_task(f.added) for f in fix_hidden_dependencies(dag, mode="sensor", timeout=60)]
    assert writer and reader and len(added) == 5
    # the DAG's count; the delay stays the quick one (a retried sensor only checks again)
    assert {(t.task_id, t.retries, t.retry_delay) for t in added} == {
        (t.task_id, 3, RESUME_RACE_RETRY_DELAY) for t in added
    }


def test_without_default_args_one_quick_retry_for_the_resume_race() -> None:
    with DAG("q", schedule=None):
        sensor = CheckpointSensor(task_id="c", checkpoint_dir="/c", step=1, timeout=60)
    assert (sensor.retries, sensor.retry_delay) == (RESUME_RACE_RETRIES, RESUME_RACE_RETRY_DELAY)


def test_the_task_groups_default_args_and_the_authors_own_values_win() -> None:
    with DAG("g", schedule=None, default_args={"retries": 0}):
        at_least_one = DatasetCompleteSensor(task_id="a", path="/x", timeout=60)
        with TaskGroup("tg", default_args={"retries": 4}):
            grouped = DatasetCompleteSensor(task_id="b", path="/x", timeout=60)
        own = DatasetCompleteSensor(task_id="c", path="/x", timeout=60, retries=0)
    assert at_least_one.retries == RESUME_RACE_RETRIES  # the resume race still gets its retry
    assert grouped.retries == 4
    assert own.retries == 0


@pytest.mark.usefixtures("_deferring")
def test_deferring_tasks_get_one_quick_retry_for_the_resume_race() -> None:
    """apache/airflow#72716: a trigger that fires at once can have the resumed try failed as a "state
    mismatch"; every deferring task the helpers add retries at least once, quickly (5 s, whatever
    default_args say), and as often as the DAG's default_args ask (tests/unit/test_deferral.py)."""
    from airflow_gpu_dag.authoring import budget_gate

    slow = {"retries": 4, "retry_delay": timedelta(minutes=10)}
    with DAG("race", schedule=None, default_args=slow) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train", pool="gpu_default")
        evaluate = EmptyOperator(task_id="evaluate")
        prep >> train
        added = [
            data_edge(prep, evaluate, path="/lake/clean", timeout=60),
            stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=2, timeout=60),
            start_window(train, opens="22:00", closes="06:00"),
            budget_gate(train, gpu_hours_per_pool_day=10),
        ]
    for task in added:
        assert (task.retries, task.retry_delay) == (4, timedelta(seconds=5)), task.task_id
    assert (dag.get_task("train").retries, dag.get_task("prep").retry_delay) == (4, timedelta(minutes=10))
    # built directly, a sensor takes the same default and the author's own values win
    with DAG("direct", schedule=None):
        plain = CheckpointSensor(task_id="plain", checkpoint_dir="/c", step=1, timeout=60)
        mine = DatasetCompleteSensor(task_id="mine", path="/p", timeout=60, retries=0)
        window = StartWindowSensor(task_id="window", opens="22:00", closes="06:00", retries=3)
    assert (plain.retries, plain.retry_delay) == (1, timedelta(seconds=5))
    assert (mine.retries, window.retries) == (0, 3)
