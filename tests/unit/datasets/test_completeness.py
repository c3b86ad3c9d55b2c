"""Completeness checks (marker, manifest, stable sizes) and the triggers built on them."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
import time
import uuid
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

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
from airflow_gpu_dag.triggers.checkpoint import CheckpointTrigger, find_checkpoint
from airflow_gpu_dag.triggers.dataset import DatasetCompleteTrigger
from tests.unit.memory_store import flaky, write_checkpoint, write_object


@pytest.mark.usefixtures("_deferring")
def test_marker_missing_then_present_memory(mem_dir: str) -> None:
    assert not check_once(mem_dir, "marker").complete
    assert "does not exist" in check_once(mem_dir, "marker").reason
    write_object(mem_dir + "/part-0", b"abc")
    result = check_once(mem_dir, "marker")
    assert not result.complete and "_SUCCESS missing" in result.reason
    write_marker(mem_dir)
    assert check_once(mem_dir, Marker()).complete


@pytest.mark.usefixtures("_deferring")
def test_marker_local_path_and_file_url(tmp_path) -> None:
    (tmp_path / "part-0").write_bytes(b"x")
    assert not check_once(str(tmp_path), "marker").complete
    (tmp_path / "_DONE").write_bytes(b"")
    assert check_once(f"file://{tmp_path}", Marker("_DONE")).complete
    assert not check_once(str(tmp_path), Marker()).complete


@pytest.mark.usefixtures("_deferring")
def test_marker_object_storage_path(tmp_path) -> None:
    from airflow.sdk import ObjectStoragePath

    write_marker(str(tmp_path))
    assert check_once(ObjectStoragePath(f"file://{tmp_path}"), "marker").complete


@pytest.mark.usefixtures("_deferring")
def test_manifest_checks_existence_size_and_checksum(mem_dir: str) -> None:
    write_object(mem_dir + "/a.bin", b"hello")
    write_object(mem_dir + "/sub/b.bin", b"world!")
    data = write_manifest(mem_dir)
    assert [f["path"] for f in data["files"]] == ["a.bin", "sub/b.bin"]
    result = check_once(mem_dir, "manifest")
    assert result.complete and result.files == 2 and result.bytes == 11
    # half-written: size differs from the manifest
    write_object(mem_dir + "/a.bin", b"hell")
    result = check_once(mem_dir, "manifest")
    assert not result.complete and "4 bytes" in result.reason and "lists 5" in result.reason
    # same size, different content: checksum catches it (unless disabled)
    write_object(mem_dir + "/a.bin", b"HELLO")
    assert "sha256" in check_once(mem_dir, "manifest").reason
    assert check_once(mem_dir, Manifest(verify_checksums=False)).complete
    # a listed file disappears
    write_object(mem_dir + "/a.bin", b"hello")
    fs = fsspec.filesystem("memory")
    fs.rm(mem_dir.replace("memory://", "/") + "/sub/b.bin")
    assert "sub/b.bin listed" in check_once(mem_dir, "manifest").reason


@pytest.mark.usefixtures("_deferring")
def test_manifest_missing_or_unreadable(mem_dir: str) -> None:
    write_object(mem_dir + "/a.bin", b"x")
    assert "manifest _MANIFEST.json missing" in check_once(mem_dir, "manifest").reason
    write_object(mem_dir + "/_MANIFEST.json", b"{not json")
    assert "unreadable" in check_once(mem_dir, "manifest").reason
    write_object(mem_dir + "/_MANIFEST.json", json.dumps({"files": [{"path": "a.bin", "size": 1}]}).encode())
    assert check_once(mem_dir, "manifest").complete


@pytest.mark.usefixtures("_deferring")
def test_stable_sizes_need_a_quiet_period(mem_dir: str) -> None:
    tracker = StabilityTracker(StableSize(period=30))
    assert not check_once(mem_dir, "stable", tracker=tracker, now=0).complete  # empty
    write_object(mem_dir + "/a", b"1")
    assert not check_once(mem_dir, StableSize(30), tracker=tracker, now=10).complete
    assert not check_once(mem_dir, StableSize(30), tracker=tracker, now=39).complete
    write_object(mem_dir + "/a", b"12")  # still growing: the clock restarts
    assert not check_once(mem_dir, StableSize(30), tracker=tracker, now=41).complete
    assert not check_once(mem_dir, StableSize(30), tracker=tracker, now=70).complete
    result = check_once(mem_dir, StableSize(30), tracker=tracker, now=71)
    assert result.complete and result.bytes == 2


@pytest.mark.usefixtures("_deferring")
def test_snapshot_of_single_file_and_missing(mem_dir: str) -> None:
    fs = fsspec.filesystem("memory")
    base = mem_dir.replace("memory://", "/")
    assert snapshot(fs, base) == {}
    write_object(mem_dir + "/one", b"123")
    assert snapshot(fs, base + "/one") == {"one": 3}


@pytest.mark.usefixtures("_deferring")
def test_parse_completeness_rules_and_errors() -> None:
    assert parse_completeness("stable") == StableSize()
    assert parse_completeness(Manifest("m.json").to_dict()) == Manifest("m.json")
    with pytest.raises(ValueError, match=r"unknown completeness rule 'markr'.*marker, manifest, stable"):
        parse_completeness("markr")
    with pytest.raises(ValueError, match=r"positive number of seconds"):
        StableSize(period=0)


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ([{"name": "a.bin", "size": 1}], "entry 1 is not a path or an object with a 'path'"),
        ([{"path": "a.bin", "size": "1 byte"}], "entry 1 (a.bin) has size '1 byte'"),
        (["a.bin", None], "entry 2 is not a path"),
    ],
)
def test_a_malformed_manifest_entry_is_unreadable_not_a_crash(mem_dir: str, files: list, reason: str) -> None:
    # A malformed entry makes the manifest unreadable, with the entry named, rather than a KeyError /
    # ValueError out of check_once that fails the sensor with a bare KeyError('path').
    write_object(mem_dir + "/a.bin", b"x")
    write_object(mem_dir + "/_MANIFEST.json", json.dumps({"files": files}).encode())
    result = check_once(mem_dir, "manifest")
    assert not result.complete and "is unreadable" in result.reason and reason in result.reason


@pytest.mark.usefixtures("_deferring")
def test_a_manifest_of_a_dataset_never_written_is_refused(mem_dir: str) -> None:
    # A manifest of a missing dataset would be {"files": []}, which reads as complete.
    with pytest.raises(FileNotFoundError, match="does not exist; write its files first"):
        write_manifest(mem_dir + "/never")
    assert not check_once(mem_dir + "/never", "manifest").complete


# -- object storage paths, and errors of a check -----------------------------------------------------
@pytest.mark.usefixtures("_deferring")
def test_an_object_storage_path_keeps_its_connection(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # str(path) would put the conn_id into the URL (file://local_fs@/tmp/...), which no filesystem
    # reads back: a complete dataset would never be seen complete and the sensor would time out.
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


@pytest.mark.usefixtures("_deferring")
def test_a_transient_storage_error_in_the_worker_is_not_complete_yet(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker-side check (the first check of a deferrable sensor, every poke) waits through a flaky
    # object store as the trigger does, instead of raising the error and failing the try.
    from airflow.sdk.exceptions import TaskDeferred

    import airflow_gpu_dag.sensors.checkpoint as sensor_checkpoint
    import airflow_gpu_dag.sensors.dataset as sensor_dataset
    from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor

    write_marker(str(tmp_path))
    (tmp_path / "checkpoint-3").mkdir()
    write_marker(str(tmp_path / "checkpoint-3"))
    slow_down = OSError("S3 503 SlowDown (transient)")
    monkeypatch.setattr(sensor_dataset, "check_once", flaky(check_once, slow_down))
    poke = DatasetCompleteSensor(
        task_id="wait", path=str(tmp_path), timeout=10, deferrable=False, poke_interval=0.1
    )
    assert poke.execute({})["path"] == str(tmp_path)
    monkeypatch.setattr(sensor_dataset, "check_once", flaky(check_once, slow_down))
    deferring = DatasetCompleteSensor(task_id="wait", path=str(tmp_path), timeout=10)
    with pytest.raises(TaskDeferred):
        deferring.execute({})
    assert "check failed: OSError: S3 503 SlowDown" in deferring._last.reason
    monkeypatch.setattr(sensor_checkpoint, "find_checkpoint", flaky(find_checkpoint, slow_down))
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
    monkeypatch.setattr(sensor_dataset, "check_once", flaky(check_once, slow_down, times=1000))
    from airflow.sdk.exceptions import AirflowSensorTimeout

    never = DatasetCompleteSensor(
        task_id="wait", path=str(tmp_path), timeout=0.3, deferrable=False, poke_interval=0.1
    )
    with pytest.raises(AirflowSensorTimeout, match=r"task 'wait': .*check failed: OSError: S3 503"):
        never.execute({})


@pytest.mark.usefixtures("_deferring")
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


@pytest.mark.usefixtures("_deferring")
def test_a_handwritten_manifest_of_no_files_is_not_complete(tmp_path) -> None:
    # {"files": []} written by hand (write_manifest refuses it) must not read as "all 0 files
    # present": a sensor would release its consumers on a dataset with nothing in it.
    (tmp_path / "_MANIFEST.json").write_text(json.dumps({"files": []}))
    result = check_once(str(tmp_path), "manifest")
    assert not result.complete and "lists no files" in result.reason
    (tmp_path / "part-0").write_bytes(b"ab")
    (tmp_path / "_MANIFEST.json").write_text(json.dumps({"files": ["part-0"]}))
    assert check_once(str(tmp_path), "manifest").complete


#: Bound on a wait that the code under test never reaches (only a hang would): no assertion
#: depends on how long anything takes.
GUARD = 5.0


# -- 3. a manifest wait does not read the files already there while others are missing -----------------
class CountingFS(MemoryFileSystem):
    """Counts the files opened (read for their checksums)."""

    protocol = "countmem"
    opened: list[str] = []

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        return str(super()._strip_protocol(str(path).removeprefix("countmem://")))

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" in mode:
            type(self).opened.append(self._strip_protocol(path))
        return super()._open(path, mode, **kwargs)


fsspec.register_implementation("countmem", CountingFS, clobber=True)


# -- 4. a cancelled trigger stops reading; CancelledError propagates -----------------------------------
class GatedFile:
    """A file whose reads wait for the test, one chunk at a time (1000 chunks)."""

    def __init__(self, gate: threading.Event, started: threading.Event, closed: threading.Event) -> None:
        self.gate, self.started, self.closed = gate, started, closed
        self.reads = 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        self.started.set()
        self.gate.wait(GUARD)
        return b"x" if self.reads <= 1000 else b""

    def __enter__(self) -> GatedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()


class GatedFS(MemoryFileSystem):
    protocol = "gatedmem"
    handle: GatedFile | None = None

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        return str(super()._strip_protocol(str(path).removeprefix("gatedmem://")))

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if self._strip_protocol(path).endswith("/weights") and type(self).handle is not None:
            return type(self).handle
        return super().open(path, mode, **kwargs)


fsspec.register_implementation("gatedmem", GatedFS, clobber=True)


def _gated_dataset(base: str) -> None:
    entries = [{"path": "weights", "size": 1000, "sha256": "0" * 64}]
    write_object(f"memory://{base}/weights", b"x" * 1000)
    write_object(f"memory://{base}/_MANIFEST.json", json.dumps({"files": entries}).encode())


# -- the checks stay off the loop; the triggers round-trip; a resumed trigger keeps its deadline --------
class SlowFS(MemoryFileSystem):
    """Every call waits a little (in the calling thread), as a remote object store does."""

    protocol = "slowmem"

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        return str(super()._strip_protocol(str(path).removeprefix("slowmem://")))

    def exists(self, path: str, **kwargs: Any) -> bool:
        time.sleep(0.05)
        return bool(super().exists(path, **kwargs))


fsspec.register_implementation("slowmem", SlowFS, clobber=True)


def test_checksums_are_read_only_once_every_listed_file_is_there() -> None:
    """A check looks for every listed file before hashing any: otherwise a trigger (or poking sensor)
    waiting for the last part of a large dataset reads all the others again at every poke, in the
    triggerer's shared threads."""
    base = f"ds-{uuid.uuid4().hex[:8]}"
    part = b"x" * 1000
    entries = [
        {"path": "part-0", "size": len(part), "sha256": hashlib.sha256(part).hexdigest()},
        {"path": "part-1", "size": len(part), "sha256": hashlib.sha256(part).hexdigest()},
    ]
    write_object(f"memory://{base}/part-0", part)
    write_object(f"memory://{base}/_MANIFEST.json", json.dumps({"files": entries}).encode())
    CountingFS.opened = []
    result = check_once(f"countmem://{base}", Manifest())
    assert not result.complete and "part-1 listed in _MANIFEST.json is missing" in result.reason
    assert CountingFS.opened == [f"/{base}/_MANIFEST.json"], CountingFS.opened
    write_object(f"memory://{base}/part-1", part)
    assert check_once(f"countmem://{base}", Manifest()).complete
    write_object(f"memory://{base}/part-1", b"y" * 1000)  # same size, other bytes: still caught
    assert "part-1 sha256 does not match" in check_once(f"countmem://{base}", Manifest()).reason


@pytest.mark.parametrize("kind", ["dataset", "checkpoint"])
def test_a_cancelled_trigger_stops_hashing_and_closes_the_file(kind: str) -> None:
    """Cancelling the trigger (task cleared or marked, triggerer stopping) stops its hashing thread:
    hashing the rest of the dataset for nobody would hold one of the event loop's few threads (and a
    stopping triggerer would wait for it)."""
    run = uuid.uuid4().hex[:8]
    if kind == "dataset":
        base = f"ds-{run}"
        _gated_dataset(base)
        trigger: Any = DatasetCompleteTrigger(
            f"gatedmem://{base}", Manifest().to_dict(), time.time() + 3600, 0.05
        )
    else:
        _gated_dataset(f"ck-{run}/checkpoint-3")
        trigger = CheckpointTrigger(
            f"gatedmem://ck-{run}", "checkpoint-{step}", 3, Manifest().to_dict(), time.time() + 3600, 0.05
        )
    gate, started, closed = threading.Event(), threading.Event(), threading.Event()
    GatedFS.handle = handle = GatedFile(gate, started, closed)
    try:

        async def main() -> None:
            async def first() -> None:
                async for event in trigger.run():
                    raise AssertionError(f"unexpected event {event.payload}")

            waiting = asyncio.create_task(first())
            assert await asyncio.to_thread(started.wait, GUARD), "the checksum was never read"
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            gate.set()  # let the orphaned thread's reads go (asyncio.run waits for it on exit)

        asyncio.run(main())
        assert closed.wait(GUARD), "the file was never closed"
        assert handle.reads <= 2, f"the cancelled trigger's thread read {handle.reads} chunks"
    finally:
        GatedFS.handle = None
        gate.set()


@pytest.mark.parametrize("kind", ["dataset", "checkpoint"])
def test_a_slow_filesystem_does_not_block_the_event_loop(kind: str) -> None:
    run = uuid.uuid4().hex[:8]
    if kind == "dataset":
        write_object(f"memory://ds-{run}/part-0", b"x")
        write_marker(f"memory://ds-{run}")
        trigger: Any = DatasetCompleteTrigger(
            f"slowmem://ds-{run}", Marker().to_dict(), time.time() + 60, 0.05
        )
    else:
        write_checkpoint(f"memory://ck-{run}", 2)
        trigger = CheckpointTrigger(
            f"slowmem://ck-{run}", "checkpoint-{step}", 2, Marker().to_dict(), time.time() + 60, 0.05
        )

    async def main() -> tuple[dict[str, Any], int]:
        ticks = 0
        done = asyncio.Event()

        async def other_trigger() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_trigger())
        async for event in trigger.run():
            done.set()
            await other
            return event.payload, ticks
        raise AssertionError("no event")

    payload, ticks = asyncio.run(main())
    assert payload["status"] == "complete"
    assert ticks > 1, "the other coroutine never ran while the trigger checked"


@pytest.mark.usefixtures("_deferring")
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
    # Marker("") would find "<dataset>/" and call any existing dataset complete; Manifest("") would open
    # the directory (IsADirectoryError, retried as "check failed" until the timeout); a NaN or infinite
    # period would never see the sizes stable.
    with pytest.raises(ValueError):
        parse_completeness(spec)


@pytest.mark.usefixtures("_deferring")
def test_an_empty_marker_name_does_not_complete_a_dataset(mem_dir: str) -> None:
    write_object(mem_dir + "/part-0", b"abc")
    with pytest.raises(ValueError, match="name"):
        check_once(mem_dir, Marker(""))
    with pytest.raises(ValueError, match="name"):
        Manifest("")
    with pytest.raises(ValueError, match="period"):
        StableSize(period=True)  # type: ignore[arg-type]


@pytest.mark.usefixtures("_deferring")
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
    # Zero-byte files (opened, not yet written), a Spark _temporary/ folder or a leftover .part file
    # mean the dataset is still being written, however long its sizes have not moved.
    for rel, data in files.items():
        write_object(f"{mem_dir}/{rel}", data)
    tracker = StabilityTracker(StableSize(1))
    check_once(mem_dir, StableSize(1), tracker=tracker, now=0)
    result = check_once(mem_dir, StableSize(1), tracker=tracker, now=100)
    assert not result.complete, result
    # finished: the temporary parts renamed into place, the files written
    fs = fsspec.filesystem("memory")
    fs.rm(mem_dir.removeprefix("memory://"), recursive=True)
    write_object(mem_dir + "/part-0.parquet", b"abc")
    write_object(mem_dir + "/part-1.parquet", b"")  # one empty part among written ones is fine
    check_once(mem_dir, StableSize(1), tracker=tracker, now=200)
    assert check_once(mem_dir, StableSize(1), tracker=tracker, now=300).complete


@pytest.mark.usefixtures("_deferring")
def test_a_manifest_entry_that_is_a_directory_is_not_a_complete_file(tmp_path) -> None:
    # "sub" listed as a file must not match the folder sub/ (its 4096-byte inode size on a local disk,
    # 0 on an object store): the dataset would be complete while files in sub/ are still being written.
    import json

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "part-0").write_bytes(b"ab")
    (tmp_path / "_MANIFEST.json").write_text(json.dumps({"files": [{"path": "sub"}]}))
    result = check_once(str(tmp_path), "manifest")
    assert not result.complete and "sub" in result.reason and "directory" in result.reason
    (tmp_path / "_MANIFEST.json").write_text(json.dumps({"files": [{"path": "sub/part-0", "size": 2}]}))
    assert check_once(str(tmp_path), "manifest").complete


@pytest.mark.usefixtures("_deferring")
def test_write_manifest_refuses_a_dataset_with_no_files(tmp_path, mem_dir: str) -> None:
    # An existing but empty folder (or one holding only the _SUCCESS marker) is refused like a path
    # that does not exist (an empty prefix on an object store): its manifest {"files": []} would read
    # as complete.
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
