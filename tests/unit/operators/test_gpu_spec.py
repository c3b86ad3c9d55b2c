"""Tests of ``airflow_gpu_dag.operators.gpu_spec``: how ``@task.gpu`` and the GPU operators resolve
and check what a task declares (no Airflow services needed)."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import DAG, task

from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.operators.gpu import GpuBashOperator, GpuTaskError, resolve_gpu_task
from tests.unit.operators.conftest import OVERRIDE, assert_keeps_default, make_dag, pod_dag


def test_task_gpu_keeps_the_dags_default_executor_config() -> None:
    # @task.gpu sets no executor_config when the decorator is applied, so both a called and a mapped
    # task get the DAG's default executor_config.
    @task.gpu(gpus=2, retries=1)
    def train(x: int = 0) -> int:
        return x

    with pod_dag("ec_deco", default_args={"executor_config": OVERRIDE}):
        called: Any = train()
        mapped: Any = train.override(task_id="mapped").expand(x=[1, 2])

        @task.gpu(gpus=1)
        def inner() -> None:
            pass

        inner_called: Any = inner()
    assert_keeps_default(called.operator.executor_config, 2)
    assert_keeps_default(mapped.operator.partial_kwargs["executor_config"], 2)
    assert_keeps_default(inner_called.operator.executor_config, 1)
    # used in a DAG without such defaults afterwards: only the hints, nothing left over
    with pod_dag("ec_deco_none"):
        bare: Any = train()
    assert set(bare.operator.executor_config) == {"gpu_dag"}


def test_task_gpu_partial_then_override_keeps_the_gpu_request() -> None:
    # .partial() (the function's arguments) keeps the decorator's GPU keywords, so a later
    # .override(task_id=...) derives pool, slots and hints from them: otherwise a 2 x a100 mapped task
    # would be admitted to gpu_default with 1 slot and hints gpus=1 while its worker leases 2 a100
    # GPUs (and refuses to run: "admitted for 1 of type None").
    @task.gpu(gpus=2, gpu_type="a100", duration="1h")
    def train(lr: float = 0.1, seed: int = 0) -> None:
        pass

    with pod_dag("partial_override", default_args={"executor_config": OVERRIDE}):
        renamed: Any = train.partial(lr=0.1).override(task_id="renamed").expand(seed=[1, 2])
        plain: Any = train.partial(lr=0.1).expand(seed=[1, 2])
    for mapped in (renamed, plain):
        kwargs = mapped.operator.partial_kwargs
        assert (kwargs["pool"], kwargs["pool_slots"]) == ("gpu_a100", 2)
        hints = kwargs["executor_config"]["gpu_dag"]
        assert (hints["gpus"], hints["gpu_type"], hints["duration_s"]) == (2, "a100", 3600.0)
        assert_keeps_default(kwargs["executor_config"], 2)


@pytest.mark.usefixtures("static_host")
@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"gpus": 0}, ["'train'", "at least 1", "Fix:"]),
        ({"gpus": -2}, ["'train'", "at least 1"]),
        ({"gpus": 1.5}, ["'train'", "whole number"]),
        ({"gpus": 8}, ["'train'", "only 4", "Fix:"]),
        ({"gpu_memory": "eighty"}, ["'train'", "'eighty'", "80GiB"]),
        ({"gpu_memory": "120GiB"}, ["'train'", "120GiB", "Fix:"]),
        ({"gpu_type": "h100"}, ["'train'", "'h100'", "known types: a100"]),
        ({"duration": "soon"}, ["'train'", "duration", "1h30m"]),
        ({"gpus": 2, "pool_slots": 1}, ["'train'", "pool_slots=1", "drop pool_slots"]),
    ],
)
def test_bad_declaration_fails_at_parse_time(kwargs: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(GpuTaskError) as err, make_dag("bad_dag"):
        GpuBashOperator(task_id="train", bash_command="echo", **kwargs)
    for fragment in fragments:
        assert fragment in str(err.value)
    assert "'bad_dag'" in str(err.value)


@pytest.mark.usefixtures("static_host")
def test_configured_host_and_pool_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", "2")
    with pytest.raises(GpuTaskError, match="largest host has 2"):
        GpuBashOperator(task_id="t", bash_command="echo", gpus=3)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 3}')
    with pytest.raises(GpuTaskError, match="pool 'gpu_default' has only 3"):
        GpuBashOperator(task_id="t", bash_command="echo", gpus=4)


@pytest.mark.usefixtures("static_host")
def test_without_any_inventory_only_configured_limits_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "")
    spec = resolve_gpu_task("t", gpus=16, gpu_type="b200")  # nothing known to compare against
    assert (spec.pool, spec.pool_slots) == ("gpu_b200", 16)


@pytest.mark.usefixtures("static_host")
def test_decorator_rejects_bad_input_when_applied() -> None:
    from airflow.sdk import task

    with pytest.raises(GpuTaskError, match=r"'train'.*at least 1"):

        @task.gpu(gpus=0)
        def train() -> None:
            pass

    with pytest.raises(GpuTaskError, match="'h100' is not in the inventory"):

        @task.gpu(gpu_type="h100")
        def evaluate() -> None:
            pass


@pytest.mark.usefixtures("static_host")
def test_decorator_refuses_unknown_keywords_even_on_a_task_that_is_only_mapped() -> None:
    """Stock Airflow passes an unknown keyword of a mapped decorated task through silently:
    ``@task.gpu(gpu=4)`` (for ``gpus``) would run on one GPU. The decorator refuses it, naming the DAG,
    the task and the keyword it meant."""
    from airflow.sdk import task

    with make_dag(), pytest.raises(GpuTaskError) as err:

        @task.gpu(gpu=4, duraton="2h")
        def sweep(lr: float) -> float:
            return lr

        sweep.expand(lr=[1e-4, 3e-5])
    message = str(err.value)
    assert "'sweep' in DAG" in message and "'gpus' instead of 'gpu'" in message
    assert "'duration' instead of 'duraton'" in message
    with pytest.raises(GpuTaskError, match=r"map_length goes in executor_config=gpu_hints\(map_length=N\)"):

        @task.gpu(gpus=1, map_length=3)
        def trial(x: int) -> int:
            return x

    with make_dag() as dag:  # every operator keyword still passes

        @task.gpu(gpus=2, retries=2, queue="gpu", pool_slots=2, templates_dict={}, multiple_outputs=False)
        def fine() -> None:
            pass

        fine()
    assert dag.get_task("fine").retries == 2


@pytest.mark.usefixtures("static_host")
def test_override_recomputes_pool_and_slots() -> None:
    from airflow.sdk import task

    with make_dag() as dag:

        @task.gpu(gpus=1)
        def step() -> None:
            pass

        step.override(task_id="wide", gpus=4, gpu_type="a100")()
    wide = dag.get_task("wide")
    assert (wide.pool, wide.pool_slots, read_hints(wide.executor_config)["gpus"]) == ("gpu_a100", 4, 4)


@pytest.mark.usefixtures("static_host")
def test_override_of_a_mapped_task_derives_pool_slots_and_hints_again() -> None:
    # No operator is built at parse time for a mapped task: before, .override(gpus=4) left the pool
    # at 2 slots and the hints at 2 GPUs while the worker leased 4, and a typo passed parse time.
    from airflow.sdk import task

    with make_dag() as dag:

        @task.gpu(gpus=2, duration="1h")
        def train(lr: float) -> float:
            return lr

        train.override(task_id="wide", gpus=4, gpu_type="a100", duration="3h").expand(lr=[0.1, 0.01])
        with pytest.raises(GpuTaskError, match="does not take 'gpu'"):
            train.override(task_id="typo", gpu=4).expand(lr=[0.1])
        train.expand(lr=[0.1])  # the decorator itself is unchanged
    wide = dag.get_task("wide")
    hints = read_hints(wide.partial_kwargs["executor_config"])
    assert (wide.pool, wide.pool_slots, hints["gpus"], hints["duration_s"]) == ("gpu_a100", 4, 4, 10800.0)
    plain = dag.get_task("train")
    assert (plain.pool, plain.pool_slots) == ("gpu_default", 2)


@pytest.fixture
def static_inventory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:80GiB")
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)


@pytest.mark.usefixtures("static_inventory")
@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"gpus": 0}, "Fix: pass gpus="),
        ({"gpus": 1, "gpu_memory": "eighty"}, "Fix: pass gpu_memory like"),
        ({"gpus": 1, "gpu_type": ["a100", "h100"]}, "Fix: pass gpu_type as one GPU type name"),
        ({"gpus": 1, "gpu_type": "--"}, "Fix: pass gpu_type as one GPU type name"),
    ],
)
def test_a_bad_gpu_request_gets_the_fix_for_the_wrong_argument(kwargs: dict[str, Any], fix: str) -> None:
    # The fix names the argument that is wrong: a bad gpu_type, with gpus and memory fine, is not
    # told "Fix: pass gpus=<whole number >= 1> and gpu_memory like '80GiB'".
    with pytest.raises(GpuTaskError) as err:
        resolve_gpu_task("train", dag_id="finetune", **kwargs)
    assert str(err.value).startswith("[bad-gpu-request] GPU task 'train' in DAG 'finetune': ")
    assert fix in str(err.value)


def test_an_invalid_inventory_configuration_is_one_logged_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An error of the deployment's configuration, not of the DAG: it must not fail every DAG file with a
    # GPU task (lint and the watermark controller refuse it); the declaration is checked without it.
    import logging

    from airflow_gpu_dag import settings
    from airflow_gpu_dag.log_once import LogOnce

    monkeypatch.setattr(settings, "_config_errors", LogOnce(settings.log, level=logging.ERROR))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:eighty")
    with caplog.at_level(logging.WARNING):
        assert resolve_gpu_task("train", dag_id="finetune", gpus=1).pool_slots == 1
    (message,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "'eighty'" in message and "[gpu_dag] inventory" in message


@pytest.mark.usefixtures("_no_configured_limits")
def test_the_gpu_operator_refuses_a_type_that_contradicts_its_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "2xa100:80GiB,2xh100:80GiB")
    contradiction = r"DAG 'contra'.*pool 'gpu_h100' is the pool of GPU type 'h100'"
    with pytest.raises(GpuTaskError, match=contradiction), DAG("contra", schedule=None):
        GpuBashOperator(task_id="t", bash_command="true", gpu_type="a100", pool="gpu_h100")


# -- default_pool --------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_limits")
def test_a_gpu_operator_in_default_pool_is_refused() -> None:
    with pytest.raises(GpuTaskError, match=r"'t' in DAG 'dp'.*default_pool") as err, DAG("dp", schedule=None):
        GpuBashOperator(task_id="t", bash_command="true", gpus=2, pool="default_pool")
    assert "drop pool=" in str(err.value)


def test_a_gpu_type_without_letters_or_digits_is_refused_naming_the_task() -> None:
    with pytest.raises(EstimateError, match="no letters or digits"):
        GpuRequest.parse(1, None, "--")
    from airflow_gpu_dag.operators.gpu_spec import GpuTaskError, resolve_gpu_task

    with pytest.raises(GpuTaskError, match=r"GPU task 'train' in DAG 'd': GPU type '--' has no letters"):
        resolve_gpu_task("train", gpus=1, gpu_type="--", dag_id="d")


@pytest.mark.parametrize("gpu_type", [["h100"], ("h100", "a100"), {"type": "a100"}, 100])
def test_a_gpu_type_that_is_not_one_name_is_refused(gpu_type: Any) -> None:
    # before: silently dropped, so the task ran on any GPU (an A100 for gpu_type=["h100"])
    with pytest.raises(EstimateError, match=r"one GPU type name"):
        GpuRequest.parse(1, None, gpu_type)
    with DAG("types", schedule=None), pytest.raises(GpuTaskError, match=r"task 't' in DAG 'types'"):
        GpuBashOperator(task_id="t", gpus=1, gpu_type=gpu_type, bash_command="true")


# -- declaration errors: every problem with its code; the traceback at the declaring line ----------------
@pytest.mark.usefixtures("static_host")
def test_a_declaration_error_lists_every_problem_of_the_task_with_its_code() -> None:
    """Every problem is reported with its code, not only the first (the duration), so one parse shows all."""
    with pytest.raises(GpuTaskError) as err, make_dag("codes"):
        GpuBashOperator(task_id="train", bash_command="echo", gpus=8, duration="soon", gpu_type="h100")
    assert [f.code for f in err.value.findings] == ["bad-estimate", "unknown-gpu-type"]
    lines = str(err.value).splitlines()
    assert lines[0].startswith("[bad-estimate] GPU task 'train' in DAG 'codes': ")
    assert lines[1].startswith("[unknown-gpu-type] GPU task 'train' in DAG 'codes': ") and "Fix: " in lines[1]
    assert (err.value.code, err.value.dag_id, err.value.task_id) == ("bad-estimate", "codes", "train")
    assert err.value.fix == "pass duration like '45m' or '1h30m'."


@pytest.mark.usefixtures("static_host")
def test_a_declaration_errors_traceback_ends_at_the_line_that_declared_the_task() -> None:
    """Airflow shows the traceback's last two entries as the import error: they must be the DAG's line."""
    import traceback

    with make_dag("where"):
        try:
            GpuBashOperator(task_id="train", bash_command="echo", gpus=16)
        except GpuTaskError as error:
            raised = error
    *_, last = traceback.extract_tb(raised.__traceback__)
    assert (last.filename, last.line) == (
        __file__,
        'GpuBashOperator(task_id="train", bash_command="echo", gpus=16)',
    )
    assert raised.__cause__ is None and raised.__suppress_context__


@pytest.mark.usefixtures("static_host")
def test_declaration_errors_are_collected_while_lint_imports_and_the_task_is_still_built() -> None:
    from airflow_gpu_dag.operators.gpu_spec import collecting_declaration_errors

    with collecting_declaration_errors() as collected, make_dag("many"):
        bad_count = GpuBashOperator(task_id="a", bash_command="echo", gpus="two")
        GpuBashOperator(task_id="b", bash_command="echo", gpus=8, duration="1h")
    assert [(f.code, f.dag_id, f.task_id) for f in collected.findings] == [
        ("bad-gpu-request", "many", "a"),
        ("impossible-request", "many", "b"),
    ]
    assert (bad_count.pool, bad_count.pool_slots) == ("gpu_default", 1)  # the stand-in: one GPU
    with pytest.raises(GpuTaskError), make_dag("after"):  # raised again once the block is left
        GpuBashOperator(task_id="a", bash_command="echo", gpus="two")
