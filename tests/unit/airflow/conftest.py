"""Shared DAGs of the tests under ``tests/unit/airflow/``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

from airflow_gpu_dag import gpu_hints
from tests.unit.airflow_dags import CRITICAL


def sweep_dag() -> DAG:
    """A hyperparameter sweep with mapped tasks of every kind: ``trial`` mapped over literals (3 x 2 = 6
    instances), ``evaluate`` over an upstream's output with a declared ``map_length`` of 4, ``unknown``
    over the same output with no length, and ``select`` tasks reducing each."""
    with DAG("sweep", schedule=None) as dag:
        prep = BashOperator(task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m"))

        @task(executor_config=gpu_hints(duration="1h", gpus=1))
        def trial(lr: float, batch: int) -> float:
            return lr * batch

        @task(executor_config=gpu_hints(duration="5m"))
        def configs() -> list[int]:
            return [1, 2, 3]

        @task(executor_config=gpu_hints(duration="20m", map_length=4))
        def evaluate(x: int) -> int:
            return x

        @task(executor_config=gpu_hints(duration="20m"))
        def unknown(x: int) -> int:
            return x

        @task(executor_config=gpu_hints(duration="5m"))
        def select(scores: Any) -> None:
            return None

        trials = trial.expand(lr=[0.1, 0.01, 0.001], batch=[32, 64])  # 3 x 2 = 6 instances
        cfg = configs()
        evals = evaluate.expand(x=cfg)
        others = unknown.expand(x=cfg)
        prep >> trials >> select(trials)
        prep >> cfg
        evals >> select.override(task_id="select_evals")(evals)
        others >> select.override(task_id="select_others")(others)
    return dag


def one_task_dag(hints: Mapping[str, Any], dag_id: str = "found") -> DAG:
    """One task ``train`` in ``gpu_default`` with these (hand-written) hints, weighed by the critical path."""
    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL}) as dag:
        EmptyOperator(task_id="train", executor_config={"gpu_dag": dict(hints)}, pool="gpu_default")
    return dag
