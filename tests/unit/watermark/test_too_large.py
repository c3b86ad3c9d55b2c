"""Never pending forever: the controller fails (or flags) a waiting task larger than its pool's live
capacity or every host, after the configured number of intervals, naming the task, request, capacity."""

from __future__ import annotations

import logging

import pytest

import airflow_gpu_dag.settings as settings
from airflow_gpu_dag.core.policy.admission import ReadyTask
from airflow_gpu_dag.plugins.critical_path_page.data import parse_pool_description, pool_views
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController, parse_state
from airflow_gpu_dag.watermark.sources import PoolCapacity
from airflow_gpu_dag.watermark.too_large import TooLargeWatch, split_key
from tests.unit.watermark.conftest import (
    NOW,
    FailingRest,
    Source,
    controller,
    ti,
)


def test_split_key_keeps_slashes_in_run_ids() -> None:
    assert split_key("d/manual__2026/01/01/train/3") == ("d", "manual__2026/01/01", "train", 3)


def test_a_task_wider_than_capacity_is_failed_after_n_intervals(caplog: pytest.LogCaptureFixture) -> None:
    rest = FailingRest()
    rest.tis = [ti("huge", "scheduled", slots=8, priority=9), ti("small", "scheduled", slots=1)]
    ctl = controller(rest, Source(4))
    ctl.too_large = TooLargeWatch(rest, intervals=3, action="fail", max_gpus_per_host=None)
    for tick in (1, 2):
        ctl.tick()
        assert rest.failed == []
        description = rest.pools["gpu"]["description"]
        assert f"too large: d.huge (run r) needs 8 > 4 (waiting {tick}/3 intervals)" in description
        assert parse_state(description) == (4, 0)  # the state marker still parses
    with caplog.at_level(logging.ERROR):
        ctl.tick()
    [(dag_id, run_id, task_id, map_index, state, note)] = rest.failed
    assert (dag_id, run_id, task_id, map_index, state) == ("d", "r", "huge", -1, "failed")
    assert note is not None and "d.huge (run r) needs 8 slots of pool 'gpu'" in note
    assert "its live capacity is 4, for 3 controller intervals" in note and "Fix:" in note
    assert "failed gpu-dag watermark: d.huge" in caplog.text
    ctl.tick()  # failed: no longer waiting, nothing more to say
    assert len(rest.failed) == 1 and "too large" not in rest.pools["gpu"]["description"]


def test_keep_mode_flags_the_task_and_keeps_it_waiting(caplog: pytest.LogCaptureFixture) -> None:
    rest = FailingRest()
    rest.tis = [ti("huge", "scheduled", slots=8)]
    ctl = controller(rest, Source(4))
    ctl.too_large = TooLargeWatch(rest, intervals=2, action="keep", max_gpus_per_host=None)
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            ctl.tick()
    assert rest.failed == []
    assert "(waiting 4/2 intervals)" in rest.pools["gpu"]["description"]
    assert "can never start" in caplog.text
    capacity, _, _ = parse_pool_description(rest.pools["gpu"]["description"])
    assert capacity == 4
    [view] = pool_views(
        {"gpu": {"total": 4, "running": 0, "queued": 0, "open": 4}}, {"gpu": rest.pools["gpu"]["description"]}
    )
    assert view.too_large is not None and "d.huge (run r) needs 8 > 4" in view.too_large


def test_a_task_that_fits_again_is_forgotten_and_failing_sources_do_not_count() -> None:
    rest = FailingRest()
    rest.tis = [ti("wide", "scheduled", slots=6)]
    source = Source(4)
    ctl = controller(rest, source, floor=0, stale_intervals=0)
    ctl.too_large = TooLargeWatch(rest, intervals=2, action="fail", max_gpus_per_host=None)
    ctl.tick()
    source.value = 8  # capacity came back
    ctl.tick()
    source.value = 4
    ctl.tick()  # counts from 1 again
    assert rest.failed == []
    source.value = RuntimeError("exporter down")  # floor 0: says nothing about the hardware
    for _ in range(3):
        ctl.tick()
    assert rest.failed == []


def test_a_pool_with_no_gpus_left_fails_nothing() -> None:
    """Live capacity 0 (every GPU node drained or down) is an outage, not a request too large: failing
    every waiting task of the pool after a few minutes of maintenance would be the wrong verdict."""
    rest = FailingRest()
    rest.tis = [ti("one", "scheduled", slots=1), ti("wide", "scheduled", slots=4)]
    source = Source(0)
    ctl = controller(rest, source)
    ctl.too_large = TooLargeWatch(rest, intervals=1, action="fail", max_gpus_per_host=None)
    for _ in range(3):
        ctl.tick()
    assert rest.failed == [] and "too large" not in rest.pools["gpu"]["description"]
    assert "pool 0 of capacity 0" in rest.pools["gpu"]["description"]
    source.value = 2  # one node back: the 4-GPU task is now judged against it
    ctl.tick()
    assert [task for _, _, task, *_ in rest.failed] == ["wide"]


def test_more_gpus_than_any_host_is_too_large_even_in_a_big_pool() -> None:
    watch = TooLargeWatch(FailingRest(), intervals=1, action="keep", max_gpus_per_host=8)
    ready = [ReadyTask("d/r/t/-1", "gpu", 12, 1, 60.0), ReadyTask("d/r/s/-1", "gpu", 8, 1, 60.0)]
    left = watch.check({"gpu": PoolCapacity(32, "ok", "", 0, 32)}, ready)
    assert left == ready
    [entry] = watch.current["gpu"]
    assert entry.key == "d/r/t/-1" and entry.limit == 8 and "largest host" in entry.message(1)


def test_a_failed_rest_call_is_retried_next_tick() -> None:
    rest = FailingRest()
    rest.fail_error = RuntimeError("api-server down")
    watch = TooLargeWatch(rest, intervals=1, action="fail", max_gpus_per_host=None)
    ready = [ReadyTask("d/r/t/2", "gpu", 5, 1, 60.0)]
    capacities = {"gpu": PoolCapacity(4, "ok", "", 0, 4)}
    assert watch.check(capacities, ready) == ready
    rest.fail_error = None
    assert watch.check(capacities, ready) == []
    assert rest.failed[0][:4] == ("d", "r", "t", 2)


def test_settings_validate_the_action() -> None:
    with pytest.raises(ValueError, match="fail or keep"):
        TooLargeWatch(FailingRest(), action="explode")


def _dry_controller(rest: FailingRest, monkeypatch: pytest.MonkeyPatch) -> WatermarkController:
    monkeypatch.setattr(settings, "too_large_policy", lambda: (1, "fail"))
    monkeypatch.setattr(settings, "max_gpus_per_host", lambda: None)
    config = parse_config({"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}})
    return WatermarkController(
        config,
        rest,  # type: ignore[arg-type]
        {"gpu": Source(4)},  # type: ignore[dict-item]
        default_duration=60.0,
        clock=lambda: NOW,
        dry_run=True,
    )


def test_a_dry_run_fails_no_task_instance(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``--once --dry-run`` promises to write nothing; with ``[gpu_dag] too_large_intervals = 1`` its one
    tick set a waiting 8-GPU task of a 4-GPU pool to ``failed`` over REST."""
    rest = FailingRest()
    rest.tis = [ti("huge", "scheduled", slots=8)]
    ctl = _dry_controller(rest, monkeypatch)
    with caplog.at_level(logging.WARNING):
        [outcome] = ctl.tick()
    assert rest.failed == [] and rest.writes == []
    assert outcome.would_write and rest.tis[0]["state"] == "scheduled"
    assert "dry run: would fail gpu-dag watermark: d.huge (run r) needs 8 slots" in caplog.text
