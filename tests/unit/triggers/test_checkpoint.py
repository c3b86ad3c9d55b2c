"""A checkpoint sensor that watches its training task: it gives up as soon as training has ended
without the checkpoint, instead of waiting out its timeout (hours for a real stage dependency)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import fsspec
import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred
from fsspec.implementations.memory import MemoryFileSystem

import airflow_gpu_dag.triggers.checkpoint as trigger_module
from airflow_gpu_dag.datasets.completeness import Marker, write_marker
from airflow_gpu_dag.triggers.checkpoint import (
    TRAINING_OVER,
    CheckpointTrigger,
    checkpoint_regex,
    find_checkpoint,
)
from tests.unit.memory_store import write_checkpoint, write_object
from tests.unit.sensors.conftest import checkpoint_sensor, sensor_context
from tests.unit.triggers.conftest import first_event


def _write_checkpoint(directory: str, step: int) -> None:
    with fsspec.open(f"{directory}/checkpoint-{step}/weights", "wb") as handle:
        handle.write(b"w")
    write_marker(f"{directory}/checkpoint-{step}")


def _states(*states: str | Exception, calls: list[tuple[str, str, str]] | None = None) -> Any:
    """A stand-in for ``training_state``: the given states in turn, then the last one forever."""
    queue = list(states)

    def state(dag_id: str, run_id: str, task_id: str) -> str | None:
        if calls is not None:
            calls.append((dag_id, run_id, task_id))
        current = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(current, Exception):
            raise current
        return current

    return state


def _trigger(directory: str, *, seconds: float = 30.0, watch: bool = True) -> CheckpointTrigger:
    return CheckpointTrigger(
        directory,
        "checkpoint-{step}",
        2,
        Marker().to_dict(),
        time.time() + seconds,
        0.05,
        training_task_id="train" if watch else None,
        dag_id="d" if watch else None,
        run_id="r1" if watch else None,
    )


# -- the sensor ---------------------------------------------------------------------------------------


# -- the trigger ------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_deferring")
def test_the_trigger_fires_once_training_has_failed(ckpt_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        trigger_module, "training_state", _states("running", "running", "failed", calls=calls)
    )
    payload = first_event(_trigger(ckpt_dir))
    assert payload["status"] == "training_over" and payload["state"] == "failed"
    assert calls[0] == ("d", "r1", "train") and len(calls) == 3
    assert "does not exist yet" in payload["reason"]


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("state", sorted(TRAINING_OVER))
def test_every_end_state_of_training_ends_the_wait(
    state: str, ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trigger_module, "training_state", _states(state))
    assert first_event(_trigger(ckpt_dir))["status"] == "training_over"


@pytest.mark.usefixtures("_deferring")
def test_a_retry_is_not_the_end_of_training(ckpt_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # up_for_retry, then the next try writes the checkpoint: the wait goes on and succeeds
    seen: list[str] = []

    def state(dag_id: str, run_id: str, task_id: str) -> str:
        seen.append("up_for_retry")
        if len(seen) == 3:
            _write_checkpoint(ckpt_dir, 2)
        return "up_for_retry" if len(seen) < 3 else "running"

    monkeypatch.setattr(trigger_module, "training_state", state)
    payload = first_event(_trigger(ckpt_dir))
    assert payload["status"] == "complete" and payload["step"] == 2


@pytest.mark.usefixtures("_deferring")
def test_a_checkpoint_written_just_before_training_ended_counts(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the look at the directory comes first, then the state: training wrote checkpoint 2 and succeeded
    # in between. One more look finds it.
    def state(dag_id: str, run_id: str, task_id: str) -> str:
        _write_checkpoint(ckpt_dir, 2)
        return "success"

    monkeypatch.setattr(trigger_module, "training_state", state)
    payload = first_event(_trigger(ckpt_dir))
    assert payload["status"] == "complete" and payload["path"] == f"{ckpt_dir}/checkpoint-2"


@pytest.mark.usefixtures("_deferring")
def test_an_unreadable_state_keeps_waiting_until_the_deadline(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trigger_module, "training_state", _states(ConnectionError("api-server down")))
    assert first_event(_trigger(ckpt_dir, seconds=0.3))["status"] == "timeout"


@pytest.mark.usefixtures("_deferring")
def test_a_store_that_cannot_be_read_once_training_ended_is_not_taken_for_no_checkpoint(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training succeeded but every look fails (an S3 503): the trigger cannot tell whether the
    checkpoint is there, so it does not say training wrote none; it waits for its deadline."""

    def unreadable(*args: object, **kwargs: object) -> None:
        raise OSError("S3 503 SlowDown")

    monkeypatch.setattr(trigger_module, "training_state", _states("success"))
    monkeypatch.setattr(trigger_module, "find_checkpoint", unreadable)
    payload = first_event(_trigger(ckpt_dir, seconds=0.3))
    assert payload["status"] == "timeout" and "S3 503 SlowDown" in payload["reason"]


@pytest.mark.usefixtures("_deferring")
def test_without_a_training_task_the_state_is_never_read(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trigger_module, "training_state", _states(AssertionError("read")))
    assert first_event(_trigger(ckpt_dir, seconds=0.3, watch=False))["status"] == "timeout"


@pytest.mark.usefixtures("_deferring")
def test_the_trigger_serializes_what_it_watches(ckpt_dir: str) -> None:
    path, kwargs = _trigger(ckpt_dir).serialize()
    assert path == "airflow_gpu_dag.triggers.checkpoint.CheckpointTrigger"
    assert (kwargs["training_task_id"], kwargs["dag_id"], kwargs["run_id"]) == ("train", "d", "r1")
    assert CheckpointTrigger(**kwargs).serialize() == (path, kwargs)
    # a trigger serialized before this field existed still loads (and watches nothing)
    old = {k: v for k, v in kwargs.items() if k not in ("training_task_id", "dag_id", "run_id")}
    assert CheckpointTrigger(**old).training_task_id is None


@pytest.mark.usefixtures("_deferring")
def test_the_sensor_fails_at_once_when_training_already_failed(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trigger_module, "training_state", _states("failed"))
    with pytest.raises(AirflowFailException) as err:
        checkpoint_sensor(ckpt_dir).execute(sensor_context())
    message = str(err.value)
    assert "training task 'train' ended failed" in message and "step >= 2" in message
    assert "clear 'train' and 'wait_train_ckpt_2'" in message


@pytest.mark.usefixtures("_deferring")
def test_the_sensor_defers_with_the_run_to_watch(ckpt_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trigger_module, "training_state", _states("running"))
    with pytest.raises(TaskDeferred) as deferred:
        checkpoint_sensor(ckpt_dir).execute(sensor_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, CheckpointTrigger)
    assert (trigger.training_task_id, trigger.dag_id, trigger.run_id) == ("train", "d", "r1")


@pytest.mark.usefixtures("_deferring")
def test_a_skipped_training_skips_the_sensor(ckpt_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # as an ordinary edge would: what waits for the checkpoint is skipped, the run does not fail
    monkeypatch.setattr(trigger_module, "training_state", _states("skipped"))
    with pytest.raises(AirflowSkipException, match=r"training task 'train' was skipped"):
        checkpoint_sensor(ckpt_dir).execute(sensor_context())
    event = {"status": "training_over", "state": "skipped", "path": ckpt_dir, "reason": "none"}
    with pytest.raises(AirflowSkipException):
        checkpoint_sensor(ckpt_dir).execute_complete(sensor_context(), event)


@pytest.mark.usefixtures("_deferring")
def test_the_poking_sensor_watches_training_too(ckpt_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sensor = checkpoint_sensor(ckpt_dir, deferrable=False)
    monkeypatch.setattr(trigger_module, "training_state", _states("running"))
    assert not sensor.poke(sensor_context()).is_done
    monkeypatch.setattr(trigger_module, "training_state", _states("upstream_failed"))
    with pytest.raises(AirflowFailException, match=r"ended upstream_failed"):
        sensor.poke(sensor_context())
    _write_checkpoint(ckpt_dir, 3)  # once there, the checkpoint wins over the state
    assert sensor.poke(sensor_context()).xcom_value == {"path": f"{ckpt_dir}/checkpoint-3", "step": 3}


@pytest.mark.usefixtures("_deferring")
def test_an_unreadable_state_does_not_fail_the_sensor(ckpt_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trigger_module, "training_state", _states(RuntimeError("no supervisor")))
    assert not checkpoint_sensor(ckpt_dir, deferrable=False).poke(sensor_context()).is_done


@pytest.mark.usefixtures("_deferring")
def test_training_state_reads_the_task_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from airflow.utils.state import TaskInstanceState

    asked: list[dict[str, Any]] = []

    def get_task_states(**kwargs: Any) -> dict[str, dict[str, Any]]:
        asked.append(kwargs)
        return {"r1": {"train": TaskInstanceState.FAILED}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(get_task_states))
    assert trigger_module.training_state("d", "r1", "train") == "failed"
    assert asked == [{"dag_id": "d", "task_ids": ["train"], "run_ids": ["r1"]}]
    assert trigger_module.training_state("d", "r2", "train") is None  # no task instance in that run


@pytest.mark.usefixtures("_deferring")
def test_find_checkpoint_first_complete_at_or_after_step(mem_dir: str) -> None:
    assert "does not exist" in find_checkpoint(mem_dir, "step-{step}", 100, "marker")[2]
    write_object(mem_dir + "/step-50/w.bin", b"x")
    write_marker(mem_dir + "/step-50")
    assert find_checkpoint(mem_dir, "step-{step}", 100, "marker")[0] is None
    write_object(mem_dir + "/step-100/w.bin", b"x")  # being written: no marker yet
    path, _, reason = find_checkpoint(mem_dir, "step-{step}", 100, "marker")
    assert path is None and "none is complete" in reason
    write_object(mem_dir + "/step-150/w.bin", b"x")
    write_marker(mem_dir + "/step-150")
    assert find_checkpoint(mem_dir, "step-{step}", 100, "marker")[:2] == (mem_dir + "/step-150", 150)
    write_marker(mem_dir + "/step-100")
    assert find_checkpoint(mem_dir, "step-{step}", 100, "marker")[1] == 100


@pytest.mark.usefixtures("_deferring")
def test_checkpoint_trigger_events(mem_dir: str) -> None:
    write_object(mem_dir + "/checkpoint-2/w", b"x")
    write_marker(mem_dir + "/checkpoint-2")
    ok = CheckpointTrigger(mem_dir, "checkpoint-{step}", 2, Marker().to_dict(), time.time() + 5, 0.1)
    assert first_event(ok)["step"] == 2
    late = CheckpointTrigger(mem_dir, "checkpoint-{step}", 3, Marker().to_dict(), time.time() + 0.2, 0.1)
    payload = first_event(late)
    assert payload["status"] == "timeout" and "step >= 3" in payload["reason"]


@pytest.mark.usefixtures("_deferring")
def test_checkpoint_pattern_needs_step() -> None:
    assert checkpoint_regex("ckpt_{step}.d").match("ckpt_0012.d").group(1) == "0012"
    with pytest.raises(ValueError, match=r"must contain '\{step\}'"):
        checkpoint_regex("checkpoint")


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


# -- 2. a checkpoint written after the first look is found ---------------------------------------------
def test_a_checkpoint_written_after_the_first_look_is_found_on_a_caching_filesystem() -> None:
    """Each look lists the directory afresh, not from the filesystem's cache, which s3fs/gcsfs/adlfs
    keep for the life of the (process-wide) filesystem object: with it the triggerer (and a poking
    sensor) would see the first listing at every later look, and a stage dependency on S3 would wait
    out its timeout next to checkpoint 1000."""
    base = f"ckpt-{uuid.uuid4().hex[:8]}/run"
    memory, cached = f"memory://{base}", f"lscache://{base}"
    write_checkpoint(memory, 500)
    path, step, reason = find_checkpoint(cached, "checkpoint-{step}", 1000, "marker")
    assert (path, step) == (None, None) and "no checkpoint with step >= 1000" in reason
    write_checkpoint(memory, 1000)
    assert find_checkpoint(cached, "checkpoint-{step}", 1000, "marker")[:2] == (
        f"{cached}/checkpoint-1000",
        1000,
    )
