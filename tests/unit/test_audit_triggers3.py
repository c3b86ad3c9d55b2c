"""Triggers in the shared triggerer: off its event loop, stopped on cancel, fresh listings every look.

The triggerer runs every trigger of the deployment in one asyncio event loop (and a few shared
threads): a trigger that blocks there holds every other team's triggers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import uuid
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from airflow_gpu_dag.datasets.completeness import Manifest, Marker, check_once, write_marker
from airflow_gpu_dag.triggers.budget import BudgetTrigger
from airflow_gpu_dag.triggers.checkpoint import CheckpointTrigger, find_checkpoint
from airflow_gpu_dag.triggers.dataset import DatasetCompleteTrigger

#: Bound on a wait that only ends on the old code by giving up (never met by the fixed code): no
#: assertion depends on how long anything takes.
GUARD = 5.0


class ListingCacheFS(MemoryFileSystem):
    """A memory filesystem that keeps directory listings the way s3fs, gcsfs and adlfs do by default
    (``use_listings_cache=True``, no expiry), for as long as the (cached) filesystem object lives;
    ``invalidate_cache(path)`` drops the listing of the path and of its parents, as theirs does."""

    protocol = "lscache"

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        return str(super()._strip_protocol(str(path).removeprefix("lscache://")))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if path not in self.dircache:
            self.dircache[path] = super().ls(path, detail=True)
        listing = self.dircache[path]
        return listing if detail else [entry["name"] for entry in listing]

    def invalidate_cache(self, path: str | None = None) -> None:
        if path is None:
            self.dircache.clear()
            return
        path = self._strip_protocol(path)
        while path:
            self.dircache.pop(path, None)
            path = path.rsplit("/", 1)[0] if "/" in path.strip("/") else ""


fsspec.register_implementation("lscache", ListingCacheFS, clobber=True)


def _write(url: str, data: bytes) -> None:
    with fsspec.open(url, "wb") as handle:
        handle.write(data)


def _checkpoint(directory: str, step: int) -> None:
    _write(f"{directory}/checkpoint-{step}/weights", b"w")
    write_marker(f"{directory}/checkpoint-{step}")


# -- 1. the budget trigger's ledger read does not hold the thread other triggers share -------------------
def test_a_blocked_budget_read_does_not_hold_the_thread_other_triggers_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: ``sync_to_async(check_budget)`` (thread-sensitive, asgiref's default) ran the read in
    the one thread every thread-sensitive ``sync_to_async`` call of the triggerer runs in (Airflow's
    ExternalTaskSensor and human-in-the-loop triggers, every other budget gate). A read blocked on the
    file ledger's lock or a SQL database that does not answer held all of them."""
    from asgiref.sync import sync_to_async

    import airflow_gpu_dag.budget.check as budget_check
    from airflow_gpu_dag.core.model.budget import BudgetCap

    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    class Allowed:
        allowed, reason = True, "cap raised"

    def blocked_read(*args: Any, **kwargs: Any) -> Allowed:
        order.append("budget read started")
        started.set()
        order.append("budget read released" if release.wait(GUARD) else "budget read gave up")
        return Allowed()

    monkeypatch.setattr(budget_check, "check_budget", blocked_read)
    trigger = BudgetTrigger("d", "r1", BudgetCap(gpu_hours_per_run=3).to_dict(), None, 30.0)

    def another_trigger_call() -> None:  # e.g. WorkflowTrigger's sync_to_async(get_task_states)
        order.append("other trigger's call")
        release.set()

    async def main() -> dict[str, Any]:
        async def first() -> dict[str, Any]:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("no event")

        gate = asyncio.create_task(first())
        assert await asyncio.to_thread(started.wait, GUARD)
        await sync_to_async(another_trigger_call)()
        return await gate

    assert asyncio.run(main()) == {"status": "allowed", "reason": "cap raised"}
    assert order == ["budget read started", "other trigger's call", "budget read released"], order


# -- 2. a checkpoint written after the first look is found ---------------------------------------------
def test_a_checkpoint_written_after_the_first_look_is_found_on_a_caching_filesystem() -> None:
    """Before: the directory listing was taken from the filesystem's cache, which s3fs/gcsfs/adlfs
    keep for the life of the (process-wide) filesystem object: the triggerer (and a poking sensor)
    saw the first listing at every later look, and a stage dependency on S3 waited out its timeout
    next to checkpoint 1000."""
    base = f"ckpt-{uuid.uuid4().hex[:8]}/run"
    memory, cached = f"memory://{base}", f"lscache://{base}"
    _checkpoint(memory, 500)
    path, step, reason = find_checkpoint(cached, "checkpoint-{step}", 1000, "marker")
    assert (path, step) == (None, None) and "no checkpoint with step >= 1000" in reason
    _checkpoint(memory, 1000)
    assert find_checkpoint(cached, "checkpoint-{step}", 1000, "marker")[:2] == (
        f"{cached}/checkpoint-1000",
        1000,
    )


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


def test_checksums_are_read_only_once_every_listed_file_is_there() -> None:
    """Before: each check hashed every file already written before it noticed a later one missing;
    a trigger (or poking sensor) waiting for the last part of a large dataset read all the others
    again at every poke, in the triggerer's shared threads."""
    base = f"ds-{uuid.uuid4().hex[:8]}"
    part = b"x" * 1000
    entries = [
        {"path": "part-0", "size": len(part), "sha256": hashlib.sha256(part).hexdigest()},
        {"path": "part-1", "size": len(part), "sha256": hashlib.sha256(part).hexdigest()},
    ]
    _write(f"memory://{base}/part-0", part)
    _write(f"memory://{base}/_MANIFEST.json", json.dumps({"files": entries}).encode())
    CountingFS.opened = []
    result = check_once(f"countmem://{base}", Manifest())
    assert not result.complete and "part-1 listed in _MANIFEST.json is missing" in result.reason
    assert CountingFS.opened == [f"/{base}/_MANIFEST.json"], CountingFS.opened
    _write(f"memory://{base}/part-1", part)
    assert check_once(f"countmem://{base}", Manifest()).complete
    _write(f"memory://{base}/part-1", b"y" * 1000)  # same size, other bytes: still caught
    assert "part-1 sha256 does not match" in check_once(f"countmem://{base}", Manifest()).reason


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
    _write(f"memory://{base}/weights", b"x" * 1000)
    _write(f"memory://{base}/_MANIFEST.json", json.dumps({"files": entries}).encode())


@pytest.mark.parametrize("kind", ["dataset", "checkpoint"])
def test_a_cancelled_trigger_stops_hashing_and_closes_the_file(kind: str) -> None:
    """Before: cancelling the trigger (task cleared or marked, triggerer stopping) left its thread
    hashing the rest of the dataset for nobody, holding one of the event loop's few threads (and a
    stopping triggerer waited for it)."""
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


@pytest.mark.parametrize("kind", ["dataset", "checkpoint"])
def test_a_slow_filesystem_does_not_block_the_event_loop(kind: str) -> None:
    run = uuid.uuid4().hex[:8]
    if kind == "dataset":
        _write(f"memory://ds-{run}/part-0", b"x")
        write_marker(f"memory://ds-{run}")
        trigger: Any = DatasetCompleteTrigger(
            f"slowmem://ds-{run}", Marker().to_dict(), time.time() + 60, 0.05
        )
    else:
        _checkpoint(f"memory://ck-{run}", 2)
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


def test_every_parameter_survives_serialize_and_a_restart() -> None:
    from airflow_gpu_dag.core.model.budget import BudgetCap

    deadline = time.time() - 1  # a triggerer restarted after the deadline: it times out, not restarts it
    triggers = [
        DatasetCompleteTrigger("memory://d", Manifest("m.json", False).to_dict(), deadline, 7.5, "conn"),
        CheckpointTrigger(
            "memory://c", "s-{step}", 9, Marker("_OK").to_dict(), deadline, 3.0, "c", "t", "d", "r"
        ),
        BudgetTrigger("d", "r", BudgetCap(1.0, 2.0, "gpu_a100").to_dict(), "/l.jsonl", 12.0, 3600.0),
    ]
    for trigger in triggers:
        classpath, kwargs = trigger.serialize()
        module, _, name = classpath.rpartition(".")
        rebuilt = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
        assert type(rebuilt) is type(trigger) and rebuilt.serialize() == (classpath, kwargs)
    classpath, kwargs = DatasetCompleteTrigger("memory://d", Marker().to_dict(), deadline, 7.5).serialize()
    (payload,) = asyncio.run(_events(DatasetCompleteTrigger(**kwargs)))
    assert payload["status"] == "timeout" and payload["path"] == "memory://d"


async def _events(trigger: Any) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]
