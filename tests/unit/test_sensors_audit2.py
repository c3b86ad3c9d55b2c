"""Audit of the sensors, triggers and completeness checks: each test failed on the code before its fix."""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from typing import Any

import fsspec
import pytest

from airflow_gpu_dag.datasets.completeness import (
    Manifest,
    Marker,
    StabilityTracker,
    StableSize,
    check_once,
    parse_completeness,
)


@pytest.fixture(autouse=True)
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


@pytest.fixture
def mem_dir() -> str:
    return f"memory://audit2-{uuid.uuid4().hex[:8]}/clean"


def _write(url: str, data: bytes) -> None:
    with fsspec.open(url, "wb") as handle:
        handle.write(data)


# -- constructor errors name the DAG --------------------------------------------------------------


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


@pytest.mark.parametrize("case", range(len(_bad_sensors())), ids=[c[0] for c in _bad_sensors()])
def test_sensor_constructor_errors_name_the_dag_and_the_task(case: int) -> None:
    # Before: "task 'gate': ..." only; a DAG folder with fifty DAGs left the author to guess which.
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


def test_sensor_constructor_errors_give_the_task_group_id() -> None:
    from airflow.sdk import DAG, TaskGroup

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    where = r"^DAG 'audit_dag_group', task 'prep.wait': .*explicit timeout"
    with DAG("audit_dag_group", schedule=None), TaskGroup("prep"), pytest.raises(ValueError, match=where):
        DatasetCompleteSensor(task_id="wait", path="/lake/x")


# -- rules whose parameters can never work ----------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "marker", "name": ""},
        {"kind": "marker", "name": "  "},
        {"kind": "manifest", "name": ""},
        {"kind": "stable", "period": math.nan},
        {"kind": "stable", "period": math.inf},
    ],
)
def test_a_rule_that_can_never_decide_is_refused(spec: dict[str, Any], mem_dir: str) -> None:
    # Before: Marker("") found "<dataset>/" and called any existing dataset complete; Manifest("") opened
    # the directory (IsADirectoryError, retried as "check failed" until the timeout); a NaN or infinite
    # period never saw the sizes stable.
    with pytest.raises(ValueError):
        parse_completeness(spec)


def test_an_empty_marker_name_does_not_complete_a_dataset(mem_dir: str) -> None:
    _write(mem_dir + "/part-0", b"abc")
    with pytest.raises(ValueError, match="name"):
        check_once(mem_dir, Marker(""))
    with pytest.raises(ValueError, match="name"):
        Manifest("")
    with pytest.raises(ValueError, match="period"):
        StableSize(period=True)  # type: ignore[arg-type]


def test_a_sensor_refuses_an_empty_marker_name_naming_the_task() -> None:
    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    with pytest.raises(ValueError, match=r"^task 'wait': .*name"):
        DatasetCompleteSensor(
            task_id="wait", path="/lake/x", completeness={"kind": "marker", "name": ""}, timeout=60
        )


# -- the stable rule must not accept data that is still being written --------------------------------


@pytest.mark.parametrize(
    "files",
    [
        {"part-0.parquet": b""},
        {"part-0.parquet": b"", "part-1.parquet": b""},
        {"part-0.parquet": b"abc", "_temporary/0/part-1.parquet": b"ab"},
        {"part-0.parquet": b"abc", "part-1.parquet.part": b"ab"},
    ],
    ids=["one-empty-file", "only-empty-files", "spark-temporary", "dot-part"],
)
def test_stable_sizes_do_not_accept_empty_or_temporary_files(files: dict[str, bytes], mem_dir: str) -> None:
    # Before: a dataset of zero-byte files (opened, not yet written) or with a Spark _temporary/ folder
    # or a .part file left over was "complete" once its sizes had not moved for the period.
    for rel, data in files.items():
        _write(f"{mem_dir}/{rel}", data)
    tracker = StabilityTracker(StableSize(1))
    check_once(mem_dir, StableSize(1), tracker=tracker, now=0)
    result = check_once(mem_dir, StableSize(1), tracker=tracker, now=100)
    assert not result.complete, result
    # finished: the temporary parts renamed into place, the files written
    fs = fsspec.filesystem("memory")
    fs.rm(mem_dir.removeprefix("memory://"), recursive=True)
    _write(mem_dir + "/part-0.parquet", b"abc")
    _write(mem_dir + "/part-1.parquet", b"")  # one empty part among written ones is fine
    check_once(mem_dir, StableSize(1), tracker=tracker, now=200)
    assert check_once(mem_dir, StableSize(1), tracker=tracker, now=300).complete


# -- soft_fail ---------------------------------------------------------------------------------------


def test_soft_fail_skips_a_failure_found_by_the_first_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the same permanent error skipped a soft_fail sensor when a poke or the trigger met it, but
    # failed it when the first check in execute() met it (before deferring or poking).
    from airflow.sdk.exceptions import AirflowSkipException

    import airflow_gpu_dag.sensors.checkpoint as sensor_checkpoint
    from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor

    missing = "nosuchscheme-audit2://bucket/ds"  # no filesystem for it: a permanent error
    for deferrable in (True, False):
        for flag in ("soft_fail", "never_fail"):
            sensor = DatasetCompleteSensor(
                task_id="wait", path=missing, timeout=60, deferrable=deferrable, **{flag: True}
            )
            with pytest.raises(AirflowSkipException):
                sensor.execute({})
            ckpt = CheckpointSensor(
                task_id="wait_ckpt",
                checkpoint_dir=missing,
                step=1,
                timeout=60,
                deferrable=deferrable,
                **{flag: True},
            )
            with pytest.raises(AirflowSkipException):
                ckpt.execute({})

    class TI:
        dag_id, run_id = "d", "r"

    monkeypatch.setattr(sensor_checkpoint, "ended_training_state", lambda *a: "failed")
    over = CheckpointSensor(
        task_id="wait_ckpt",
        checkpoint_dir="memory://audit2-none/ckpt",
        step=1,
        timeout=timedelta(minutes=1),
        training_task_id="train",
        soft_fail=True,
    )
    with pytest.raises(AirflowSkipException):
        over.execute({"ti": TI()})


def test_without_soft_fail_the_first_check_still_fails() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    sensor = DatasetCompleteSensor(task_id="wait", path="nosuchscheme-audit2://bucket/ds", timeout=60)
    with pytest.raises(AirflowFailException, match="task 'wait': cannot check dataset"):
        sensor.execute({})


# -- bounds that never end, modes that come from default_args ---------------------------------------


@pytest.mark.parametrize("timeout", [math.nan, math.inf])
def test_a_timeout_that_never_expires_is_refused(timeout: Any) -> None:
    # Before: NaN or infinity passed the "explicit timeout" check; the trigger's deadline was never
    # reached and the sensor waited for ever, which the mandatory timeout exists to prevent.
    from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor

    with pytest.raises(ValueError, match=r"^task 'wait': DatasetCompleteSensor timeout="):
        DatasetCompleteSensor(task_id="wait", path="/lake/x", timeout=timeout)
    with pytest.raises(ValueError, match=r"^task 'wait': CheckpointSensor timeout="):
        CheckpointSensor(task_id="wait", checkpoint_dir="/ckpt", step=1, timeout=timeout)


def test_stable_in_reschedule_mode_from_default_args_is_refused() -> None:
    # Before: only mode= given to the sensor itself was checked; mode="reschedule" from the DAG's
    # default_args reached the sensor (Airflow applies it to BaseSensorOperator) and the stable rule
    # waited out its timeout, as the parse-time error exists to prevent.
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


# -- manifests ---------------------------------------------------------------------------------------


def test_a_manifest_entry_that_is_a_directory_is_not_a_complete_file(tmp_path) -> None:
    # Before: "sub" listed as a file matched the folder sub/ (its 4096-byte inode size on a local disk,
    # 0 on an object store) and the dataset was complete while files in sub/ were still being written.
    import json

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "part-0").write_bytes(b"ab")
    (tmp_path / "_MANIFEST.json").write_text(json.dumps({"files": [{"path": "sub"}]}))
    result = check_once(str(tmp_path), "manifest")
    assert not result.complete and "sub" in result.reason and "directory" in result.reason
    (tmp_path / "_MANIFEST.json").write_text(json.dumps({"files": [{"path": "sub/part-0", "size": 2}]}))
    assert check_once(str(tmp_path), "manifest").complete


def test_write_manifest_refuses_a_dataset_with_no_files(tmp_path, mem_dir: str) -> None:
    # Before: an existing but empty folder (or one holding only the _SUCCESS marker) got the manifest
    # {"files": []}, which reads as complete: the "manifest of nothing" write_manifest refuses for a
    # path that does not exist (an empty prefix on an object store), let through on a local disk.
    from airflow_gpu_dag.datasets.completeness import write_manifest, write_marker

    empty = tmp_path / "clean"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no files"):
        write_manifest(str(empty))
    write_marker(str(empty))
    with pytest.raises(FileNotFoundError, match="no files"):
        write_manifest(str(empty))
    assert not (empty / "_MANIFEST.json").exists()
    assert not check_once(str(empty), "manifest").complete
    (empty / "part-0").write_bytes(b"abc")
    assert write_manifest(str(empty))["files"][0]["path"] == "part-0"
    assert check_once(str(empty), "manifest").complete


# -- the budget trigger ------------------------------------------------------------------------------


@pytest.mark.parametrize("poke_interval", [0, -5])
def test_the_budget_trigger_does_not_spin_on_a_zero_poke_interval(
    poke_interval: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: BudgetGate(poke_interval=0) (or a negative one) gave a trigger that re-read the ledger in a
    # tight loop (thousands of file or SQL reads a second per waiting gate, in the shared triggerer);
    # the dataset and checkpoint triggers wait at least 0.1 s between checks.
    import asyncio

    import airflow_gpu_dag.budget.check as budget_check
    from airflow_gpu_dag.core.model.budget import BudgetCap
    from airflow_gpu_dag.triggers.budget import BudgetTrigger

    calls = {"n": 0}

    class Refused:
        allowed, reason = False, "over the cap"

    def check(*args: Any, **kwargs: Any) -> Refused:
        calls["n"] += 1
        return Refused()

    monkeypatch.setattr(budget_check, "check_budget", check)
    trigger = BudgetTrigger("train", "r1", BudgetCap(gpu_hours_per_run=3).to_dict(), None, poke_interval)

    slept: list[float] = []

    class Stop(Exception):
        pass

    async def sleep(seconds: float) -> None:  # the trigger's wait between checks, recorded
        slept.append(seconds)
        if len(slept) == 3:
            raise Stop

    monkeypatch.setattr(asyncio, "sleep", sleep)

    async def wait_a_while() -> None:
        async for _ in trigger.run():
            raise AssertionError("the budget never allowed the request")

    with pytest.raises(Stop):
        asyncio.run(wait_a_while())
    assert calls["n"] == 3 and slept == [0.1, 0.1, 0.1], (calls, slept)


# -- the fallback's producer -------------------------------------------------------------------------


def test_a_fallback_producer_that_is_not_in_the_dag_fails_naming_it(mem_dir: str) -> None:
    # Before: producer_task_id="preprocesss" (a typo) read no state, so the fallback never applied: a
    # failed producer left the sensor waiting out its timeout (hours) instead of using the last good
    # artifact, and nothing said why. The checkpoint sensor already refuses an unknown training task.
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
