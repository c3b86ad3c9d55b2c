"""StageFitWatch: whether [gpu_dag] stage_length fits the tasks that really wait in the pools."""

from __future__ import annotations

import logging

import pytest

from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask
from airflow_gpu_dag.log_once import LogOnce
from airflow_gpu_dag.watermark.stage_fit import StageFitWatch
from tests.unit.watermark.conftest import NOW, FakeRest, Source, controller, ti

HOUR = 3600.0
STAGE = 6 * HOUR


def _ready(key: str, duration: float, slots: int = 1) -> ReadyTask:
    return ReadyTask(key, "gpu", slots, 1, duration, (0,))


def test_a_pool_of_short_tasks_is_called_short_only_after_a_whole_stage() -> None:
    """Ten-minute evaluations keyed for 6-h stages: not judged in the first hours (a longer task may
    still come), said once the watch has lasted a stage, naming the longest task seen."""
    watch = StageFitWatch(STAGE, LogOnce(logging.getLogger("test")))
    assert watch.observe(NOW, [_ready("d/r/eval/-1", 600.0)]) is None
    assert watch.observe(NOW + 5 * HOUR, [_ready("d/r/eval2/-1", 900.0)]) is None
    problem = watch.observe(NOW + STAGE, [])
    assert problem is not None
    assert "stage_length is 6h00m" in problem and "d/r/eval2/-1 (15m)" in problem
    assert "seen waiting in 6h00m" in problem and "about 24x too long" in problem


def test_a_task_of_over_three_stages_is_said_at_once_and_fitting_tasks_are_not() -> None:
    watch = StageFitWatch(STAGE, LogOnce(logging.getLogger("test")))
    fitting = [_ready("d/r/train/-1", 4 * HOUR, slots=4), PendingTask("d/r/sft/-1", "gpu", 2, 1, HOUR, (0,))]
    assert watch.observe(NOW, fitting) is None
    assert watch.observe(NOW + 10 * STAGE, fitting) is None  # watched long: still fits
    long = watch.observe(NOW + 10 * STAGE, [_ready("d/r/pretrain/-1", 20 * HOUR, slots=8)])
    assert long is not None and "d/r/pretrain/-1 (20h00m)" in long and "too short" in long


def test_tasks_that_hold_no_slot_or_have_no_duration_are_not_measured() -> None:
    watch = StageFitWatch(STAGE, LogOnce(logging.getLogger("test")))
    odd = [_ready("a", 40 * HOUR, slots=0), _ready("b", float("nan")), _ready("c", 0.0)]
    assert watch.observe(NOW, odd) is None and watch.longest is None
    assert watch.observe(NOW + 2 * STAGE, []) is None  # nothing measured: nothing to say


def test_the_controller_warns_once_of_a_stage_length_of_another_time_scale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 30-h task waiting in a pool keyed for 20-minute stages: the tick logs the mismatch once as a
    warning, the next tick at debug level; the pool is sized as before."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__STAGE_LENGTH", "20m")
    rest = FakeRest()
    rest.tis = [ti("pretrain", "scheduled", slots=2, priority=5, duration=30 * HOUR)]
    ctl = controller(rest, Source(4))
    assert ctl.stage_fit.length == 1200.0
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("airflow_gpu_dag.watermark.stage_fit")  # its own handler: whatever the
    logger.addHandler(handler)  # logging configuration Airflow installed does with the root's
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        ctl.tick()
        ctl.tick()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    said = [r for r in records if "stage-length-mismatch" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG]
    assert "d/r/pretrain/-1 (30h00m)" in said[0].getMessage()
    assert rest.pools["gpu"]["slots"] == 4
