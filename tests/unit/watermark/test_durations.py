"""The watermark controller with durations learned over REST: a running task's expected end given how
long it has run, learned durations of waiting tasks, mapped tasks expanded in the lookahead, and a
history that cannot be read (declared durations, said once)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_gpu_dag.core.analysis.estimates import EstimateSettings
from airflow_gpu_dag.core.policy.admission import PendingTask
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


# -- direct tests of ControllerHistory: caching, failures, mapped tasks ------------------------------
class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class LimitRest(HistoryRest):
    """HistoryRest that records the ``limit`` of each history read and can fail the other reads."""

    def __init__(self) -> None:
        super().__init__()
        self.limits: list[tuple[str, str, int]] = []
        self.tasks_error_: Exception | None = None
        self.counts_error: Exception | None = None
        self.count_calls = 0

    def task_history(self, dag_id: str, task_id: str, limit: int = 40, states: Any = ("success",)) -> Any:
        self.limits.append((dag_id, task_id, limit))
        return super().task_history(dag_id, task_id, limit, states)

    def dag_tasks(self, dag_id: str) -> list[dict[str, Any]]:
        if self.tasks_error_:
            raise self.tasks_error_
        return super().dag_tasks(dag_id)

    def map_counts(self, dag_id: str, task_id: str, runs: int = 5) -> list[int]:
        self.count_calls += 1
        if self.counts_error:
            raise self.counts_error
        return super().map_counts(dag_id, task_id, runs)


def _ti(task_id: str, dag_id: str = "d", **fields: Any) -> dict[str, Any]:
    return {"dag_id": dag_id, "task_id": task_id, "map_index": -1, "executor_config": "{}", **fields}


def _pending(key: str = "d/r/trial/-1") -> PendingTask:
    return PendingTask(key, "gpu", 2, 5, 600.0, ("2026-11-30", -1), NOW, ())


def test_a_failed_history_read_falls_back_for_one_refresh_then_is_read_again() -> None:
    rest, clock = LimitRest(), Clock()
    rest.past = {"train": [300, 300, 300, 300]}
    rest.history_error = RestError("HTTP 503", 503)
    history = ControllerHistory(rest, 60.0, EstimateSettings(), refresh=600, clock=clock)
    declared = _ti("train", executor_config=str({"gpu_dag": {"duration_s": 90}}))
    assert history.duration(declared) == 90.0
    rest.history_error = None
    clock.t = 599.0
    assert history.duration(declared) == 90.0 and rest.history_calls == 1  # the failure is kept
    clock.t = 600.0
    assert history.duration(declared) == pytest.approx(300, rel=0.02) and rest.history_calls == 2


def test_learned_history_is_read_again_after_refresh() -> None:
    rest, clock = LimitRest(), Clock()
    rest.past = {"a": [100, 100, 100]}
    history = ControllerHistory(rest, 60.0, EstimateSettings(), refresh=10, clock=clock)
    assert history.duration(_ti("a")) == pytest.approx(100, rel=0.02)
    rest.past = {"a": [400, 400, 400]}
    clock.t = 9.9
    assert history.duration(_ti("a")) == pytest.approx(100, rel=0.02)
    clock.t = 10.0
    assert history.duration(_ti("a")) == pytest.approx(400, rel=0.02)


def test_history_is_kept_per_dag_and_task() -> None:
    """The same task id in two DAGs is two histories, each read once."""
    rest = LimitRest()
    history = ControllerHistory(rest, 60.0, EstimateSettings(window=7), clock=Clock())
    for _ in range(3):
        history.duration(_ti("train", "d1"))
        history.duration(_ti("train", "d2"))
    assert rest.limits == [("d1", "train", 16), ("d2", "train", 16)]  # 2 x window + 2 rows


def test_learning_off_without_a_declared_duration_uses_the_default() -> None:
    history = ControllerHistory(LimitRest(), 45.0, EstimateSettings(enabled=False))
    estimate = history.estimate(_ti("a", executor_config="garbage("))
    assert (estimate.declared, estimate.duration) == (None, 45.0)


def test_a_task_that_declares_nothing_and_has_no_history_runs_the_default() -> None:
    history = ControllerHistory(LimitRest(), 45.0, EstimateSettings(), clock=Clock())
    assert history.duration({"dag_id": "d", "task_id": "a"}) == 45.0


def test_expected_end_of_a_task_without_a_usable_start_is_now_plus_its_duration() -> None:
    history = ControllerHistory(LimitRest(), 60.0, EstimateSettings(), clock=Clock())
    assert history.expected_end(_ti("a"), NOW) == NOW + 60
    assert history.expected_end(_ti("a", start_date="not a date"), NOW) == NOW + 60


def test_a_start_in_the_future_is_not_expected_to_end_after_its_whole_duration() -> None:
    """The worker's clock is ahead of the controller's: the task has run 0 s, not a negative time."""
    history = ControllerHistory(LimitRest(), 60.0, EstimateSettings(), clock=Clock())
    assert history.expected_end(_ti("a", start_date=_iso(NOW + 300)), NOW) == NOW + 60


def test_an_unreadable_history_is_said_once_for_every_task(caplog: pytest.LogCaptureFixture) -> None:
    rest = LimitRest()
    rest.history_error = ConnectionError("api-server down")
    history = ControllerHistory(rest, 60.0, EstimateSettings(), clock=Clock())
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.watermark.durations"):
        for i in range(5):
            history.duration(_ti(f"t{i}"))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "ConnectionError: api-server down" in messages[0]
    assert "using the declared durations" in messages[0]


def test_map_count_is_the_median_of_past_counts_rounded_up() -> None:
    rest = LimitRest()
    rest.mapped = {"trial"}
    rest.counts = {"trial": [2, 3]}
    history = ControllerHistory(rest, 60.0, EstimateSettings(), clock=Clock())
    config = str({"gpu_dag": {"map_length": 9}})
    assert history.map_count(_ti("trial", executor_config=config)) == 3  # history wins over the hint


def test_unreadable_map_counts_fall_back_to_the_hint_and_are_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rest = LimitRest()
    rest.mapped = {"a", "b"}
    rest.counts_error = RestError("HTTP 500", 500)
    history = ControllerHistory(rest, 60.0, EstimateSettings(), clock=Clock())
    config = str({"gpu_dag": {"map_length": 4}})
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.watermark.durations"):
        assert history.map_count(_ti("a", executor_config=config)) == 4
        assert history.map_count(_ti("b")) is None  # no hint either: unknown
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "cannot read mapped task counts" in messages[0]


def test_unreadable_dag_tasks_mean_not_mapped_and_name_the_dag(caplog: pytest.LogCaptureFixture) -> None:
    rest = LimitRest()
    rest.mapped = {"trial"}
    rest.tasks_error_ = RestError("HTTP 404", 404)
    history = ControllerHistory(rest, 60.0, EstimateSettings(), clock=Clock())
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.watermark.durations"):
        assert history.map_count(_ti("trial", "train_dag")) is None
        assert history.instances(_ti("trial", "train_dag"), _pending()) == [_pending()]
    assert any("cannot read the tasks of DAG train_dag" in r.getMessage() for r in caplog.records)
    assert rest.count_calls == 0


def test_map_counts_are_cached_until_refresh() -> None:
    rest, clock = LimitRest(), Clock()
    rest.mapped = {"trial"}
    rest.counts = {"trial": [3]}
    history = ControllerHistory(rest, 60.0, EstimateSettings(), refresh=60, clock=clock)
    assert history.map_count(_ti("trial")) == 3
    rest.counts = {"trial": [5]}
    assert history.map_count(_ti("trial")) == 3 and rest.count_calls == 1
    clock.t = 60.0
    assert history.map_count(_ti("trial")) == 5 and rest.count_calls == 2


def test_instances_of_a_mapped_task_are_numbered_in_its_order() -> None:
    rest = LimitRest()
    rest.mapped = {"trial"}
    rest.counts = {"trial": [3]}
    history = ControllerHistory(rest, 60.0, EstimateSettings(), clock=Clock())
    pending = _pending("d/manual__2026-11-30T00:00/trial/-1")
    instances = history.instances(_ti("trial"), pending)
    assert [p.key for p in instances] == [f"d/manual__2026-11-30T00:00/trial/{i}" for i in range(3)]
    assert [p.order for p in instances] == [("2026-11-30", i) for i in range(3)]
    assert all((p.slots, p.priority, p.duration) == (2, 5, 600.0) for p in instances)


def test_a_mapped_task_expected_to_expand_to_nothing_stays_one_instance() -> None:
    rest = LimitRest()
    rest.mapped = {"trial"}
    history = ControllerHistory(rest, 60.0, EstimateSettings(), clock=Clock())
    ti_ = _ti("trial", executor_config=str({"gpu_dag": {"map_length": 0}}))
    assert history.instances(ti_, _pending()) == [_pending()]


@pytest.mark.parametrize("map_index", [None, "n/a", float("nan")])
def test_a_task_instance_with_a_malformed_map_index_is_not_a_crash(map_index: Any) -> None:
    """One task instance the REST answer gives without a usable ``map_index`` made ``instances`` raise,
    and the controller dropped its whole lookahead for the tick (``_pending`` has no per-task guard)."""
    rest = LimitRest()
    history = ControllerHistory(rest, 60.0, EstimateSettings(), clock=Clock())
    ti_ = _ti("plain", map_index=map_index)  # not a mapped task
    assert history.map_count(ti_) is None
    assert history.instances(ti_, _pending()) == [_pending()]
