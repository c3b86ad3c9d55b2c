"""Completeness checks (marker, manifest, stable sizes) and the triggers built on them."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import fsspec
import pytest

from airflow_gpu_dag.datasets.completeness import (
    Manifest,
    Marker,
    StabilityTracker,
    StableSize,
    check_once,
    parse_completeness,
    snapshot,
    write_manifest,
    write_marker,
)
from airflow_gpu_dag.triggers.checkpoint import CheckpointTrigger, checkpoint_regex, find_checkpoint
from airflow_gpu_dag.triggers.dataset import DatasetCompleteTrigger


@pytest.fixture(autouse=True)
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


@pytest.fixture
def mem_dir() -> str:
    """A fresh directory in fsspec's in-memory object store."""
    return f"memory://lake-{uuid.uuid4().hex[:8]}/clean"


def _write(url: str, data: bytes) -> None:
    with fsspec.open(url, "wb") as handle:
        handle.write(data)


def test_marker_missing_then_present_memory(mem_dir: str) -> None:
    assert not check_once(mem_dir, "marker").complete
    assert "does not exist" in check_once(mem_dir, "marker").reason
    _write(mem_dir + "/part-0", b"abc")
    result = check_once(mem_dir, "marker")
    assert not result.complete and "_SUCCESS missing" in result.reason
    write_marker(mem_dir)
    assert check_once(mem_dir, Marker()).complete


def test_marker_local_path_and_file_url(tmp_path) -> None:
    (tmp_path / "part-0").write_bytes(b"x")
    assert not check_once(str(tmp_path), "marker").complete
    (tmp_path / "_DONE").write_bytes(b"")
    assert check_once(f"file://{tmp_path}", Marker("_DONE")).complete
    assert not check_once(str(tmp_path), Marker()).complete


def test_marker_object_storage_path(tmp_path) -> None:
    from airflow.sdk import ObjectStoragePath

    write_marker(str(tmp_path))
    assert check_once(ObjectStoragePath(f"file://{tmp_path}"), "marker").complete


def test_manifest_checks_existence_size_and_checksum(mem_dir: str) -> None:
    _write(mem_dir + "/a.bin", b"hello")
    _write(mem_dir + "/sub/b.bin", b"world!")
    data = write_manifest(mem_dir)
    assert [f["path"] for f in data["files"]] == ["a.bin", "sub/b.bin"]
    result = check_once(mem_dir, "manifest")
    assert result.complete and result.files == 2 and result.bytes == 11
    # half-written: size differs from the manifest
    _write(mem_dir + "/a.bin", b"hell")
    result = check_once(mem_dir, "manifest")
    assert not result.complete and "4 bytes" in result.reason and "lists 5" in result.reason
    # same size, different content: checksum catches it (unless disabled)
    _write(mem_dir + "/a.bin", b"HELLO")
    assert "sha256" in check_once(mem_dir, "manifest").reason
    assert check_once(mem_dir, Manifest(verify_checksums=False)).complete
    # a listed file disappears
    _write(mem_dir + "/a.bin", b"hello")
    fs = fsspec.filesystem("memory")
    fs.rm(mem_dir.replace("memory://", "/") + "/sub/b.bin")
    assert "sub/b.bin listed" in check_once(mem_dir, "manifest").reason


def test_manifest_missing_or_unreadable(mem_dir: str) -> None:
    _write(mem_dir + "/a.bin", b"x")
    assert "manifest _MANIFEST.json missing" in check_once(mem_dir, "manifest").reason
    _write(mem_dir + "/_MANIFEST.json", b"{not json")
    assert "unreadable" in check_once(mem_dir, "manifest").reason
    _write(mem_dir + "/_MANIFEST.json", json.dumps({"files": [{"path": "a.bin", "size": 1}]}).encode())
    assert check_once(mem_dir, "manifest").complete


def test_stable_sizes_need_a_quiet_period(mem_dir: str) -> None:
    tracker = StabilityTracker(StableSize(period=30))
    assert not check_once(mem_dir, "stable", tracker=tracker, now=0).complete  # empty
    _write(mem_dir + "/a", b"1")
    assert not check_once(mem_dir, StableSize(30), tracker=tracker, now=10).complete
    assert not check_once(mem_dir, StableSize(30), tracker=tracker, now=39).complete
    _write(mem_dir + "/a", b"12")  # still growing: the clock restarts
    assert not check_once(mem_dir, StableSize(30), tracker=tracker, now=41).complete
    assert not check_once(mem_dir, StableSize(30), tracker=tracker, now=70).complete
    result = check_once(mem_dir, StableSize(30), tracker=tracker, now=71)
    assert result.complete and result.bytes == 2


def test_snapshot_of_single_file_and_missing(mem_dir: str) -> None:
    fs = fsspec.filesystem("memory")
    base = mem_dir.replace("memory://", "/")
    assert snapshot(fs, base) == {}
    _write(mem_dir + "/one", b"123")
    assert snapshot(fs, base + "/one") == {"one": 3}


def test_parse_completeness_rules_and_errors() -> None:
    assert parse_completeness("stable") == StableSize()
    assert parse_completeness(Manifest("m.json").to_dict()) == Manifest("m.json")
    with pytest.raises(ValueError, match=r"unknown completeness rule 'markr'.*marker, manifest, stable"):
        parse_completeness("markr")
    with pytest.raises(ValueError, match=r"positive number of seconds"):
        StableSize(period=0)


def _first_event(trigger) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(first(), 20))


def test_dataset_trigger_fires_when_complete(mem_dir: str) -> None:
    _write(mem_dir + "/a", b"x")

    async def produce_later() -> None:
        await asyncio.sleep(0.3)
        write_marker(mem_dir)

    trigger = DatasetCompleteTrigger(mem_dir, Marker().to_dict(), time.time() + 10, poke_interval=0.1)

    async def main() -> dict:
        task = asyncio.create_task(produce_later())
        async for event in trigger.run():
            await task
            return event.payload
        raise AssertionError("no event")

    payload = asyncio.run(asyncio.wait_for(main(), 20))
    assert payload["status"] == "complete" and payload["path"] == mem_dir


def test_dataset_trigger_times_out_with_reason(mem_dir: str) -> None:
    _write(mem_dir + "/a", b"x")
    trigger = DatasetCompleteTrigger(mem_dir, Marker().to_dict(), time.time() + 0.3, poke_interval=0.1)
    payload = _first_event(trigger)
    assert payload == {"status": "timeout", "path": mem_dir, "reason": payload["reason"]}
    assert "_SUCCESS missing" in payload["reason"]


def test_dataset_trigger_serializes_round_trip() -> None:
    trigger = DatasetCompleteTrigger("s3://b/k", StableSize(5).to_dict(), 123.0, 2.0, "aws")
    path, kwargs = trigger.serialize()
    assert path == "airflow_gpu_dag.triggers.dataset.DatasetCompleteTrigger"
    assert DatasetCompleteTrigger(**kwargs).serialize() == (path, kwargs)


def test_find_checkpoint_first_complete_at_or_after_step(mem_dir: str) -> None:
    assert "does not exist" in find_checkpoint(mem_dir, "step-{step}", 100, "marker")[2]
    _write(mem_dir + "/step-50/w.bin", b"x")
    write_marker(mem_dir + "/step-50")
    assert find_checkpoint(mem_dir, "step-{step}", 100, "marker")[0] is None
    _write(mem_dir + "/step-100/w.bin", b"x")  # being written: no marker yet
    path, _, reason = find_checkpoint(mem_dir, "step-{step}", 100, "marker")
    assert path is None and "none is complete" in reason
    _write(mem_dir + "/step-150/w.bin", b"x")
    write_marker(mem_dir + "/step-150")
    assert find_checkpoint(mem_dir, "step-{step}", 100, "marker")[:2] == (mem_dir + "/step-150", 150)
    write_marker(mem_dir + "/step-100")
    assert find_checkpoint(mem_dir, "step-{step}", 100, "marker")[1] == 100


def test_checkpoint_trigger_events(mem_dir: str) -> None:
    _write(mem_dir + "/checkpoint-2/w", b"x")
    write_marker(mem_dir + "/checkpoint-2")
    ok = CheckpointTrigger(mem_dir, "checkpoint-{step}", 2, Marker().to_dict(), time.time() + 5, 0.1)
    assert _first_event(ok)["step"] == 2
    late = CheckpointTrigger(mem_dir, "checkpoint-{step}", 3, Marker().to_dict(), time.time() + 0.2, 0.1)
    payload = _first_event(late)
    assert payload["status"] == "timeout" and "step >= 3" in payload["reason"]


def test_checkpoint_pattern_needs_step() -> None:
    assert checkpoint_regex("ckpt_{step}.d").match("ckpt_0012.d").group(1) == "0012"
    with pytest.raises(ValueError, match=r"must contain '\{step\}'"):
        checkpoint_regex("checkpoint")


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ([{"name": "a.bin", "size": 1}], "entry 1 is not a path or an object with a 'path'"),
        ([{"path": "a.bin", "size": "1 byte"}], "entry 1 (a.bin) has size '1 byte'"),
        (["a.bin", None], "entry 2 is not a path"),
    ],
)
def test_a_malformed_manifest_entry_is_unreadable_not_a_crash(mem_dir: str, files: list, reason: str) -> None:
    # Before: KeyError / ValueError out of check_once, a sensor failing with a bare KeyError('path').
    _write(mem_dir + "/a.bin", b"x")
    _write(mem_dir + "/_MANIFEST.json", json.dumps({"files": files}).encode())
    result = check_once(mem_dir, "manifest")
    assert not result.complete and "is unreadable" in result.reason and reason in result.reason


def test_a_manifest_of_a_dataset_never_written_is_refused(mem_dir: str) -> None:
    # Before: {"files": []} was written, and the missing dataset then read as complete.
    with pytest.raises(FileNotFoundError, match="does not exist; write its files first"):
        write_manifest(mem_dir + "/never")
    assert not check_once(mem_dir + "/never", "manifest").complete


def test_the_last_good_stable_artifact_must_still_exist(tmp_path) -> None:
    # "stable" artifacts cannot be re-proven by one check: before, any recorded path was accepted,
    # a deleted one too, and handed to the consumer as good data.
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


def test_stable_completeness_cannot_run_in_reschedule_mode() -> None:
    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    with pytest.raises(ValueError, match="cannot run in mode='reschedule'"):
        DatasetCompleteSensor(
            task_id="w", path="/x", completeness="stable", timeout=60, deferrable=False, mode="reschedule"
        )
    DatasetCompleteSensor(task_id="p", path="/x", completeness="stable", timeout=60, deferrable=False)


# -- object storage paths, and errors of a check -----------------------------------------------------
def test_an_object_storage_path_keeps_its_connection(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: str(path) put the conn_id into the URL (file://local_fs@/tmp/...), which no filesystem
    # reads back: a complete dataset was never seen complete and the sensor timed out.
    from airflow.sdk import ObjectStoragePath

    from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor

    monkeypatch.setenv("AIRFLOW_CONN_LOCAL_FS", json.dumps({"conn_type": "fs"}))
    write_marker(str(tmp_path))
    (tmp_path / "checkpoint-10").mkdir()
    write_marker(str(tmp_path / "checkpoint-10"))
    path = ObjectStoragePath(f"file://{tmp_path}", conn_id="local_fs")
    sensor = DatasetCompleteSensor(task_id="wait_clean", path=path, timeout=5, deferrable=False)
    assert (sensor.path, sensor.conn_id) == (f"file://{tmp_path}", "local_fs")
    assert sensor.executor_config["gpu_dag"]["awaits"] == [f"file://{tmp_path}"]
    assert sensor._check().complete
    assert sensor.execute({})["path"] == f"file://{tmp_path}"
    ckpt = CheckpointSensor(task_id="wait_ckpt", checkpoint_dir=path, step=10, timeout=5, deferrable=False)
    assert (ckpt.checkpoint_dir, ckpt.conn_id) == (f"file://{tmp_path}", "local_fs")
    assert ckpt.execute({}) == {"path": f"file://{tmp_path}/checkpoint-10", "step": 10}
    # object storage: the URL without the connection; the sensor's own conn_id wins over the path's
    lake = ObjectStoragePath("s3://bucket/clean/{{ ds }}", conn_id="lake")
    s3 = DatasetCompleteSensor(task_id="w", path=lake, timeout=5)
    assert (s3.path, s3.conn_id) == ("s3://bucket/clean/{{ ds }}", "lake")
    assert DatasetCompleteSensor(task_id="w2", path=lake, timeout=5, conn_id="other").conn_id == "other"
    assert DatasetCompleteSensor(task_id="w3", path=str(tmp_path), timeout=5).conn_id is None


def _flaky(real, error: Exception, times: int = 1):
    calls = {"n": 0}

    def check(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] <= times:
            raise error
        return real(*args, **kwargs)

    return check


def test_a_transient_storage_error_in_the_worker_is_not_complete_yet(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the trigger kept waiting through a flaky object store, but the worker-side check (the
    # first check of a deferrable sensor, every poke) raised it and failed the try.
    from airflow.sdk.exceptions import TaskDeferred

    import airflow_gpu_dag.sensors.checkpoint as sensor_checkpoint
    import airflow_gpu_dag.sensors.dataset as sensor_dataset
    from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor

    write_marker(str(tmp_path))
    (tmp_path / "checkpoint-3").mkdir()
    write_marker(str(tmp_path / "checkpoint-3"))
    slow_down = OSError("S3 503 SlowDown (transient)")
    monkeypatch.setattr(sensor_dataset, "check_once", _flaky(check_once, slow_down))
    poke = DatasetCompleteSensor(
        task_id="wait", path=str(tmp_path), timeout=10, deferrable=False, poke_interval=0.1
    )
    assert poke.execute({})["path"] == str(tmp_path)
    monkeypatch.setattr(sensor_dataset, "check_once", _flaky(check_once, slow_down))
    deferring = DatasetCompleteSensor(task_id="wait", path=str(tmp_path), timeout=10)
    with pytest.raises(TaskDeferred):
        deferring.execute({})
    assert "check failed: OSError: S3 503 SlowDown" in deferring._last.reason
    monkeypatch.setattr(sensor_checkpoint, "find_checkpoint", _flaky(find_checkpoint, slow_down))
    ckpt = CheckpointSensor(
        task_id="wait_ckpt",
        checkpoint_dir=str(tmp_path),
        step=3,
        timeout=10,
        deferrable=False,
        poke_interval=0.1,
    )
    assert ckpt.execute({})["step"] == 3
    # the timeout still bounds the wait, and its message gives the error
    monkeypatch.setattr(sensor_dataset, "check_once", _flaky(check_once, slow_down, times=1000))
    from airflow.sdk.exceptions import AirflowSensorTimeout

    never = DatasetCompleteSensor(
        task_id="wait", path=str(tmp_path), timeout=0.3, deferrable=False, poke_interval=0.1
    )
    with pytest.raises(AirflowSensorTimeout, match=r"task 'wait': .*check failed: OSError: S3 503"):
        never.execute({})


def test_permanent_errors_are_told_apart_from_transient_ones() -> None:
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_gpu_dag.datasets.completeness import permanent_error

    assert permanent_error(OSError("503 SlowDown")) is None
    assert permanent_error(TimeoutError()) is None
    assert permanent_error(ValueError("bad")) is None
    assert "Fix: install" in (permanent_error(ImportError("Install s3fs to access S3")) or "")
    assert "Fix: define the connection" in (
        permanent_error(AirflowNotFoundException("The conn_id `x` isn't defined")) or ""
    )
    assert "Fix: install the Airflow provider" in (
        permanent_error(ValueError("No filesystem registered for scheme s3")) or ""
    )


MISSING_S3FS = "s3://nonexistent-bucket-gpu-dag/ds"  # s3fs is not installed here: ImportError


def test_the_triggers_fail_at_once_on_a_missing_package() -> None:
    # Before: "check failed: ImportError: Install s3fs" was retried until the deadline (hours), then
    # reported as a timeout.
    started = time.monotonic()
    payload = _first_event(DatasetCompleteTrigger(MISSING_S3FS, Marker().to_dict(), time.time() + 3, 0.1))
    assert payload["status"] == "error" and payload["path"] == MISSING_S3FS
    assert "Install s3fs" in payload["reason"] and "Fix: install" in payload["reason"]
    payload = _first_event(
        CheckpointTrigger(MISSING_S3FS, "step-{step}", 1, Marker().to_dict(), time.time() + 3, 0.1)
    )
    assert payload["status"] == "error" and "Install s3fs" in payload["reason"]
    assert time.monotonic() - started < 2.5


def test_the_triggers_fail_at_once_on_a_missing_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowNotFoundException

    import airflow_gpu_dag.triggers.checkpoint as trigger_checkpoint
    import airflow_gpu_dag.triggers.dataset as trigger_dataset

    def undefined(*args, **kwargs):
        raise AirflowNotFoundException("The conn_id `lake` isn't defined")

    monkeypatch.setattr(trigger_dataset, "check_once", undefined)
    monkeypatch.setattr(trigger_checkpoint, "resolve", undefined)
    payload = _first_event(
        DatasetCompleteTrigger("s3://b/k", Marker().to_dict(), time.time() + 3, 0.1, "lake")
    )
    assert payload["status"] == "error" and "`lake` isn't defined" in payload["reason"]
    payload = _first_event(
        CheckpointTrigger("s3://b/c", "step-{step}", 1, Marker().to_dict(), time.time() + 3, 0.1, "lake")
    )
    assert payload["status"] == "error" and "Fix: define the connection" in payload["reason"]


def test_the_triggers_keep_waiting_through_a_transient_error(
    mem_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import airflow_gpu_dag.triggers.dataset as trigger_dataset

    write_marker(mem_dir)
    monkeypatch.setattr(trigger_dataset, "check_once", _flaky(check_once, OSError("503 SlowDown"), times=2))
    payload = _first_event(DatasetCompleteTrigger(mem_dir, Marker().to_dict(), time.time() + 10, 0.1))
    assert payload["status"] == "complete"


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


def test_a_handwritten_manifest_of_no_files_is_not_complete(tmp_path) -> None:
    # Before: {"files": []} written by hand (write_manifest refuses it) read as "all 0 files present",
    # so a sensor released its consumers on a dataset with nothing in it.
    (tmp_path / "_MANIFEST.json").write_text(json.dumps({"files": []}))
    result = check_once(str(tmp_path), "manifest")
    assert not result.complete and "lists no files" in result.reason
    (tmp_path / "part-0").write_bytes(b"ab")
    (tmp_path / "_MANIFEST.json").write_text(json.dumps({"files": ["part-0"]}))
    assert check_once(str(tmp_path), "manifest").complete
