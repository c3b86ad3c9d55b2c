"""Tests of ``airflow_gpu_dag.decorators.gpu``."""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import TaskGroup, TriggerRule, setup, task, teardown

from airflow_gpu_dag.decorators.gpu import check_keywords, gpu_task
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.gpu.usage import UsageLedger
from airflow_gpu_dag.operators.gpu import GpuPythonOperator
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError, collecting_declaration_errors
from tests.unit.operators.conftest import OVERRIDE, assert_keeps_default, context, make_dag, pod_dag


# -- decorator ------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("static_host")
def test_task_gpu_is_registered_with_the_task_sdk() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert ProvidersManagerTaskRuntime().taskflow_decorators["gpu"] is gpu_task
    assert task.gpu is gpu_task


# -- running ----------------------------------------------------------------------------------------------
def test_the_function_runs_with_its_arguments_on_its_leased_gpus_and_gets_the_lease(
    static_host: Path,
) -> None:
    """A ``gpu_lease=None`` parameter receives the lease as a dict with the documented keys."""

    @task.gpu(gpus=2)
    def train(lr: float, gpu_lease: dict[str, Any] | None = None) -> tuple[float, str, dict[str, Any] | None]:
        return lr, os.environ["CUDA_VISIBLE_DEVICES"], gpu_lease

    with make_dag():
        op = train(0.5).operator
    lr, visible, lease = op.execute(context("train"))
    assert lease is not None and set(lease) == {"lease_id", "devices", "uuids", "acquired_at", "owner"}
    assert (lr, visible) == (0.5, ",".join(map(str, lease["devices"])))
    assert len(lease["devices"]) == 2
    assert [(r.lease_id, r.outcome) for r in UsageLedger(static_host / "usage.jsonl").read()] == [
        (lease["lease_id"], "success")
    ]


# -- the operator ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("static_host")
def test_a_gpu_task_is_shown_as_task_gpu_whether_called_or_mapped() -> None:
    @task.gpu
    def train(lr: float) -> float:
        return lr

    with make_dag():
        called = train(0.1).operator
        mapped = train.expand(lr=[0.1, 0.2]).operator
    assert (called.operator_name, mapped.operator_name) == ("@task.gpu", "@task.gpu")
    assert tuple(mapped.template_fields) == tuple(GpuPythonOperator.template_fields)


@pytest.mark.usefixtures("static_host")
def test_multiple_outputs_is_inferred_from_a_dict_return_annotation_unless_given() -> None:
    """As ``@task`` does: the decorator leaves ``multiple_outputs`` unset unless it is given."""

    def metrics() -> dict[str, float]:
        return {"loss": 0.1}

    def plain() -> float:
        return 0.1

    with make_dag():
        inferred = gpu_task(metrics)().operator
        refused = gpu_task(metrics, False)().operator
        asked = gpu_task(multiple_outputs=True, gpus=2)(plain)().operator
        not_a_dict = gpu_task(plain)().operator
    flags = [op.multiple_outputs for op in (inferred, refused, asked, not_a_dict)]
    assert flags == [True, False, True, False]
    assert (asked.pool, asked.pool_slots) == ("gpu_default", 2)


# -- keywords ---------------------------------------------------------------------------------------------
def test_check_keywords_accepts_the_gpu_and_operator_keywords() -> None:
    gpu = ["gpus", "gpu_memory", "gpu_type", "duration", "lease_timeout", "inputs", "outputs"]
    operator = ["retries", "pool", "pool_slots", "queue", "executor_config", "task_id", "templates_dict"]
    assert check_keywords(dict.fromkeys([*gpu, *operator]), "train") is None


def test_an_unknown_keyword_with_no_close_match_is_one_finding_listing_the_gpu_keywords() -> None:
    with make_dag("keywords"), pytest.raises(GpuTaskError) as err:
        check_keywords({"gpus": 2, "zzz": 1}, "train")
    (finding,) = err.value.findings
    assert (finding.code, finding.dag_id, finding.task_id) == ("unknown-gpu-keyword", "keywords", "train")
    assert finding.message == "@task.gpu does not take 'zzz'."
    assert finding.fix.startswith("The GPU keywords are gpus, gpu_memory, gpu_type, duration, lease_timeout")
    assert "instead of" not in finding.fix


@pytest.mark.usefixtures("static_host")
def test_an_unknown_keyword_stops_the_file_even_while_lint_collects_declaration_errors() -> None:
    """A bad GPU request is collected and the task built with a stand-in; a keyword the task does not
    take cannot be built at all, so it stops the file, recorded under the file for lint to report."""

    def train() -> None:
        pass

    with collecting_declaration_errors() as collected:
        stand_in = gpu_task(gpus=0)(train)
        with pytest.raises(GpuTaskError, match="does not take 'gpu'") as err:
            gpu_task(gpu=4)(train)
    assert [(f.code, f.task_id) for f in collected.findings] == [("bad-gpu-request", "train")]
    assert stand_in.kwargs["pool_slots"] == 1
    assert collected.raised == {__file__: err.value}


@pytest.mark.usefixtures("static_host")
def test_a_keyword_errors_traceback_ends_at_the_line_that_applied_the_decorator() -> None:
    """Airflow shows the traceback's last entries as the DAG file's import error."""

    def train() -> None:
        pass

    try:
        gpu_task(gpus=1, gpu=4)(train)
    except GpuTaskError as error:
        raised = error
    *_, last = traceback.extract_tb(raised.__traceback__)
    assert (last.filename, last.line) == (__file__, "gpu_task(gpus=1, gpu=4)(train)")


@pytest.mark.usefixtures("static_host")
def test_errors_name_the_task_id_given_to_the_decorator_or_to_override() -> None:
    @task.gpu(gpus=2)
    def train() -> None:
        pass

    with pytest.raises(GpuTaskError, match="GPU task 'fit': GPU count 0"):
        gpu_task(task_id="fit", gpus=0)(train.function)
    with make_dag("named"), pytest.raises(GpuTaskError, match="GPU task 'wide' in DAG 'named': GPU count 0"):
        train.override(task_id="wide", gpus=0)()


# -- override ---------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("static_host")
def test_a_second_override_keeps_the_gpu_request_of_the_first() -> None:
    """``.override(gpus=4).override(task_id=...)``: the pool, slots and hints stay those of 4 A100s."""

    @task.gpu(gpus=1)
    def train(lr: float) -> float:
        return lr

    with make_dag() as dag:
        train.override(gpus=4, gpu_type="a100").override(task_id="wide")(0.1)
        train.override(gpus=3).override(task_id="sweep").expand(lr=[0.1, 0.2])
    wide, sweep = dag.get_task("wide"), dag.get_task("sweep")
    assert (wide.pool, wide.pool_slots, read_hints(wide.executor_config)["gpus"]) == ("gpu_a100", 4, 4)
    sweep_hints = read_hints(sweep.partial_kwargs["executor_config"])
    assert (sweep.pool, sweep.pool_slots, sweep_hints["gpus"]) == ("gpu_default", 3, 3)


# -- default executor_config ------------------------------------------------------------------------------
@pytest.mark.usefixtures("static_host")
def test_the_task_groups_and_the_tasks_default_executor_config_are_kept_under_the_hints() -> None:
    """Airflow fills ``default_args`` only where not given, and the decorator gives the hints."""

    @task.gpu(gpus=2)
    def train(lr: float = 0.1) -> float:
        return lr

    with pod_dag("group_defaults"):
        with TaskGroup("sweeps", default_args={"executor_config": OVERRIDE}):
            called = train().operator
            mapped = train.expand_kwargs([{"lr": 0.1}, {"lr": 0.2}]).operator
        own = gpu_task(gpus=3, default_args={"executor_config": OVERRIDE})(train.function)().operator
    assert_keeps_default(called.executor_config, 2)
    assert_keeps_default(mapped.partial_kwargs["executor_config"], 2)
    assert_keeps_default(own.executor_config, 3)


@pytest.mark.usefixtures("static_host")
def test_an_executor_config_given_to_the_decorator_replaces_the_dags_default() -> None:
    """As for any operator argument: given, the DAG's default is not merged in."""

    @task.gpu(gpus=2, executor_config={"mine": 1})
    def train() -> None:
        pass

    with pod_dag("own_config", default_args={"executor_config": OVERRIDE}):
        op = train().operator
    assert op.executor_config == {"mine": 1, "gpu_dag": {"gpus": 2}}


@pytest.mark.usefixtures("static_host")
def test_setup_and_teardown_gpu_tasks_keep_their_role_with_a_default_executor_config() -> None:
    """The decorator is rebuilt with the DAG's ``executor_config``: its setup/teardown marks go with it."""

    @setup
    @task.gpu(gpus=2)
    def warm_up() -> None:
        pass

    @teardown
    @task.gpu(gpus=1)
    def free() -> None:
        pass

    with pod_dag("roles", default_args={"executor_config": OVERRIDE}):
        first, last = warm_up().operator, free().operator
    assert (first.is_setup, first.is_teardown) == (True, False)
    assert (last.is_teardown, last.trigger_rule) == (True, TriggerRule.ALL_DONE_SETUP_SUCCESS)
    assert_keeps_default(first.executor_config, 2)
    assert_keeps_default(last.executor_config, 1)
