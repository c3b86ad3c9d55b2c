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


def test_the_unmappable_keywords_are_the_documented_gpu_request() -> None:
    from airflow_gpu_dag.operators.gpu_partial import UNMAPPABLE

    documented = {"gpus", "gpu_type", "gpu_memory", "duration", "pool", "pool_slots", "executor_config"}
    assert documented == UNMAPPABLE


@pytest.mark.parametrize(
    ("key", "values"), [("gpu_memory", ["40GiB", "80GiB"]), ("executor_config", [{}, {"x": 1}])]
)
def test_mapping_over_gpu_memory_or_executor_config_is_refused(key: str, values: list[Any]) -> None:
    with make_dag_gpu_mapping("gpu_mapping_more"):
        bash = GpuBashOperator.partial(task_id="bash", gpus=1)
        with pytest.raises(GpuTaskError, match=rf"'bash' in DAG 'gpu_mapping_more': cannot map over '{key}'"):
            bash.expand(bash_command=["echo 1", "echo 2"], **{key: values})


def test_every_refused_keyword_is_named_once_in_one_finding() -> None:
    with make_dag_gpu_mapping("gpu_mapping_many"):
        bash = GpuBashOperator.partial(task_id="sweep", gpus=1)
        with pytest.raises(GpuTaskError) as err:
            bash.expand_kwargs(
                [{"bash_command": "a", "pool": "p", "gpus": 2}, {"bash_command": "b", "gpus": 3}]
            )
    assert err.value.code == "mapped-gpu-request"
    assert (err.value.dag_id, err.value.task_id) == ("gpu_mapping_many", "sweep")
    assert len(err.value.findings) == 1
    assert "cannot map over 'gpus', 'pool':" in str(err.value)
    assert "Fix: map over the work" in str(err.value)


def test_mapping_the_gpu_count_over_an_xcom_is_refused_at_parse_time() -> None:
    from airflow.sdk import task

    with make_dag_gpu_mapping("gpu_mapping_xcom_arg"):

        @task
        def sizes() -> list[int]:
            return [1, 2]

        bash = GpuBashOperator.partial(task_id="sweep", gpus=1)
        with pytest.raises(GpuTaskError, match="cannot map over 'gpus'"):
            bash.expand(bash_command=["echo"], gpus=sizes())


def test_a_gpu_keyword_in_any_dict_of_expand_kwargs_is_refused() -> None:
    from airflow.sdk import task

    with make_dag_gpu_mapping("gpu_mapping_mixed"):

        @task
        def trials() -> list[dict[str, Any]]:
            return [{"bash_command": "echo"}]

        bash = GpuBashOperator.partial(task_id="sweep", gpus=1)
        with pytest.raises(GpuTaskError, match="cannot map over 'gpu_type'"):
            bash.expand_kwargs(({"bash_command": "a"}, trials(), {"bash_command": "b", "gpu_type": "h100"}))


def test_expand_kwargs_from_an_xcom_is_left_to_the_run_time_check() -> None:
    from airflow.sdk import task

    with make_dag_gpu_mapping("gpu_mapping_deferred") as dag:

        @task
        def trials() -> list[dict[str, Any]]:
            return [{"bash_command": "echo", "gpus": 3}]

        GpuBashOperator.partial(task_id="sweep", gpus=2).expand_kwargs(trials())
    sweep = dag.get_task("sweep")
    assert (sweep.partial_kwargs["pool"], sweep.partial_kwargs["pool_slots"]) == ("gpu_default", 2)
    assert read_hints(sweep.partial_kwargs["executor_config"])["gpus"] == 2


def test_the_refusal_is_raised_even_while_lint_collects_declaration_errors() -> None:
    """``can_continue=False``: there is no stand-in for a mapped task, so lint must not swallow it."""
    from airflow_gpu_dag.operators.gpu_spec import collecting_declaration_errors

    with make_dag_gpu_mapping("gpu_mapping_lint"), collecting_declaration_errors() as errors:
        bash = GpuBashOperator.partial(task_id="sweep", gpus=1)
        with pytest.raises(GpuTaskError, match="cannot map over 'gpus'"):
            bash.expand(bash_command=["echo"], gpus=[1, 2])
    assert errors.findings == []


def _never_mapped_warnings(make: Any) -> list[str]:
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
        gc.collect()
    return [str(w.message) for w in caught if "never mapped" in str(w.message)]


def test_a_partial_never_expanded_warns_once_not_twice() -> None:
    """``gpu_partial`` builds Airflow's partial first; that copy must not warn as well."""

    def make() -> None:
        with make_dag_gpu_mapping("gpu_mapping_unused"):
            GpuBashOperator.partial(task_id="forgotten", gpus=1)

    assert _never_mapped_warnings(make) == ["Task 'forgotten' was never mapped!"]


def test_a_refused_partial_does_not_also_warn_that_it_was_never_mapped() -> None:
    def make() -> None:
        with make_dag_gpu_mapping("gpu_mapping_refused"):
            bash = GpuBashOperator.partial(task_id="refused", gpus=1)
            with pytest.raises(GpuTaskError):
                bash.expand(bash_command=["echo"], pool=["a", "b"])

    assert _never_mapped_warnings(make) == []


def test_partial_is_a_gpu_operator_partial_with_the_derived_pool_slots_and_hints() -> None:
    from airflow_gpu_dag.operators.gpu_partial import GpuOperatorPartial

    with make_dag_gpu_mapping("gpu_mapping_kwargs"):
        partial = GpuBashOperator.partial(task_id="sweep", gpus=2, gpu_type="a100")
        assert isinstance(partial, GpuOperatorPartial)
        assert partial.operator_class is GpuBashOperator
        assert (partial.kwargs["pool"], partial.kwargs["pool_slots"]) == ("gpu_a100", 2)
        assert read_hints(partial.kwargs["executor_config"]) == {"gpus": 2, "gpu_type": "a100"}
        mapped = partial.expand(bash_command=["echo 1", "echo 2"])
    assert (mapped.partial_kwargs["pool"], mapped.partial_kwargs["pool_slots"]) == ("gpu_a100", 2)


def test_from_mapped_is_true_only_for_an_operator_airflow_unmapped() -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator

    from airflow_gpu_dag.operators.gpu_partial import from_mapped

    assert from_mapped(EmptyOperator(task_id="unmapped", _airflow_from_mapped=True))
    assert not from_mapped(EmptyOperator(task_id="plain"))
    assert not from_mapped(object())


def test_an_instance_without_recorded_hints_is_not_checked() -> None:
    """Nothing recorded by ``.partial()`` to compare with (an unreadable or empty ``executor_config``)."""
    for config in (None, {}, "not a dict", {"gpu_dag": "broken"}):
        check_unmapped_request({"task_id": "sweep", "executor_config": config}, 3, "h100", mapped=True)


def test_the_run_time_check_reads_the_hints_in_the_rest_apis_string_form() -> None:
    kwargs = {"task_id": "sweep", "executor_config": str(gpu_hints(gpus=2))}
    check_unmapped_request(kwargs, 2, None, mapped=True)
    with pytest.raises(GpuTaskError, match="asks for 4 GPU"):
        check_unmapped_request(kwargs, 4, None, mapped=True)


def test_an_empty_gpu_type_is_the_same_as_any_type() -> None:
    kwargs = {"task_id": "sweep", "executor_config": gpu_hints(gpus=1)}
    check_unmapped_request(kwargs, 1, "", mapped=True)
    check_unmapped_request(kwargs, 1, None, mapped=True)
    with pytest.raises(GpuTaskError, match=r"of type 'a100', but the task was admitted for 1 of type None"):
        check_unmapped_request(kwargs, 1, "a100", mapped=True)


def test_the_run_time_refusal_names_the_dag_the_task_and_the_fix() -> None:
    dag = make_dag_gpu_mapping("gpu_mapping_runtime")
    kwargs = {"task_id": "sweep", "dag": dag, "executor_config": gpu_hints(gpus=2, gpu_type="a100")}
    with pytest.raises(GpuTaskError) as err:
        check_unmapped_request(kwargs, 3, "a100", mapped=True)
    message = str(err.value)
    assert message.startswith(
        "GPU task 'sweep' in DAG 'gpu_mapping_runtime': this mapped instance asks for 3"
    )
    assert "Fix: map over the work" in message and "one mapped task per size" in message
