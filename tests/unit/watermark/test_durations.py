"""The watermark controller with durations learned over REST: a running task's expected end given how
long it has run, learned durations of waiting tasks, mapped tasks expanded in the lookahead, and a
history that cannot be read (declared durations, said once)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_gpu_dag.core.analysis.estimates import EstimateSettings
from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.watermark.durations import ControllerHistory
from tests.unit.watermark.conftest import (
    NOW,
    FakeRest,
    Source,
    controller,
    ti,
)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


class HistoryRest(FakeRest):
    """FakeRest plus the history endpoints: past successful tries per task, mapped tasks, map counts."""

    def __init__(self) -> None:
        super().__init__()
        self.past: dict[str, list[float]] = {}
        self.mapped: set[str] = set()
        self.counts: dict[str, list[int]] = {}
        self.history_calls = 0
        self.history_error: Exception | None = None

    def task_history(self, dag_id: str, task_id: str, limit: int = 40, states: Any = ("success",)) -> Any:
        self.history_calls += 1
        if self.history_error:
            raise self.history_error
        rows = []
        for i, duration in enumerate(self.past.get(task_id, [])):
            end = NOW - 1000 * (i + 1)
            rows.append(
                {
                    "duration": duration,
                    "state": "success",
                    "start_date": _iso(end - duration),
                    "end_date": _iso(end),
                }
            )
        return rows[:limit]

    def dag_tasks(self, dag_id: str) -> list[dict[str, Any]]:
        return [{"task_id": t, "is_mapped": t in self.mapped} for t in {*self.upstream, *self.mapped}]

    def map_counts(self, dag_id: str, task_id: str, runs: int = 5) -> list[int]:
        return self.counts.get(task_id, [])


def test_running_task_ends_by_what_it_really_takes_given_its_elapsed_time() -> None:
    rest = HistoryRest()
    # declared 60 s, but the last runs took 300 s (and one 100 s)
    rest.past = {"train": [300, 310, 290, 100, 305]}
    rest.tis = [ti("train", "running", started=NOW - 200, duration=60), ti("wait", "scheduled", duration=60)]
    rest.past["wait"] = [600, 600, 610]
    ctl = controller(rest, Source(4))
    running, ready = ctl._tasks(NOW)
    # 200 s in: the 100-s try is ruled out; the median of the longer ones (300, 305) is ~302 s
    assert running[0].expected_end == pytest.approx(NOW + 102.5, abs=1)
    assert ready[0].duration == pytest.approx(600, rel=0.02)
    ctl._tasks(NOW)
    assert rest.history_calls == 2  # one read per task, then cached


def test_an_overrun_task_is_expected_to_end_soon_not_in_the_past() -> None:
    rest = HistoryRest()
    rest.tis = [ti("slow", "running", started=NOW - 500, duration=60)]
    running, _ = controller(rest, Source(4))._tasks(NOW)
    assert running[0].expected_end == pytest.approx(NOW + 6)  # a tenth of its estimate


def test_unreadable_history_uses_declared_durations_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rest = HistoryRest()
    rest.history_error = RestError("GET /api/v2/dags/d/dagRuns/~/taskInstances: HTTP 500", 500)
    rest.tis = [ti(f"t{i}", "running", started=NOW - 10, duration=60) for i in range(5)]
    with caplog.at_level(logging.WARNING):
        ctl = controller(rest, Source(8))
        running, _ = ctl._tasks(NOW)
        ctl.tick()
    assert {r.expected_end for r in running} == {NOW + 50}
    messages = [r.getMessage() for r in caplog.records if "run history" in r.getMessage()]
    assert len(messages) == 1, messages


def test_lookahead_sees_every_instance_of_a_mapped_task_about_to_expand() -> None:
    """A sweep mapped over prep's output: 3 trials of 2 GPUs each, expected from past runs. The
    lookahead reserves for the 3 instances (6 GPUs), not for one."""
    rest = HistoryRest()
    rest.upstream = {"prep": [], "trial": ["prep"], "small": []}
    rest.mapped = {"trial"}
    rest.counts = {"trial": [3, 3, 2]}
    rest.tis = [
        ti("prep", "running", started=NOW - 5, duration=10),
        ti("trial", None, slots=2, priority=100, duration=600),
        ti("small", "scheduled", slots=1, priority=1, duration=900),
    ]
    ctl = controller(rest, Source(8))
    pending = ctl._pending(NOW)
    assert [p.key for p in pending] == ["d/r/trial/0", "d/r/trial/1", "d/r/trial/2"]
    assert all(p.ready_at == pytest.approx(NOW + 5) and p.slots == 2 for p in pending)


def test_map_length_hint_when_there_is_no_history() -> None:
    rest = HistoryRest()
    rest.mapped = {"trial"}
    history = ControllerHistory(rest, 60.0, EstimateSettings())
    config = str({"gpu_dag": {"duration_s": 60.0, "map_length": 4}})
    base = {"dag_id": "d", "task_id": "trial", "map_index": -1, "executor_config": config}
    assert history.map_count(base) == 4
    assert history.map_count({**base, "map_index": 0}) is None  # already expanded
    assert history.map_count({**base, "task_id": "other"}) is None  # not mapped


def test_learning_off_reads_no_history() -> None:
    rest = HistoryRest()
    rest.past = {"a": [500, 500, 500]}
    history = ControllerHistory(rest, 60.0, EstimateSettings(enabled=False))
    assert history.duration({"dag_id": "d", "task_id": "a", "executor_config": "{}"}) == 60.0
    assert rest.history_calls == 0
