"""Audit of the Airflow adapters and the GPU decorator/operators: each test reproduces a defect found
in ``@task.gpu``, the lease-based GPU operators or the DAG readers (no Airflow services needed)."""

from __future__ import annotations

import datetime
from typing import Any

from airflow.sdk import DAG, TaskGroup, task

from airflow_gpu_dag.operators.gpu import GpuBashOperator, GpuPythonOperator

OVERRIDE: dict[str, Any] = {"pod_override": "team-ml", "KubernetesExecutor": {"request_memory": "1Gi"}}

GROUP_DEFAULTS: Any = {"executor_config": OVERRIDE}


def _dag(dag_id: str, **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), **kwargs)


def _keeps_default(config: Any, gpus: int) -> None:
    assert config["pod_override"] == "team-ml"
    assert config["KubernetesExecutor"] == {"request_memory": "1Gi"}
    assert config["gpu_dag"]["gpus"] == gpus


def test_gpu_operators_keep_the_dags_default_executor_config() -> None:
    # Before: the lease-based GPU operators gave executor_config (the GPU hints) explicitly, so Airflow
    # no longer filled it from default_args: every GpuBashOperator/GpuPythonOperator, mapped or not,
    # lost the DAG's pod_override (the Kubernetes operator kept it).
    with _dag("ec_ops", default_args={"executor_config": OVERRIDE}):
        plain: Any = GpuBashOperator(task_id="plain", bash_command="x", gpus=2)
        python: Any = GpuPythonOperator(task_id="python", python_callable=lambda: 1)
        mapped = GpuBashOperator.partial(task_id="mapped", gpus=2, gpu_type="a100").expand(
            bash_command=["a", "b"]
        )
    _keeps_default(plain.executor_config, 2)
    _keeps_default(python.executor_config, 1)
    _keeps_default(mapped.partial_kwargs["executor_config"], 2)
    assert mapped.partial_kwargs["pool"] == "gpu_a100" and mapped.partial_kwargs["pool_slots"] == 2
    # a task group's default_args count too, and the task's own executor_config still wins
    with (
        _dag("ec_group", default_args={"executor_config": {"pod_override": "dag"}}),
        TaskGroup("g", default_args=GROUP_DEFAULTS),
    ):
        grouped = GpuBashOperator.partial(task_id="m", gpus=2).expand(bash_command=["a"])
        own: Any = GpuBashOperator(task_id="own", bash_command="x", executor_config={"mine": 1})
    _keeps_default(grouped.partial_kwargs["executor_config"], 2)
    assert own.executor_config["mine"] == 1 and "pod_override" not in own.executor_config


def test_task_gpu_keeps_the_dags_default_executor_config() -> None:
    # Before: @task.gpu set executor_config (the hints) when the decorator was applied, so neither a
    # called nor a mapped task got the DAG's default executor_config.
    @task.gpu(gpus=2, retries=1)
    def train(x: int = 0) -> int:
        return x

    with _dag("ec_deco", default_args={"executor_config": OVERRIDE}):
        called: Any = train()
        mapped: Any = train.override(task_id="mapped").expand(x=[1, 2])

        @task.gpu(gpus=1)
        def inner() -> None:
            pass

        inner_called: Any = inner()
    _keeps_default(called.operator.executor_config, 2)
    _keeps_default(mapped.operator.partial_kwargs["executor_config"], 2)
    _keeps_default(inner_called.operator.executor_config, 1)
    # used in a DAG without such defaults afterwards: only the hints, nothing left over
    with _dag("ec_deco_none"):
        bare: Any = train()
    assert set(bare.operator.executor_config) == {"gpu_dag"}


def test_task_gpu_partial_then_override_keeps_the_gpu_request() -> None:
    # Before: .partial() (the function's arguments) dropped the decorator's GPU keywords, so a later
    # .override(task_id=...) derived pool, slots and hints from its own keywords only: a 2 x a100
    # mapped task was admitted to gpu_default with 1 slot and hints gpus=1, while its worker leased
    # 2 a100 GPUs (and refused to run: "admitted for 1 of type None").
    @task.gpu(gpus=2, gpu_type="a100", duration="1h")
    def train(lr: float = 0.1, seed: int = 0) -> None:
        pass

    with _dag("partial_override", default_args={"executor_config": OVERRIDE}):
        renamed: Any = train.partial(lr=0.1).override(task_id="renamed").expand(seed=[1, 2])
        plain: Any = train.partial(lr=0.1).expand(seed=[1, 2])
    for mapped in (renamed, plain):
        kwargs = mapped.operator.partial_kwargs
        assert (kwargs["pool"], kwargs["pool_slots"]) == ("gpu_a100", 2)
        hints = kwargs["executor_config"]["gpu_dag"]
        assert (hints["gpus"], hints["gpu_type"], hints["duration_s"]) == (2, "a100", 3600.0)
        _keeps_default(kwargs["executor_config"], 2)
