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


# -- the sensor's answers, its wait and its fallback -------------------------------------------------------
def _sensor(path: str, **kwargs: Any) -> Any:
    """A dataset sensor ``wait`` with a one-hour timeout (unless told) in DAG ``d``."""
    from airflow.sdk import DAG

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    kwargs.setdefault("timeout", 3600)
    with DAG("d", schedule=None):
        return DatasetCompleteSensor(task_id="wait", path=path, **kwargs)


def _producer_ti(state: str | None) -> Any:
    from types import SimpleNamespace

    states = {"r2": {"prep": state}} if state else {}
    return SimpleNamespace(dag_id="d", run_id="r2", get_task_states=lambda **kwargs: states)


@pytest.mark.usefixtures("_deferring")
def test_a_dataset_complete_at_the_first_check_answers_without_deferring(tmp_path) -> None:
    from types import SimpleNamespace

    from airflow.sdk import Asset

    from airflow_gpu_dag.datasets import write_marker

    clean = Asset("clean", uri="file:///lake/clean")
    write_marker(str(tmp_path))
    event = SimpleNamespace(extra=None)
    answer = _sensor(str(tmp_path), asset=clean).execute({"outlet_events": {clean: event}})
    assert answer["path"] == str(tmp_path) and answer["fallback"] is False and "_SUCCESS" in answer["reason"]
    assert event.extra == {"path": str(tmp_path), "fallback": False}  # the asset event names the data


@pytest.mark.usefixtures("_deferring")
def test_an_incomplete_dataset_defers_to_a_trigger_bounded_by_the_timeout(tmp_path) -> None:
    import time
    from datetime import timedelta

    from airflow.sdk.exceptions import TaskDeferred

    sensor = _sensor(str(tmp_path), timeout=timedelta(hours=2), poke_interval=45, conn_id="lake")
    assert sensor.timeout == 7200.0
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert (trigger.path, trigger.poke_interval, trigger.conn_id) == (str(tmp_path), 45.0, "lake")
    assert trigger.completeness == {"kind": "marker", "name": "_SUCCESS"}
    assert 7190 < trigger.deadline - time.time() <= 7200
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=7200 + 120)  # a backstop after the deadline


@pytest.mark.usefixtures("_deferring")
def test_a_flaky_first_check_counts_as_not_complete_yet_and_the_sensor_still_defers(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    import airflow_gpu_dag.sensors.dataset as sensor_dataset

    monkeypatch.setattr(
        sensor_dataset, "check_once", lambda *a, **k: (_ for _ in ()).throw(OSError("503 SlowDown"))
    )
    sensor = _sensor(str(tmp_path))
    with pytest.raises(TaskDeferred):
        sensor.execute({})
    logged = capsys.readouterr().out  # the task logger writes through structlog to stdout
    assert "check failed: OSError: 503 SlowDown; checking again" in logged


@pytest.mark.usefixtures("_deferring")
def test_under_soft_fail_a_permanent_error_at_the_first_check_skips() -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match=r"soft_fail.*cannot check dataset s3://"):
        _sensor(MISSING_S3FS, soft_fail=True).execute({})


def test_a_poking_sensor_is_done_once_the_marker_is_written(tmp_path) -> None:
    from airflow_gpu_dag.datasets import write_marker

    sensor = _sensor(str(tmp_path), deferrable=False)
    assert sensor.poke({}).is_done is False
    write_marker(str(tmp_path))
    answer = sensor.poke({})
    assert answer.is_done and answer.xcom_value["path"] == str(tmp_path)


def test_a_poking_sensor_that_times_out_says_what_was_missing_and_the_fix(tmp_path) -> None:
    from airflow.sdk.exceptions import AirflowSensorTimeout

    sensor = _sensor(str(tmp_path), deferrable=False, mode="poke", timeout=0.05, poke_interval=0.02)
    with pytest.raises(
        AirflowSensorTimeout,
        match=r"task 'wait': dataset .* was not complete after 0s \(marker rule\): marker _SUCCESS missing"
        r".*Fix",
    ):
        sensor.execute({})


@pytest.mark.usefixtures("_deferring")
def test_resumed_from_its_trigger_the_sensor_answers_fails_or_times_out(tmp_path) -> None:
    from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

    sensor = _sensor(str(tmp_path), completeness="manifest")
    answer = sensor.execute_complete({}, {"status": "complete", "reason": "3 files"})
    assert answer == {"path": str(tmp_path), "fallback": False, "reason": "3 files"}
    with pytest.raises(AirflowFailException, match=r"task 'wait': cannot check dataset .*: unknown error"):
        sensor.execute_complete({}, {"status": "error"})
    with pytest.raises(
        AirflowSensorTimeout, match=r"not complete after 3600s \(manifest rule\): part-1 missing"
    ):
        sensor.execute_complete({}, {"status": "timeout", "reason": "part-1 missing"})
    with pytest.raises(AirflowSensorTimeout, match=r"\(manifest rule\): unknown\. Fix"):
        sensor.execute_complete({}, None)  # no event at all (the defer timeout)


@pytest.mark.usefixtures("_deferring")
def test_the_asset_is_added_to_the_tasks_outlets_and_inlets_and_the_path_to_its_hints() -> None:
    from airflow.sdk import Asset

    clean, audit = Asset("clean", uri="file:///lake/clean"), Asset("audit", uri="file:///lake/audit")
    sensor = _sensor("/lake/clean/{{ ds }}", asset=clean, outlets=[audit])
    assert sensor.outlets == [audit, clean] and sensor.inlets == [clean]
    hints = sensor.executor_config["gpu_dag"]
    assert hints["awaits"] == ["/lake/clean/{{ ds }}"] and hints["duration_s"] == 0.0
    assert sensor.trigger_rule == "all_success"  # no fallback: the producer must succeed


@pytest.mark.usefixtures("_deferring")
def test_an_object_storage_path_keeps_its_connection_unless_one_is_given() -> None:
    from airflow.sdk import ObjectStoragePath

    path = ObjectStoragePath("s3://lake/clean/{{ ds }}", conn_id="aws_lake")
    own = _sensor(path)
    assert (own.path, own.conn_id) == ("s3://lake/clean/{{ ds }}", "aws_lake")
    assert _sensor(path, conn_id="aws_other").conn_id == "aws_other"
    assert _sensor("s3://lake/clean").conn_id is None


@pytest.mark.usefixtures("_deferring")
def test_a_dataset_under_a_unicode_path_is_checked(tmp_path) -> None:
    from airflow_gpu_dag.datasets import write_manifest

    data = tmp_path / "données" / "训练 set"
    data.mkdir(parents=True)
    (data / "partie-0.parquet").write_bytes(b"abc")
    write_manifest(str(data))
    assert _sensor(str(data), completeness="manifest").execute({})["path"] == str(data)


def _fallback_sensor(path: str, **kwargs: Any) -> Any:
    from airflow.sdk import Asset

    return _sensor(
        path,
        asset=Asset("clean", uri="file:///lake/clean"),
        fallback_to_last_good=True,
        producer_task_id="prep",
        **kwargs,
    )


@pytest.mark.usefixtures("_deferring")
def test_with_a_failed_producer_the_newest_complete_artifact_is_taken_and_logged(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from airflow_gpu_dag.datasets import write_marker

    runs = {name: tmp_path / name for name in ("r0", "r1", "r2")}
    for path in runs.values():
        path.mkdir()
        write_marker(str(path))  # r2, this run's own path, is complete but never its own fallback
    sensor = _fallback_sensor(str(runs["r2"]))
    assert sensor.trigger_rule == "all_done"  # it runs when the producer failed
    out = SimpleNamespace(extra=None)
    events = [
        SimpleNamespace(extra={"path": str(runs["r0"])}),
        SimpleNamespace(extra={"path": str(runs["r1"])}),
        SimpleNamespace(extra=None),  # an event from before paths were recorded
        SimpleNamespace(extra={"path": str(runs["r2"])}),
    ]
    context = {"ti": _producer_ti("failed"), "inlet_events": {sensor.asset: events}}
    context["outlet_events"] = {sensor.asset: out}
    answer = sensor.execute(context)
    assert answer["path"] == str(runs["r1"]) and answer["fallback"] is True
    assert answer["reason"] == "producer 'prep' failed; last good"
    assert out.extra == {"path": str(runs["r1"]), "fallback": True}
    assert "continuing on the last good artifact" in capsys.readouterr().out


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("state", ["upstream_failed", "skipped", "removed"])
def test_a_producer_that_produced_nothing_with_no_good_artifact_blocks_downstream(
    tmp_path, state: str
) -> None:
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    sensor = _fallback_sensor(str(tmp_path / "r2"))
    context = {
        "ti": _producer_ti(state),
        "inlet_events": {sensor.asset: [SimpleNamespace(extra={"path": str(tmp_path / "r1_incomplete")})]},
    }
    with pytest.raises(
        AirflowFailException,
        match=rf"producer 'prep' ended {state} and asset 'file:///lake/clean' has no earlier complete "
        r"artifact.*Fix the producer",
    ):
        sensor.execute(context)


@pytest.mark.usefixtures("_deferring")
def test_with_a_producer_that_succeeded_the_fallback_is_not_used(tmp_path) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    sensor = _fallback_sensor(str(tmp_path / "r2"))
    with pytest.raises(TaskDeferred):  # its own data is not complete yet: wait for it
        sensor.execute({"ti": _producer_ti("success"), "inlet_events": {}})


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("poke_interval", [math.nan, math.inf, -1])
def test_a_poke_interval_that_is_not_a_finite_number_of_seconds_is_refused_naming_the_task(
    poke_interval: float,
) -> None:
    with pytest.raises(ValueError, match=r"^DAG 'd', task 'wait': .*poke_interval="):
        _sensor("/lake/x", poke_interval=poke_interval)


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("timeout", [10**400, 1e300], ids=["int_10e400", "float_1e300"])
def test_a_timeout_too_large_for_a_time_span_is_refused_with_the_fix(timeout: float) -> None:
    with pytest.raises(ValueError, match=r"^DAG 'd', task 'wait': DatasetCompleteSensor timeout=.*timedelta"):
        _sensor("/lake/x", timeout=timeout)
