"""Gates and sensors a helper adds for a task inside a task group sit in that group, with the id the
group gives them, as ``budget_gate``'s did: before, ``start_window`` put ``grp.train__window`` in the
root group (outside the group's box in the graph view), or, called inside the group's context, made
``grp.grp.train__window``; ``stage_dependency`` made ``wait_grp.train_ckpt_10`` in the root group."""

from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, TaskGroup

from airflow_gpu_dag.authoring import stage_dependency, start_window


def test_start_window_outside_the_group_context() -> None:
    with DAG("g1", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        with TaskGroup("grp"):
            train = EmptyOperator(task_id="train")
        prep >> train
    sensor = start_window(train, opens="22:00", closes="06:00")
    assert sensor.task_id == "grp.train__window"
    assert sensor.task_group.group_id == "grp"
    assert dag.task_group_dict["grp"].children.keys() >= {"grp.train", "grp.train__window"}
    assert sensor.upstream_task_ids == {"prep"} and sensor.downstream_task_ids == {"grp.train"}


def test_start_window_inside_the_group_context() -> None:
    with DAG("g2", schedule=None), TaskGroup("grp"):
        train = EmptyOperator(task_id="train")
        sensor = start_window(train, opens="22:00", closes="06:00")
    assert sensor.task_id == "grp.train__window" and sensor.task_group.group_id == "grp"


def test_start_window_of_a_root_task_keeps_its_id() -> None:
    with DAG("g3", schedule=None):
        train = EmptyOperator(task_id="train")
    assert start_window(train, opens="22:00", closes="06:00").task_id == "train__window"


def test_stage_dependency_sensor_sits_in_the_training_task_group() -> None:
    with DAG("g4", schedule=None):
        with TaskGroup("grp"):
            train = EmptyOperator(task_id="train")
        evaluate = EmptyOperator(task_id="evaluate")
        sensor = stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=10, timeout=600)
    assert sensor.task_id == "grp.wait_train_ckpt_10" and sensor.task_group.group_id == "grp"
    assert sensor.training_task_id == "grp.train"
    assert sensor.downstream_task_ids == {"evaluate"}
