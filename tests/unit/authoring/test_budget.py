"""Tests of ``airflow_gpu_dag.authoring.budget``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.executor_config import gpu_hints


@pytest.mark.usefixtures("_deferring")
def test_budget_gate_wiring_and_default_pool() -> None:
    with DAG("bw", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        fit = EmptyOperator(task_id="fit", pool="gpu_a100")
        prep >> fit
        gate = budget_gate(fit, gpu_hours_per_pool_day=10)
    assert gate.task_id == "fit__budget" and gate.cap.pool == "gpu_a100"
    assert gate.pool == "default_pool"
    assert dag.get_task("prep").downstream_task_ids == {"fit__budget"}
    assert fit.upstream_task_ids == {"fit__budget"}
    assert dag.edge_info["fit__budget"]["fit"]["label"] == "budget"


@pytest.mark.usefixtures("_deferring")
def test_budget_gate_inside_a_task_group_is_named_once() -> None:
    from airflow.sdk import TaskGroup

    with DAG("bg", schedule=None) as dag, TaskGroup("pretrain"):
        fit = EmptyOperator(task_id="train", pool="gpu_a100")
        gate = budget_gate(fit, gpu_hours_per_pool_day=10)
    assert gate.task_id == "pretrain.train__budget"
    assert set(dag.task_dict) == {"pretrain.train", "pretrain.train__budget"}


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_mapped_task_cannot_be_gated(tmp_path: Path) -> None:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    with DAG("mp", schedule=None):
        fit = GpuBashOperator.partial(task_id="fit", gpus=2, duration="1h").expand(bash_command=["a", "b"])
        with pytest.raises(
            ValueError, match="DAG 'mp', task 'fit': budget_gate\\(\\) cannot gate a mapped task"
        ):
            budget_gate(fit, gpu_hours_per_run=3, ledger=str(tmp_path / "usage.jsonl"))


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_pool_cap_on_another_pool_than_the_tasks_is_refused(tmp_path: Path) -> None:
    with DAG("pm", schedule=None):
        fit = EmptyOperator(task_id="fit", executor_config=gpu_hints(gpus=4, duration="1h"))
        with pytest.raises(
            ValueError, match=r"task runs in pool 'default_pool'.*Fix: set the task's pool='gpu_a100'"
        ):
            budget_gate(fit, gpu_hours_per_pool_day=6, pool="gpu_a100", ledger=str(tmp_path / "u.jsonl"))
        inside = EmptyOperator(
            task_id="inside", pool="gpu_a100", executor_config=gpu_hints(gpus=4, duration="1h")
        )
        gate = budget_gate(
            inside, gpu_hours_per_pool_day=6, pool="gpu_a100", ledger=str(tmp_path / "u.jsonl")
        )
    assert gate.cap.pool == "gpu_a100"


@pytest.mark.usefixtures("_no_variables")
@pytest.mark.parametrize("poke_interval", [0, -5, math.nan, math.inf, True])
def test_a_poke_interval_that_is_not_a_positive_number_is_refused(poke_interval: object) -> None:
    with DAG("d", schedule=None):
        fit = EmptyOperator(task_id="fit", pool="gpu_a100", executor_config=gpu_hints(gpus=1, duration="1h"))
        with pytest.raises(ValueError, match="DAG 'd', task 'fit__budget': poke_interval="):
            budget_gate(fit, gpu_hours_per_run=10, poke_interval=poke_interval)  # type: ignore[arg-type]
