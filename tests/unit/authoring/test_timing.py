"""The timing helpers (start_window, stage_dependency): edges across task groups, odd inputs, messages."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Label, TaskGroup, task

from airflow_gpu_dag.authoring import budget_gate, data_edge, stage_dependency, start_window
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.operators import GpuBashOperator
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor, StartWindowSensor
from airflow_gpu_dag.sensors.window import WindowGuard
from tests.unit.authoring.conftest import edge_kinds, edges


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
    assert edges(dag) == {("prepare", "g.train"), ("prepare", sensor.task_id), (sensor.task_id, "h.eval")}
    assert dag.edge_info[sensor.task_id]["h.eval"] == {"label": "time"}


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


@pytest.mark.usefixtures("_deferring")
def test_start_window_inserts_sensor_before_task() -> None:
    with DAG("w", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        prep >> train
        sensor = start_window(train, opens="22:00", closes="06:00", on_missed="fail")
    assert isinstance(sensor, StartWindowSensor)
    assert edge_kinds(dag) == {("prep", "train__window"): None, ("train__window", "train"): "time"}


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"opens": "08:00", "closes": "08:00"}, "impossible start window.*never open"),
        ({"opens": "25:00", "closes": "08:00"}, "opens='25:00' is not a time of day"),
        ({"opens": "08:00", "closes": "09:00", "on_missed": "wait"}, "on_missed='wait' is not a policy"),
        ({"opens": "08:00", "closes": "09:00", "tz": "Mars/Base"}, "unknown timezone"),
    ],
)
def test_bad_windows_fail_at_parse_time(kwargs: dict, message: str) -> None:
    with DAG("bw", schedule=None):
        train = EmptyOperator(task_id="train")
        with pytest.raises(ValueError, match=r"DAG 'bw', task 'train': " + message):
            start_window(train, **kwargs)


@pytest.mark.usefixtures("_deferring")
def test_stage_dependency_waits_on_checkpoint_not_on_task() -> None:
    with DAG("s", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        ev = EmptyOperator(task_id="eval")
        prep >> train
        sensor = stage_dependency(train, ev, checkpoint_dir="/ckpt", step=100, timeout=600)
    assert sensor.task_id == "wait_train_ckpt_100"
    kinds = edge_kinds(dag)
    assert ("train", "eval") not in kinds
    assert kinds[("wait_train_ckpt_100", "eval")] == "time"
    assert ("prep", "wait_train_ckpt_100") in kinds
    with DAG("s2", schedule=None):
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        a >> b
        with pytest.raises(ValueError, match=r"remove a >> b"):
            stage_dependency(a, b, checkpoint_dir="/c", step=1, timeout=1)
        with pytest.raises(ValueError, match=r"stable sizes"):
            CheckpointSensor(task_id="cs", checkpoint_dir="/c", step=1, timeout=1, completeness="stable")


ENV = "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"


def _dag(**default_args: Any) -> DAG:
    return DAG("d", schedule=None, start_date=dt.datetime(2026, 1, 1), default_args=default_args)


def _pair(dag: DAG) -> tuple[Any, Any]:
    with dag:
        train = GpuBashOperator(task_id="train", bash_command="true", gpus=1, duration="1h")
        evaluate = GpuBashOperator(task_id="evaluate", bash_command="true", gpus=1, duration="10m")
    return train, evaluate


#: Each way an author gets a sensor or a gate, built in a fresh DAG, with ``deferrable`` if given.
BUILDERS: dict[str, Callable[..., Any]] = {
    "DatasetCompleteSensor": lambda dag, **kw: DatasetCompleteSensor(
        task_id="s", path="/lake/x", timeout=60, dag=dag, **kw
    ),
    "CheckpointSensor": lambda dag, **kw: CheckpointSensor(
        task_id="s", checkpoint_dir="/ckpt", step=1, timeout=60, dag=dag, **kw
    ),
    "StartWindowSensor": lambda dag, **kw: StartWindowSensor(
        task_id="s", opens="01:00", closes="02:00", dag=dag, **kw
    ),
    "BudgetGateOperator": lambda dag, **kw: BudgetGateOperator(
        task_id="s", gpu_hours_per_run=10, dag=dag, **kw
    ),
    "data_edge": lambda dag, **kw: data_edge(*_pair(dag), path="/lake/x", timeout=60, **kw),
    "stage_dependency": lambda dag, **kw: stage_dependency(
        *_pair(dag), checkpoint_dir="/ckpt", step=1, timeout=60, **kw
    ),
    "start_window": lambda dag, **kw: start_window(_pair(dag)[1], opens="01:00", closes="02:00", **kw),
    "budget_gate": lambda dag, **kw: budget_gate(_pair(dag)[1], gpu_hours_per_run=10, **kw),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_default_follows_default_deferrable(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)  # Airflow's default: False (no triggerer needed)
    assert BUILDERS[name](_dag()).deferrable is False
    monkeypatch.setenv(ENV, "True")
    assert BUILDERS[name](_dag()).deferrable is True


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_author_still_chooses(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "False")
    assert BUILDERS[name](_dag(), deferrable=True).deferrable is True
    assert BUILDERS[name](_dag(deferrable=True)).deferrable is True  # through default_args
    monkeypatch.setenv(ENV, "True")
    assert BUILDERS[name](_dag(), deferrable=False).deferrable is False
    assert BUILDERS[name](_dag(deferrable=False)).deferrable is False


def test_start_window_installs_the_guard_on_gpu_tasks() -> None:
    with DAG("gw", schedule=None) as dag:

        @task.gpu(gpus=1, duration="30m")
        def fit() -> None:
            pass

        fitted = fit()
        bash = GpuBashOperator(task_id="bash_fit", bash_command="true", gpus=1)
        start_window(fitted, opens="22:00", closes="06:00", on_missed="fail")
        start_window(bash, opens="{{ dag_run.conf['o'] }}", closes="06:00")
    fit_task = dag.get_task("fit")
    assert isinstance(fit_task._pre_execute_hook, WindowGuard)
    assert fit_task._pre_execute_hook.on_missed == "fail"
    assert read_hints(fit_task.executor_config)["window"] == {
        "opens": "22:00:00",
        "closes": "06:00:00",
        "tz": "UTC",
        "on_missed": "fail",
    }
    assert read_hints(dag.get_task("bash_fit").executor_config)["window"] == {
        "templated": True,
        "on_missed": "skip",
    }
    assert fit_task.upstream_task_ids == {"fit__window"}


def test_bad_window_names_dag_task_and_fix() -> None:
    with DAG("bad_window", schedule=None):
        train = EmptyOperator(task_id="train")
        with pytest.raises(
            ValueError, match=r"DAG 'bad_window', task 'train': impossible start window.*Fix: swap"
        ):
            start_window(train, opens="2026-11-11T06:00+00:00", closes="2026-11-10T22:00+00:00")


def test_stage_dependency_refuses_a_path_that_makes_it_useless_or_a_cycle() -> None:
    with DAG("stages", schedule=None):
        train, x, evaluate = (
            EmptyOperator(task_id="train"),
            EmptyOperator(task_id="x"),
            EmptyOperator(task_id="eval"),
        )
        train >> x >> evaluate  # eval already waits for train to finish, through x
        with pytest.raises(
            ValueError, match=r"DAG 'stages': task 'eval' already waits for 'train'.*path from"
        ):
            stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=1, timeout=60)
        with pytest.raises(ValueError, match=r"task 'eval' runs after 'train'.*\(a cycle\)"):
            stage_dependency(evaluate, train, checkpoint_dir="/ckpt", step=1, timeout=60)
    assert {t.task_id for t in train.dag.tasks} == {"train", "x", "eval"}  # nothing added


@pytest.mark.usefixtures("_deferring")
def test_stage_dependency_watches_its_training_task() -> None:
    with DAG("s", schedule=None):
        train, evaluate = EmptyOperator(task_id="train"), EmptyOperator(task_id="evaluate")
        sensor = stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=100, timeout=600)
    assert sensor.training_task_id == "train"
