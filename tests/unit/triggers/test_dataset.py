"""Tests of ``airflow_gpu_dag.triggers.dataset``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from airflow_gpu_dag.datasets.completeness import Manifest, Marker, StableSize, check_once, write_marker
from airflow_gpu_dag.triggers.budget import BudgetTrigger
from airflow_gpu_dag.triggers.checkpoint import CheckpointTrigger
from airflow_gpu_dag.triggers.dataset import DatasetCompleteTrigger
from tests.unit.memory_store import MISSING_S3FS, flaky, write_object
from tests.unit.triggers.conftest import first_event


@pytest.mark.usefixtures("_deferring")
def test_dataset_trigger_fires_when_complete(mem_dir: str) -> None:
    write_object(mem_dir + "/a", b"x")

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


@pytest.mark.usefixtures("_deferring")
def test_dataset_trigger_times_out_with_reason(mem_dir: str) -> None:
    write_object(mem_dir + "/a", b"x")
    trigger = DatasetCompleteTrigger(mem_dir, Marker().to_dict(), time.time() + 0.3, poke_interval=0.1)
    payload = first_event(trigger)
    assert payload == {"status": "timeout", "path": mem_dir, "reason": payload["reason"]}
    assert "_SUCCESS missing" in payload["reason"]


@pytest.mark.usefixtures("_deferring")
def test_dataset_trigger_serializes_round_trip() -> None:
    trigger = DatasetCompleteTrigger("s3://b/k", StableSize(5).to_dict(), 123.0, 2.0, "aws")
    path, kwargs = trigger.serialize()
    assert path == "airflow_gpu_dag.triggers.dataset.DatasetCompleteTrigger"
    assert DatasetCompleteTrigger(**kwargs).serialize() == (path, kwargs)


@pytest.mark.usefixtures("_deferring")
def test_the_triggers_fail_at_once_on_a_missing_package() -> None:
    # A missing package never installs itself: "Install s3fs" is reported at once as an error, not
    # retried until the deadline (hours) and then reported as a timeout.
    started = time.monotonic()
    payload = first_event(DatasetCompleteTrigger(MISSING_S3FS, Marker().to_dict(), time.time() + 3, 0.1))
    assert payload["status"] == "error" and payload["path"] == MISSING_S3FS
    assert "Install s3fs" in payload["reason"] and "Fix: install" in payload["reason"]
    payload = first_event(
        CheckpointTrigger(MISSING_S3FS, "step-{step}", 1, Marker().to_dict(), time.time() + 3, 0.1)
    )
    assert payload["status"] == "error" and "Install s3fs" in payload["reason"]
    assert time.monotonic() - started < 2.5


@pytest.mark.usefixtures("_deferring")
def test_the_triggers_fail_at_once_on_a_missing_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowNotFoundException

    import airflow_gpu_dag.triggers.checkpoint as trigger_checkpoint
    import airflow_gpu_dag.triggers.dataset as trigger_dataset

    def undefined(*args, **kwargs):
        raise AirflowNotFoundException("The conn_id `lake` isn't defined")

    monkeypatch.setattr(trigger_dataset, "check_once", undefined)
    monkeypatch.setattr(trigger_checkpoint, "resolve", undefined)
    payload = first_event(
        DatasetCompleteTrigger("s3://b/k", Marker().to_dict(), time.time() + 3, 0.1, "lake")
    )
    assert payload["status"] == "error" and "`lake` isn't defined" in payload["reason"]
    payload = first_event(
        CheckpointTrigger("s3://b/c", "step-{step}", 1, Marker().to_dict(), time.time() + 3, 0.1, "lake")
    )
    assert payload["status"] == "error" and "Fix: define the connection" in payload["reason"]


@pytest.mark.usefixtures("_deferring")
def test_the_triggers_keep_waiting_through_a_transient_error(
    mem_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import airflow_gpu_dag.triggers.dataset as trigger_dataset

    write_marker(mem_dir)
    monkeypatch.setattr(trigger_dataset, "check_once", flaky(check_once, OSError("503 SlowDown"), times=2))
    payload = first_event(DatasetCompleteTrigger(mem_dir, Marker().to_dict(), time.time() + 10, 0.1))
    assert payload["status"] == "complete"


async def _events(trigger: Any) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]


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
