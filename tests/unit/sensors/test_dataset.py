"""Tests of ``airflow_gpu_dag.sensors.dataset``: the data-edge sensor, its trigger and the
completeness checks it runs."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.unit.memory_store import MISSING_S3FS


def _bad_sensors() -> list[tuple[str, Any]]:
    from airflow_gpu_dag.sensors import (
        CheckpointSensor,
        DatasetCompleteSensor,
        StartDeadlineSensor,
        StartWindowSensor,
    )

    return [
        ("no timeout", lambda **kw: DatasetCompleteSensor(path="/lake/x", **kw)),
        (
            "bad rule",
            lambda **kw: DatasetCompleteSensor(path="/lake/x", completeness="nope", timeout=60, **kw),
        ),
        (
            "fallback without asset",
            lambda **kw: DatasetCompleteSensor(path="/lake/x", timeout=60, fallback_to_last_good=True, **kw),
        ),
        (
            "stable in reschedule",
            lambda **kw: DatasetCompleteSensor(
                path="/lake/x", completeness="stable", timeout=60, deferrable=False, mode="reschedule", **kw
            ),
        ),
        ("checkpoint no timeout", lambda **kw: CheckpointSensor(checkpoint_dir="/ckpt", step=1, **kw)),
        ("negative step", lambda **kw: CheckpointSensor(checkpoint_dir="/ckpt", step=-1, timeout=60, **kw)),
        (
            "pattern without step",
            lambda **kw: CheckpointSensor(checkpoint_dir="/ckpt", step=1, pattern="ckpt", timeout=60, **kw),
        ),
        (
            "stable checkpoint",
            lambda **kw: CheckpointSensor(
                checkpoint_dir="/ckpt", step=1, completeness="stable", timeout=60, **kw
            ),
        ),
        ("bad window", lambda **kw: StartWindowSensor(opens="25:00", closes="06:00", **kw)),
        ("bad policy", lambda **kw: StartWindowSensor(opens="22:00", closes="06:00", on_missed="x", **kw)),
        ("bad tz", lambda **kw: StartWindowSensor(opens="22:00", closes="06:00", tz="Mars/Base", **kw)),
        (
            "bad deadline",
            lambda **kw: StartDeadlineSensor(watched_task_id="rung", start_within="soon", **kw),
        ),
    ]


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("case", range(len(_bad_sensors())), ids=[c[0] for c in _bad_sensors()])
def test_sensor_constructor_errors_name_the_dag_and_the_task(case: int) -> None:
    # The message names the DAG as well as the task: in a folder of fifty DAGs "task 'gate'" alone
    # leaves the author to guess which.
    from airflow.sdk import DAG

    _, build = _bad_sensors()[case]
    named = r"^DAG 'audit_dag_ctx', task 'gate': "
    with DAG("audit_dag_ctx", schedule=None), pytest.raises(ValueError, match=named):
        build(task_id="gate")
    dag = DAG("audit_dag_kw", schedule=None)
    with pytest.raises(ValueError, match=r"^DAG 'audit_dag_kw', task 'gate': "):
        build(task_id="gate", dag=dag)
    with pytest.raises(ValueError, match=r"^task 'gate': "):  # outside any DAG, as before
        build(task_id="gate")


@pytest.mark.usefixtures("_deferring")
def test_sensor_constructor_errors_give_the_task_group_id() -> None:
    from airflow.sdk import DAG, TaskGroup

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    where = r"^DAG 'audit_dag_group', task 'prep.wait': .*explicit timeout"
    with DAG("audit_dag_group", schedule=None), TaskGroup("prep"), pytest.raises(ValueError, match=where):
        DatasetCompleteSensor(task_id="wait", path="/lake/x")


@pytest.mark.usefixtures("_deferring")
def test_a_sensor_refuses_an_empty_marker_name_naming_the_task() -> None:
    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    with pytest.raises(ValueError, match=r"^task 'wait': .*name"):
        DatasetCompleteSensor(
            task_id="wait", path="/lake/x", completeness={"kind": "marker", "name": ""}, timeout=60
        )


@pytest.mark.usefixtures("_deferring")
def test_without_soft_fail_the_first_check_still_fails() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    sensor = DatasetCompleteSensor(task_id="wait", path="nosuchscheme-audit2://bucket/ds", timeout=60)
    with pytest.raises(AirflowFailException, match="task 'wait': cannot check dataset"):
        sensor.execute({})


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("timeout", [math.nan, math.inf])
def test_a_timeout_that_never_expires_is_refused(timeout: Any) -> None:
    # NaN or infinity is no "explicit timeout": the trigger's deadline would never be reached and the
    # sensor would wait for ever, which the mandatory timeout exists to prevent.
    from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor

    with pytest.raises(ValueError, match=r"^task 'wait': DatasetCompleteSensor timeout="):
        DatasetCompleteSensor(task_id="wait", path="/lake/x", timeout=timeout)
    with pytest.raises(ValueError, match=r"^task 'wait': CheckpointSensor timeout="):
        CheckpointSensor(task_id="wait", checkpoint_dir="/ckpt", step=1, timeout=timeout)


@pytest.mark.usefixtures("_deferring")
def test_stable_in_reschedule_mode_from_default_args_is_refused() -> None:
    # mode="reschedule" from the DAG's default_args reaches the sensor too (Airflow applies it to
    # BaseSensorOperator), so it is checked like mode= given to the sensor: otherwise the stable rule
    # waits out its timeout, which the parse-time error exists to prevent.
    from airflow.sdk import DAG

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    with DAG("audit_dag_modes", schedule=None, default_args={"mode": "reschedule"}):
        with pytest.raises(ValueError, match=r"^DAG 'audit_dag_modes', task 'w': completeness='stable'"):
            DatasetCompleteSensor(task_id="w", path="/x", completeness="stable", deferrable=False, timeout=60)
        ok = DatasetCompleteSensor(task_id="w2", path="/x", completeness="stable", timeout=60)  # deferred
        assert ok.deferrable
        poking = DatasetCompleteSensor(
            task_id="w3", path="/x", completeness="stable", deferrable=False, mode="poke", timeout=60
        )
        assert poking.mode == "poke"
    defaults = {"mode": "reschedule", "deferrable": False}
    refused = "completeness='stable' cannot run in mode='reschedule'"
    dag = DAG("audit_dag_modes2", schedule=None, default_args=defaults)
    with dag, pytest.raises(ValueError, match=refused):
        DatasetCompleteSensor(task_id="w", path="/x", completeness="stable", timeout=60)


@pytest.mark.usefixtures("_deferring")
def test_a_fallback_producer_that_is_not_in_the_dag_fails_naming_it(mem_dir: str) -> None:
    # producer_task_id="preprocesss" (a typo) would read no state, so the fallback would never apply:
    # a failed producer would leave the sensor waiting out its timeout (hours) instead of using the
    # last good artifact, without a word. The checkpoint sensor refuses an unknown training task alike.
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Asset
    from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    class TI:
        dag_id, run_id = "audit_fallback", "r1"

        def get_task_states(self, **kwargs: Any) -> dict[str, Any]:
            return {}  # Airflow knows no such task

    with DAG("audit_fallback", schedule=None):
        EmptyOperator(task_id="preprocess")
        sensor = DatasetCompleteSensor(
            task_id="wait_clean",
            path=mem_dir,
            timeout=60,
            asset=Asset("clean", uri="file:///lake/clean"),
            fallback_to_last_good=True,
            producer_task_id="preprocesss",
        )
        good = DatasetCompleteSensor(
            task_id="wait_clean2",
            path=mem_dir,
            timeout=60,
            asset=Asset("clean2", uri="file:///lake/clean2"),
            fallback_to_last_good=True,
            producer_task_id="preprocess",
        )
    with pytest.raises(
        AirflowFailException,
        match=r"producer_task_id='preprocesss' is not a task of DAG 'audit_fallback'.*Fix",
    ):
        sensor.execute({"ti": TI()})
    with pytest.raises(TaskDeferred):  # a known producer that has not ended: wait for the dataset
        good.execute({"ti": TI()})


@pytest.mark.usefixtures("_deferring")
def test_the_last_good_stable_artifact_must_still_exist(tmp_path) -> None:
    # "stable" artifacts cannot be re-proven by one check, so the recorded path must at least still
    # exist: a deleted one would be handed to the consumer as good data.
    from datetime import timedelta
    from types import SimpleNamespace

    from airflow.sdk import DAG, Asset
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    clean = Asset("clean", uri="file:///lake/clean")
    with DAG("d", schedule=None):
        sensor = DatasetCompleteSensor(
            task_id="wait_clean",
            path=str(tmp_path / "run3"),
            completeness="stable",
            timeout=timedelta(hours=1),
            asset=clean,
            fallback_to_last_good=True,
            producer_task_id="prep",
        )
    kept = tmp_path / "run2"
    kept.mkdir()
    (kept / "part-0").write_bytes(b"abc")
    ti = SimpleNamespace(dag_id="d", run_id="run3", get_task_states=lambda **kw: {"run3": {"prep": "failed"}})
    gone = SimpleNamespace(extra={"path": str(tmp_path / "run1_deleted")})
    context = {"ti": ti, "inlet_events": {clean: [SimpleNamespace(extra={"path": str(kept)}), gone]}}
    context["outlet_events"] = {}
    result = sensor.execute(context)  # the newest event is gone: the one before it is taken
    assert result["path"] == str(kept) and result["fallback"] is True
    context["inlet_events"] = {clean: [gone]}
    with pytest.raises(AirflowFailException, match="no earlier complete artifact"):
        sensor.execute(context)


@pytest.mark.usefixtures("_deferring")
def test_stable_completeness_cannot_run_in_reschedule_mode() -> None:
    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    with pytest.raises(ValueError, match="cannot run in mode='reschedule'"):
        DatasetCompleteSensor(
            task_id="w", path="/x", completeness="stable", timeout=60, deferrable=False, mode="reschedule"
        )
    DatasetCompleteSensor(task_id="p", path="/x", completeness="stable", timeout=60, deferrable=False)


@pytest.mark.usefixtures("_deferring")
def test_the_sensors_fail_on_a_permanent_error_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

    import airflow_gpu_dag.sensors.dataset as sensor_dataset
    from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor

    # in the worker: the first check (deferrable) and every poke
    for deferrable in (True, False):
        sensor = DatasetCompleteSensor(
            task_id="wait_raw", path=MISSING_S3FS, timeout=60, deferrable=deferrable
        )
        with pytest.raises(
            AirflowFailException,
            match=r"task 'wait_raw': cannot check dataset s3://.*Install s3fs.*Fix: install",
        ):
            sensor.execute({})
        ckpt = CheckpointSensor(
            task_id="wait_ckpt", checkpoint_dir=MISSING_S3FS, step=1, timeout=60, deferrable=deferrable
        )
        with pytest.raises(
            AirflowFailException, match=r"task 'wait_ckpt': cannot check checkpoint directory .*Install s3fs"
        ):
            ckpt.execute({})

    def undefined(*args, **kwargs):
        raise AirflowNotFoundException("The conn_id `lake` isn't defined")

    monkeypatch.setattr(sensor_dataset, "check_once", undefined)
    with pytest.raises(AirflowFailException, match=r"`lake` isn't defined\. Fix: define the connection"):
        DatasetCompleteSensor(task_id="w", path="s3://b/k", conn_id="lake", timeout=60).execute({})
    # resumed from the trigger's error event
    event = {"status": "error", "path": "s3://b/k", "reason": "ImportError: Install s3fs. Fix: install s3fs"}
    sensor = DatasetCompleteSensor(task_id="wait_raw", path="s3://b/k", timeout=60)
    with pytest.raises(
        AirflowFailException, match=r"task 'wait_raw': cannot check dataset s3://b/k: ImportError"
    ):
        sensor.execute_complete({}, event)
    ckpt = CheckpointSensor(task_id="wait_ckpt", checkpoint_dir="s3://b/c", step=1, timeout=60)
    with pytest.raises(
        AirflowFailException, match=r"task 'wait_ckpt': cannot check checkpoint directory s3://b/c"
    ):
        ckpt.execute_complete({}, {**event, "path": "s3://b/c"})
