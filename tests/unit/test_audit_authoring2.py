"""Second audit of the authoring helpers: edges across task groups, odd inputs, messages."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Label, TaskGroup

from airflow_gpu_dag.authoring import (
    FallbackError,
    Retry,
    Rung,
    branch_edge,
    data_affinity,
    data_edge,
    exit_code_edge,
    failure_policy,
    fallback_ladder,
    stage_dependency,
    start_window,
)


def _edges(dag: DAG) -> set[tuple[str, str]]:
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}


def test_stage_dependency_across_task_groups_adds_no_edge_from_training() -> None:
    """Airflow's Label joins the groups of two tasks in different groups: the checkpoint sensor's
    edge to ``h.eval`` also made ``g.train >> h.eval``, so evaluate waited for training to end."""
    with DAG("groups_stage", schedule=None) as dag:
        prepare = EmptyOperator(task_id="prepare")
        with TaskGroup("g"):
            train = EmptyOperator(task_id="train")
        with TaskGroup("h"):
            evaluate = EmptyOperator(task_id="eval")
        prepare >> train
        sensor = stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=5, timeout=60)
    assert "h.eval" not in train.downstream_task_ids
    assert _edges(dag) == {("prepare", "g.train"), ("prepare", sensor.task_id), (sensor.task_id, "h.eval")}
    assert dag.edge_info[sensor.task_id]["h.eval"] == {"label": "time"}


def test_data_edge_from_a_task_group_wires_only_the_producer() -> None:
    with DAG("groups_data", schedule=None) as dag:
        with TaskGroup("prep"):
            clean = EmptyOperator(task_id="clean")
            EmptyOperator(task_id="stats")  # another leaf of the group
        with TaskGroup("fit"):
            train = EmptyOperator(task_id="train")
            EmptyOperator(task_id="probe")  # another root of the group
        wait = data_edge(clean, train, path="/lake/clean", timeout=60)
    assert _edges(dag) == {("prep.clean", wait.task_id), (wait.task_id, "fit.train")}
    assert dag.edge_info["prep.clean"][wait.task_id] == {"label": "data"}


def test_control_edges_from_a_task_group_wire_only_their_upstream() -> None:
    with DAG("groups_control", schedule=None) as dag:
        with TaskGroup("fit"):
            train = BashOperator(task_id="train", bash_command="true")
            evaluate = EmptyOperator(task_id="evaluate")
            EmptyOperator(task_id="report")  # another leaf of the group
        deploy = EmptyOperator(task_id="deploy")
        retrain = EmptyOperator(task_id="retrain")
        exit_code_edge(train, retrain, skip_on=99)
        gate = branch_edge(evaluate, {"good": deploy}, choose=lambda v: "good")
    assert retrain.upstream_task_ids == {"fit.train"}
    assert gate.upstream_task_ids == {"fit.evaluate"}
    assert dag.edge_info["fit.evaluate"][gate.task_id] == {"label": "control"}


def test_start_window_moves_a_labelled_edge_from_another_group_to_its_gate_only() -> None:
    with DAG("groups_window", schedule=None) as dag:
        with TaskGroup("pre"):
            prepare = EmptyOperator(task_id="prepare")
            EmptyOperator(task_id="log")  # another leaf of the group
        train = EmptyOperator(task_id="train")
        prepare.set_downstream(train, edge_modifier=Label("data"))
        window = start_window(train, opens="22:00", closes="06:00")
    assert window.upstream_task_ids == {"pre.prepare"}
    assert train.upstream_task_ids == {window.task_id}
    assert dag.edge_info["pre.prepare"][window.task_id] == {"label": "data"}


def test_stage_dependency_on_itself_is_refused() -> None:
    with DAG("self_stage", schedule=None) as dag:
        train = EmptyOperator(task_id="train")
        with pytest.raises(ValueError, match=r"DAG 'self_stage', task 'train'.*both upstream.*Fix"):
            stage_dependency(train, train, checkpoint_dir="/ckpt", step=10, timeout=60)
    assert list(dag.task_dict) == ["train"]


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


def test_data_affinity_root_location_holds_every_absolute_path() -> None:
    with DAG("affinity_root", schedule=None):
        train = EmptyOperator(task_id="train")
        other = EmptyOperator(task_id="other")
        locations = {"/": "any-host", "/mnt/gpu01": "host-gpu01"}
        assert data_affinity(train, "/lake/corpus", locations, pool="p") == "any-host"
        assert data_affinity(other, "/mnt/gpu01/corpus", locations, pool="p") == "host-gpu01"
    assert train.queue == "any-host"


@pytest.mark.parametrize("skip_on", [99.0, None])
def test_exit_code_edge_non_code_names_the_task(skip_on: object) -> None:
    with DAG("exit_odd", schedule=None):
        train = BashOperator(task_id="train", bash_command="true")
        evaluate = EmptyOperator(task_id="evaluate")
        with pytest.raises(ValueError, match=r"DAG 'exit_odd', task 'train': skip_on=.*Fix"):
            exit_code_edge(train, evaluate, skip_on=skip_on)  # type: ignore[arg-type]
    assert evaluate.upstream_task_ids == set()


def test_branch_edge_refuses_a_choose_that_is_not_callable() -> None:
    with DAG("branch_odd", schedule=None) as dag:
        evaluate = EmptyOperator(task_id="evaluate")
        deploy = EmptyOperator(task_id="deploy")
        with pytest.raises(ValueError, match=r"DAG 'branch_odd', task 'branch_evaluate': choose='good'.*Fix"):
            branch_edge(evaluate, {"good": deploy}, choose="good")  # type: ignore[arg-type]
    assert set(dag.task_dict) == {"evaluate", "deploy"}


def _bash(rung: Rung) -> BashOperator:
    return BashOperator(task_id=rung.name, bash_command="true")


@pytest.mark.parametrize(
    "rungs",
    [
        [Rung("a", start_within="1m"), Rung("result")],
        [Rung("a", start_within="1m"), Rung("exhausted")],
        [Rung("a", start_within="1m"), Rung("a_start_deadline")],
        [Rung("fallback_to_b", start_within="1m"), Rung("b")],
    ],
)
def test_fallback_rung_named_like_a_control_task_is_a_fallback_error(rungs: list[Rung]) -> None:
    match = r"fallback ladder 'train'.*own tasks.*rename"
    with DAG("ladder_names", schedule=None) as dag, pytest.raises(FallbackError, match=match):
        fallback_ladder("train", rungs, _bash)
    assert dag.task_dict == {}
