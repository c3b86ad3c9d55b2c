"""Tests of ``airflow_gpu_dag.sensors.checkpoint``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)
from structlog.testing import capture_logs

import airflow_gpu_dag.sensors.checkpoint as sensor_checkpoint
import airflow_gpu_dag.triggers.checkpoint as trigger_checkpoint
from airflow_gpu_dag.datasets.completeness import write_marker
from airflow_gpu_dag.sensors import CheckpointSensor
from airflow_gpu_dag.triggers.checkpoint import find_checkpoint
from tests.unit.memory_store import MISSING_S3FS, flaky, write_checkpoint, write_object
from tests.unit.sensors.conftest import checkpoint_sensor, sensor_context
from tests.unit.triggers.conftest import first_event


def _events(logs: list[dict[str, Any]], level: str) -> list[str]:
    """The messages of the captured log entries of ``level``, in order."""
    return [entry["event"] for entry in logs if entry["log_level"] == level]


# -- the sensor ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("_deferring")
def test_the_trigger_event_fails_the_sensor_with_the_fix(ckpt_dir: str) -> None:
    event = {"status": "training_over", "state": "success", "path": ckpt_dir, "reason": "no checkpoint"}
    with pytest.raises(AirflowFailException, match=r"training task 'train' ended success without"):
        checkpoint_sensor(ckpt_dir).execute_complete(sensor_context(), event)


@pytest.mark.usefixtures("_deferring")
def test_an_unknown_training_task_is_named(ckpt_dir: str) -> None:
    with DAG("d2", schedule=None):
        sensor = CheckpointSensor(
            task_id="wait", checkpoint_dir=ckpt_dir, step=1, timeout=60, training_task_id="trian"
        )
    with pytest.raises(AirflowFailException, match=r"training_task_id='trian' is not a task of DAG 'd2'"):
        sensor.execute(sensor_context())


@pytest.mark.usefixtures("_deferring")
def test_soft_fail_skips_a_failure_found_by_the_first_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # A permanent error skips a soft_fail sensor wherever it is met: in the first check in execute()
    # (before deferring or poking) just as in a poke or the trigger.
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


# -- construction -------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [True, "5", 1.5, None, -1])
def test_a_step_that_is_no_checkpoint_number_is_refused_naming_the_task(step: object) -> None:
    with pytest.raises(ValueError, match=r"^task 'wait': step=.* must be a checkpoint number >= 0\.$"):
        CheckpointSensor(task_id="wait", checkpoint_dir="/ckpt", step=step, timeout=60)  # type: ignore[arg-type]


def test_step_zero_waits_for_the_first_checkpoint(ckpt_dir: str) -> None:
    sensor = CheckpointSensor(task_id="wait", checkpoint_dir=ckpt_dir, step=0, timeout=60, deferrable=False)
    write_checkpoint(ckpt_dir, 0)
    assert sensor.poke(sensor_context()).xcom_value == {"path": f"{ckpt_dir}/checkpoint-0", "step": 0}


def test_a_pattern_with_the_step_twice_is_refused_naming_the_task() -> None:
    match = r"^task 'wait': checkpoint pattern 'a\{step\}b\{step\}' must contain '\{step\}' exactly once"
    with pytest.raises(ValueError, match=match):
        CheckpointSensor(task_id="wait", checkpoint_dir="/ckpt", step=1, pattern="a{step}b{step}", timeout=60)


def test_the_sensor_keeps_its_arguments_in_the_form_the_trigger_takes() -> None:
    """The timeout in seconds and the completeness rule as a dict: what the trigger is built from."""
    sensor = CheckpointSensor(
        task_id="wait",
        checkpoint_dir="/ckpt/run1",
        step=1000,
        pattern="step-{step}",
        completeness="manifest",
        timeout=timedelta(hours=6),
        poke_interval=30,
        training_task_id="train",
    )
    assert (sensor.checkpoint_dir, sensor.step, sensor.pattern) == ("/ckpt/run1", 1000, "step-{step}")
    assert sensor.completeness == {"kind": "manifest", "name": "_MANIFEST.json", "verify_checksums": True}
    assert (sensor.timeout, sensor.poke_interval) == (6 * 3600.0, 30.0)
    assert (sensor.training_task_id, sensor.conn_id) == ("train", None)
    marker = CheckpointSensor(task_id="wait2", checkpoint_dir="/ckpt", step=1, timeout=60)
    assert marker.completeness == {"kind": "marker", "name": "_SUCCESS"}


def test_the_sensor_is_planned_as_taking_no_time_unless_it_says_otherwise() -> None:
    """A wiring task must not pad the plan with the default estimate; a declared estimate is kept."""
    plain = CheckpointSensor(task_id="wait", checkpoint_dir="/ckpt", step=1, timeout=60)
    assert plain.executor_config == {"gpu_dag": {"duration_s": 0.0}}
    declared = CheckpointSensor(
        task_id="wait2",
        checkpoint_dir="/ckpt",
        step=1,
        timeout=60,
        executor_config={"gpu_dag": {"duration_s": 60}, "KubernetesExecutor": {"cpu": 1}},
    )
    assert declared.executor_config == {"gpu_dag": {"duration_s": 60}, "KubernetesExecutor": {"cpu": 1}}


def test_the_checkpoint_directory_is_templated() -> None:
    sensor = CheckpointSensor(task_id="wait", checkpoint_dir="/ckpt/{{ run_id }}", step=1, timeout=60)
    assert tuple(sensor.template_fields) == ("checkpoint_dir",)
    sensor.render_template_fields({"run_id": "manual__r7"})
    assert sensor.checkpoint_dir == "/ckpt/manual__r7"


def test_the_sensors_own_conn_id_wins_over_the_object_storage_paths() -> None:
    from airflow.sdk import ObjectStoragePath

    path = ObjectStoragePath("s3://bucket/ckpt/run1", conn_id="lake")
    from_path = CheckpointSensor(task_id="wait", checkpoint_dir=path, step=1, timeout=60)
    assert (from_path.checkpoint_dir, from_path.conn_id) == ("s3://bucket/ckpt/run1", "lake")
    own = CheckpointSensor(task_id="wait2", checkpoint_dir=path, step=1, timeout=60, conn_id="other")
    assert (own.checkpoint_dir, own.conn_id) == ("s3://bucket/ckpt/run1", "other")


# -- poke outcomes ------------------------------------------------------------------------------------


def _poking(directory: str, **kwargs: Any) -> CheckpointSensor:
    """A sensor outside any DAG that waits in a worker for step 2's checkpoint in ``directory``."""
    kwargs.setdefault("timeout", 3600)
    return CheckpointSensor(task_id="wait", checkpoint_dir=directory, step=2, deferrable=False, **kwargs)


@pytest.mark.parametrize("deferrable", [True, False])
def test_a_checkpoint_already_written_is_returned_without_waiting(ckpt_dir: str, deferrable: bool) -> None:
    write_checkpoint(ckpt_dir, 3)
    sensor = CheckpointSensor(
        task_id="wait", checkpoint_dir=ckpt_dir, step=2, timeout=3600, deferrable=deferrable
    )
    assert sensor.execute({}) == {"path": f"{ckpt_dir}/checkpoint-3", "step": 3}


def test_the_first_complete_checkpoint_at_or_after_the_step_is_returned(ckpt_dir: str) -> None:
    """Lower steps never count, and a checkpoint still being written (no marker) is passed over."""
    sensor = _poking(ckpt_dir)
    write_checkpoint(ckpt_dir, 1)
    write_object(f"{ckpt_dir}/checkpoint-2/weights", b"w")  # being written: no marker yet
    write_checkpoint(ckpt_dir, 5)
    assert sensor.poke(sensor_context()).xcom_value == {"path": f"{ckpt_dir}/checkpoint-5", "step": 5}
    write_marker(f"{ckpt_dir}/checkpoint-2")
    assert sensor.poke(sensor_context()).xcom_value == {"path": f"{ckpt_dir}/checkpoint-2", "step": 2}


def test_the_pattern_names_the_checkpoint_directories(ckpt_dir: str) -> None:
    sensor = _poking(ckpt_dir, pattern="step-{step}")
    write_checkpoint(ckpt_dir, 7)  # checkpoint-7: not this sensor's pattern
    assert not sensor.poke(sensor_context()).is_done
    write_object(f"{ckpt_dir}/step-0007/weights", b"w")
    write_marker(f"{ckpt_dir}/step-0007")
    assert sensor.poke(sensor_context()).xcom_value == {"path": f"{ckpt_dir}/step-0007", "step": 7}


def test_a_manifest_checkpoint_is_complete_once_its_manifest_is_written(ckpt_dir: str) -> None:
    from airflow_gpu_dag.datasets.completeness import write_manifest

    sensor = _poking(ckpt_dir, completeness="manifest")
    write_object(f"{ckpt_dir}/checkpoint-2/weights", b"w")
    write_marker(f"{ckpt_dir}/checkpoint-2")  # a marker is not what this sensor waits for
    assert not sensor.poke(sensor_context()).is_done
    assert "none is complete" in sensor._reason and "_MANIFEST.json" in sensor._reason
    write_manifest(f"{ckpt_dir}/checkpoint-2")
    assert sensor.poke(sensor_context()).xcom_value == {"path": f"{ckpt_dir}/checkpoint-2", "step": 2}


def test_each_poke_logs_why_the_checkpoint_is_not_there_yet(ckpt_dir: str) -> None:
    """The reason is the user's only view of a sensor that waits for hours: each poke logs it."""
    with capture_logs() as logs:
        sensor = _poking(ckpt_dir)
        assert not sensor.poke(sensor_context()).is_done
        write_checkpoint(ckpt_dir, 1)
        assert not sensor.poke(sensor_context()).is_done
        write_object(f"{ckpt_dir}/checkpoint-2/weights", b"w")
        assert not sensor.poke(sensor_context()).is_done
    missing, none_yet, incomplete = _events(logs, "info")
    assert missing == f"checkpoint directory {ckpt_dir} does not exist yet"
    assert none_yet == f"no checkpoint with step >= 2 in {ckpt_dir} yet"
    assert incomplete.startswith("checkpoint(s) >= 2 exist but none is complete: marker _SUCCESS missing in ")
    assert incomplete.endswith("/run/checkpoint-2 (dataset still being written?)")


def test_a_checkpoint_directory_that_disappears_is_not_there_again(ckpt_dir: str) -> None:
    """A directory that was there and is gone (deleted, remounted) reads as "not there yet", never as
    done: the sensor keeps waiting and says why."""
    import fsspec

    sensor = _poking(ckpt_dir)
    write_object(f"{ckpt_dir}/checkpoint-2/weights", b"w")
    assert not sensor.poke(sensor_context()).is_done
    fsspec.filesystem("memory").rm(ckpt_dir.removeprefix("memory://"), recursive=True)
    assert not sensor.poke(sensor_context()).is_done
    assert sensor._reason == f"checkpoint directory {ckpt_dir} does not exist yet"


def test_a_flaky_store_is_logged_and_counts_as_not_there_yet(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_down = OSError("S3 503 SlowDown")
    monkeypatch.setattr(sensor_checkpoint, "find_checkpoint", flaky(find_checkpoint, slow_down))
    write_checkpoint(ckpt_dir, 2)
    with capture_logs() as logs:
        sensor = _poking(ckpt_dir)
        assert not sensor.poke(sensor_context()).is_done
        assert sensor.poke(sensor_context()).xcom_value == {"path": f"{ckpt_dir}/checkpoint-2", "step": 2}
    assert _events(logs, "warning") == [
        f"checkpoint directory {ckpt_dir}: check failed: OSError: S3 503 SlowDown; checking again"
    ]


def test_a_permanent_error_fails_the_poke_with_the_fix() -> None:
    sensor = _poking(MISSING_S3FS)
    with pytest.raises(
        AirflowFailException,
        match=rf"^task 'wait': cannot check checkpoint directory {MISSING_S3FS}: ImportError: .*Fix: ",
    ):
        sensor.poke(sensor_context())


# -- timeouts -----------------------------------------------------------------------------------------


def test_the_poking_sensor_times_out_with_what_was_missing_and_the_fix(ckpt_dir: str) -> None:
    sensor = _poking(ckpt_dir, timeout=0.05, poke_interval=0.01)
    with pytest.raises(AirflowSensorTimeout) as err:
        sensor.execute({})
    assert re.fullmatch(
        rf"task 'wait': no complete checkpoint with step >= 2 in {ckpt_dir} after \d+s: checkpoint "
        rf"directory {ckpt_dir} does not exist yet\. Fix: check that training saves 'checkpoint-\{{step\}}' "
        r"directories with a completeness marker, or raise timeout=\.",
        str(err.value),
    ), str(err.value)


def test_a_timeout_after_a_flaky_store_ends_with_the_last_error(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_down = OSError("S3 503 SlowDown")
    monkeypatch.setattr(sensor_checkpoint, "find_checkpoint", flaky(find_checkpoint, slow_down, times=10**6))
    sensor = _poking(ckpt_dir, timeout=0.05, poke_interval=0.01)
    with pytest.raises(AirflowSensorTimeout, match=r": check failed: OSError: S3 503 SlowDown\. Fix: "):
        sensor.execute({})


def test_soft_fail_skips_a_poking_sensor_that_timed_out(ckpt_dir: str) -> None:
    sensor = _poking(ckpt_dir, timeout=0.05, poke_interval=0.01, soft_fail=True)
    with pytest.raises(AirflowSkipException):
        sensor.execute({})


# -- deferral and the trigger's events ----------------------------------------------------------------


@pytest.mark.usefixtures("_deferring")
def test_the_sensor_defers_to_a_trigger_that_waits_for_the_same_checkpoint(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trigger gets the sensor's directory, pattern, step, rule and poke interval, and a deadline
    ``timeout`` from now; Airflow's own deferral timeout is two minutes later, so the trigger's timeout
    event (with its reason) comes first. Without a training task there is no run to watch."""
    from types import SimpleNamespace

    monkeypatch.setattr(sensor_checkpoint, "time", SimpleNamespace(time=lambda: 1_000_000.0))
    with capture_logs() as logs:
        sensor = CheckpointSensor(
            task_id="wait",
            checkpoint_dir=ckpt_dir,
            step=2,
            pattern="step-{step}",
            timeout=600,
            poke_interval=7,
        )
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute({})
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=720)
    assert deferred.value.trigger.serialize() == (
        "airflow_gpu_dag.triggers.checkpoint.CheckpointTrigger",
        {
            "directory": ckpt_dir,
            "pattern": "step-{step}",
            "min_step": 2,
            "completeness": {"kind": "marker", "name": "_SUCCESS"},
            "deadline": 1_000_600.0,
            "poke_interval": 7.0,
            "conn_id": None,
            "training_task_id": None,
            "dag_id": None,
            "run_id": None,
        },
    )
    assert _events(logs, "info") == [f"checkpoint directory {ckpt_dir} does not exist yet; deferring"]


@pytest.mark.usefixtures("_deferring")
def test_the_triggers_complete_event_resumes_the_sensor_with_the_checkpoint(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deferred, then the checkpoint lands: the trigger's event, handed back, is the sensor's XCom."""
    monkeypatch.setattr(trigger_checkpoint, "training_state", lambda *a: "running")
    sensor = checkpoint_sensor(ckpt_dir)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(sensor_context())
    write_checkpoint(ckpt_dir, 4)
    event = first_event(deferred.value.trigger)
    assert event["status"] == "complete"
    assert sensor.execute_complete(sensor_context(), event) == {"path": f"{ckpt_dir}/checkpoint-4", "step": 4}


@pytest.mark.usefixtures("_deferring")
def test_a_timeout_event_fails_the_sensor_with_what_was_missing_and_the_fix(ckpt_dir: str) -> None:
    reason = f"no checkpoint with step >= 2 in {ckpt_dir} yet"
    event = {"status": "timeout", "path": ckpt_dir, "reason": reason}
    with pytest.raises(AirflowSensorTimeout) as err:
        checkpoint_sensor(ckpt_dir).execute_complete(sensor_context(), event)
    assert str(err.value) == (
        f"task 'wait_train_ckpt_2': no complete checkpoint with step >= 2 in {ckpt_dir} after 3600s: "
        f"no checkpoint with step >= 2 in {ckpt_dir} yet. Fix: check that training saves "
        "'checkpoint-{step}' directories with a completeness marker, or raise timeout=."
    )


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("event", [None, {}, {"status": "what"}])
def test_an_event_the_sensor_does_not_know_is_a_timeout_with_an_unknown_reason(
    ckpt_dir: str, event: dict[str, Any] | None
) -> None:
    """Never a success: only a ``complete`` event carries a checkpoint."""
    with pytest.raises(AirflowSensorTimeout, match=r"after 3600s: unknown\. Fix: "):
        checkpoint_sensor(ckpt_dir).execute_complete(sensor_context(), event)


@pytest.mark.usefixtures("_deferring")
def test_an_error_event_without_a_reason_fails_as_an_unknown_error(ckpt_dir: str) -> None:
    with pytest.raises(AirflowFailException) as err:
        checkpoint_sensor(ckpt_dir).execute_complete(sensor_context(), {"status": "error"})
    assert str(err.value) == (
        f"task 'wait_train_ckpt_2': cannot check checkpoint directory {ckpt_dir}: unknown error."
    )


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize(
    "event",
    [
        {"status": "timeout", "reason": "no checkpoint yet"},
        {"status": "error", "reason": "ImportError: Install s3fs"},
        {"status": "training_over", "state": "failed", "reason": "no checkpoint yet"},
    ],
    ids=["timeout", "error", "training_over"],
)
def test_soft_fail_skips_a_failure_the_trigger_reported(ckpt_dir: str, event: dict[str, Any]) -> None:
    sensor = checkpoint_sensor(ckpt_dir, soft_fail=True)
    with pytest.raises(AirflowSkipException, match="soft_fail"):
        sensor.resume_execution("execute_complete", {"event": event}, sensor_context())


# -- the training task --------------------------------------------------------------------------------


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("state", ["failed", "upstream_failed", "removed", "success"])
@pytest.mark.parametrize("deferrable", [True, False])
def test_training_that_ended_without_the_checkpoint_fails_the_sensor_at_once(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch, state: str, deferrable: bool
) -> None:
    monkeypatch.setattr(trigger_checkpoint, "training_state", lambda *a: state)
    with pytest.raises(AirflowFailException) as err:
        checkpoint_sensor(ckpt_dir, deferrable=deferrable).execute(sensor_context())
    assert str(err.value) == (
        f"task 'wait_train_ckpt_2': training task 'train' ended {state} without a complete checkpoint "
        f"with step >= 2 in {ckpt_dir}, so none will come and the tasks waiting for it cannot start. "
        "Fix: make 'train' save 'checkpoint-{step}' directories with a completeness marker up to step 2, "
        "then clear 'train' and 'wait_train_ckpt_2'."
    )


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("state", [None, "scheduled", "queued", "running", "up_for_retry", "deferred"])
def test_training_that_may_still_write_the_checkpoint_keeps_the_sensor_waiting(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch, state: str | None
) -> None:
    monkeypatch.setattr(trigger_checkpoint, "training_state", lambda *a: state)
    with pytest.raises(TaskDeferred):
        checkpoint_sensor(ckpt_dir).execute(sensor_context())
    assert not checkpoint_sensor(ckpt_dir, deferrable=False).poke(sensor_context()).is_done


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("deferrable", [True, False])
def test_a_checkpoint_written_just_before_training_ended_is_returned(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch, deferrable: bool
) -> None:
    """The directory is looked at before the training task's state: a checkpoint that landed in between
    is found by one more look instead of failing the sensor."""

    def finish_training(*args: Any) -> str:
        write_checkpoint(ckpt_dir, 2)
        return "success"

    monkeypatch.setattr(trigger_checkpoint, "training_state", finish_training)
    sensor = checkpoint_sensor(ckpt_dir, deferrable=deferrable)
    assert sensor.execute(sensor_context()) == {"path": f"{ckpt_dir}/checkpoint-2", "step": 2}


@pytest.mark.usefixtures("_deferring")
def test_the_training_state_is_read_for_the_sensors_own_run(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(trigger_checkpoint, "training_state", lambda *a: asked.append(a) or "running")
    assert not checkpoint_sensor(ckpt_dir, deferrable=False).poke(sensor_context()).is_done
    assert asked == [("d", "r1", "train")]


@pytest.mark.usefixtures("_deferring")
def test_an_unreadable_training_state_is_logged_and_the_wait_goes_on(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: Any) -> str:
        raise ConnectionError("api-server down")

    monkeypatch.setattr(trigger_checkpoint, "training_state", down)
    with capture_logs() as logs:
        sensor = checkpoint_sensor(ckpt_dir, deferrable=False)
        assert not sensor.poke(sensor_context()).is_done
    assert _events(logs, "warning") == ["cannot read the state of training task 'train': api-server down"]


@pytest.mark.usefixtures("_deferring")
def test_a_poking_sensor_names_an_unknown_training_task_too(ckpt_dir: str) -> None:
    with DAG("d3", schedule=None):
        sensor = CheckpointSensor(
            task_id="wait",
            checkpoint_dir=ckpt_dir,
            step=1,
            timeout=60,
            training_task_id="trian",
            deferrable=False,
        )
    with pytest.raises(
        AirflowFailException,
        match=r"^task 'wait': training_task_id='trian' is not a task of DAG 'd3'\. Fix: pass the task_id",
    ):
        sensor.execute(sensor_context())


@pytest.mark.usefixtures("_deferring")
def test_a_flaky_store_when_training_ended_is_not_taken_for_a_missing_checkpoint(
    ckpt_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training succeeded, but the store answers 503: the sensor cannot tell whether the checkpoint is
    there. It must not fail saying training wrote none (the fix it gives would be wrong): it keeps
    waiting (bounded by its timeout) or fails naming the storage error."""
    slow_down = OSError("S3 503 SlowDown")
    monkeypatch.setattr(sensor_checkpoint, "find_checkpoint", flaky(find_checkpoint, slow_down, times=10**6))
    monkeypatch.setattr(trigger_checkpoint, "training_state", lambda *a: "success")
    write_checkpoint(ckpt_dir, 2)
    sensor = checkpoint_sensor(ckpt_dir, deferrable=False)
    try:
        done = sensor.poke(sensor_context()).is_done
    except AirflowFailException as err:
        assert "S3 503 SlowDown" in str(err), str(err)
    else:
        assert done is False
