"""Mapped GPU tasks (``.partial(...).expand(...)``): every instance is admitted with the pool, slots and
hints of ``.partial()``, so both operators derive them there, and the GPU request cannot be mapped.

With PythonOperator's ``.partial`` (``default_pool``, one slot, no hints, no checks) every instance
would fail on the worker with "pool_slots=1 but gpus=2"; with ``.expand(gpus=[1, 3])`` the scheduler
would admit each instance with the partial's slots while the worker leases the mapped count."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pendulum
import pytest

from airflow_gpu_dag.executor_config import gpu_hints, read_hints
from airflow_gpu_dag.operators.gpu import GpuBashOperator, GpuPythonOperator, GpuTaskError
from airflow_gpu_dag.operators.gpu_partial import check_unmapped_request
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from tests.unit.dag_files import dag_module


@pytest.fixture(autouse=True)
def static_host_gpu_mapping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:80GiB")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_POLL_INTERVAL", "0.05")
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)


def make_dag_gpu_mapping(dag_id: str = "gpu_mapping") -> Any:
    from airflow.sdk import DAG

    return DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1))


def work(x: int) -> int:
    return x


MAPPED_DAGS = textwrap.dedent(
    """
    import datetime
    from airflow.sdk import DAG, task
    from airflow_gpu_dag.operators.gpu import GpuBashOperator, GpuPythonOperator

    def work(x):
        return x

    with DAG("gpu_mapped_python", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as python_dag:
        GpuPythonOperator.partial(task_id="sweep", gpus=2, python_callable=work).expand(op_args=[[1], [2]])

    with DAG("gpu_mapped_xcom", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as xcom_dag:
        @task
        def trials():
            return [{"bash_command": "echo small"}, {"bash_command": "echo big", "gpus": 3}]

        GpuBashOperator.partial(task_id="sweep").expand_kwargs(trials())  # gpus=1, the default
    """
)


def _instances(dag: Any) -> tuple[str, list[tuple[int, str, str, int]]]:
    from airflow.utils.session import create_session

    run = dag.test()
    with create_session() as session:
        tis = run.get_task_instances(session=session)
        rows = sorted(
            (ti.map_index, str(ti.state), ti.pool, ti.pool_slots) for ti in tis if ti.task_id == "sweep"
        )
    return str(run.state), rows


def test_python_operator_partial_gets_pool_slots_hints_and_checks() -> None:
    with make_dag_gpu_mapping() as dag:
        GpuPythonOperator.partial(
            task_id="sweep", gpus=2, gpu_type="a100", duration="1h", python_callable=work
        ).expand(op_args=[[1], [2]])
        with pytest.raises(GpuTaskError, match=r"'huge' in DAG 'gpu_mapping'.*16"):
            GpuPythonOperator.partial(task_id="huge", gpus=16, python_callable=work).expand(op_args=[[1]])
    sweep = dag.get_task("sweep")
    assert (sweep.pool, sweep.pool_slots) == ("gpu_a100", 2)
    hints = read_hints(sweep.partial_kwargs["executor_config"])
    assert (hints["gpus"], hints["gpu_type"], hints["duration_s"]) == (2, "a100", 3600.0)


@pytest.mark.parametrize("key", ["gpus", "gpu_type", "pool_slots", "pool", "duration"])
def test_mapping_over_the_gpu_request_is_refused_at_parse_time(key: str) -> None:
    values = {"gpus": [1, 3], "gpu_type": ["a100", "h100"], "pool_slots": [1, 2], "pool": ["a", "b"]}
    with make_dag_gpu_mapping():
        bash = GpuBashOperator.partial(task_id="bash", gpus=1)
        with pytest.raises(GpuTaskError, match=rf"'bash' in DAG 'gpu_mapping': cannot map over '{key}'"):
            bash.expand(bash_command=["echo 1", "echo 2"], **{key: values.get(key, ["1h", "2h"])})
        python = GpuPythonOperator.partial(task_id="python", gpus=1, python_callable=work)
        with pytest.raises(GpuTaskError, match=rf"cannot map over '{key}'.*Fix: map over the work"):
            python.expand_kwargs([{"op_args": [1], key: values.get(key, ["1h"])[0]}])
        pod = GpuKubernetesPodOperator.partial(task_id="pod", image="x", gpus=1)
        with pytest.raises(GpuTaskError, match=rf"'pod' in DAG 'gpu_mapping': cannot map over '{key}'"):
            pod.expand(arguments=[["a"], ["b"]], **{key: values.get(key, ["1h", "2h"])})
        # what is not the GPU request maps as before
        GpuBashOperator.partial(task_id="ok", gpus=2).expand(bash_command=["echo 1", "echo 2"])


def test_an_instance_built_with_another_request_is_refused() -> None:
    hinted = gpu_hints(gpus=2, gpu_type="a100")
    kwargs = {"task_id": "sweep", "executor_config": hinted}
    check_unmapped_request(kwargs, 2, "a100", mapped=True)  # the request of .partial(): fine
    check_unmapped_request(kwargs, 3, None, mapped=False)  # not a mapped instance
    with pytest.raises(GpuTaskError, match=r"asks for 3 GPU\(s\).*admitted for 2 of type 'a100'"):
        check_unmapped_request(kwargs, 3, "a100", mapped=True)
    with pytest.raises(GpuTaskError, match="admitted for 2 of type 'a100'"):
        check_unmapped_request(kwargs, 2, None, mapped=True)
    with pytest.raises(GpuTaskError, match="admitted for 2"):
        GpuBashOperator(
            task_id="sweep",
            bash_command="echo",
            gpus=3,
            pool="gpu_a100",
            pool_slots=2,
            executor_config=hinted,
            _airflow_from_mapped=True,
        )


def test_mapped_gpu_tasks_run_with_the_request_of_partial() -> None:
    with dag_module("gpu_dag_mapped_tasks", MAPPED_DAGS) as module:
        state, rows = _instances(module.python_dag)
        assert state == "success", rows
        assert rows == [(0, "success", "gpu_default", 2), (1, "success", "gpu_default", 2)]
        # An XCom maps one instance to 3 GPUs: admitted with 1 slot, it must not lease 3.
        state, rows = _instances(module.xcom_dag)
        assert state == "failed"
        assert [(index, status) for index, status, _, _ in rows] == [(0, "success"), (1, "failed")]
