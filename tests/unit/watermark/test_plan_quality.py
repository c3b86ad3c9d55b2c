"""The controller's plan-quality metric: ``gpu_dag.plan.*`` once per DAG run that finished."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

import airflow_gpu_dag.watermark.plan_quality as plan_quality
from airflow_gpu_dag.cli.explain_report import EXIT_API, EXIT_NOT_PROVIDER, ExplainError
from airflow_gpu_dag.watermark.plan_quality import MAX_RUNS, NOT_PROVIDER_TTL, PlanErrorReporter

NOW = 1_800_000_000.0


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def _error(median: float) -> dict[str, Any]:
    return {
        "tasks": 3,
        "start_error_s": {"median": median, "p90": median * 2},
        "end_error_s": {"median": median + 1, "p90": median * 3},
    }


class Runs:
    """The finished DAG runs the REST API lists (``pages("/dags/~/dagRuns", ...)``), and the reports."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.asked: list[dict[str, Any]] = []
        self.down: Exception | None = None
        self.reports: dict[tuple[str, str], Mapping[str, Any] | Exception] = {}
        self.built: list[tuple[str, str]] = []

    def pages(self, path: str, key: str, params: Any = ()) -> list[dict[str, Any]]:
        assert (path, key) == ("/dags/~/dagRuns", "dag_runs")
        if self.down is not None:
            raise self.down
        asked = list(params)
        self.asked.append(dict(asked))
        since = datetime.fromisoformat(dict(asked)["end_date_gte"]).timestamp()
        states = {v for k, v in asked if k == "state"}
        found = [r for r in self.runs if r["state"] in states and r["_end"] >= since]
        return [{k: v for k, v in r.items() if k != "_end"} for r in sorted(found, key=lambda r: r["_end"])]

    def finish(self, dag_id: str, run_id: str, end: float, state: str = "success", **report: Any) -> None:
        self.runs.append(
            {"dag_id": dag_id, "dag_run_id": run_id, "state": state, "end_date": _iso(end), "_end": end}
        )
        self.reports[(dag_id, run_id)] = {"controller": {"gpu": {}}, "plan_error": _error(5.0), **report}

    def report(self, dag_id: str, run_id: str) -> Mapping[str, Any]:
        self.built.append((dag_id, run_id))
        found = self.reports[(dag_id, run_id)]
        if isinstance(found, Exception):
            raise found
        return found


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, Any]]:
    calls: list[tuple[str, Any, Any]] = []
    monkeypatch.setattr(plan_quality.metrics, "plan_error", lambda dag, s, e: calls.append((dag, s, e)))
    return calls


@pytest.fixture(autouse=True)
def _forget_logged() -> None:
    plan_quality._once.clear()


def _reporter(runs: Runs, clock: Clock, pools: tuple[str, ...] = ("gpu",)) -> PlanErrorReporter:
    return PlanErrorReporter(runs, pools, history=None, clock=clock, report=runs.report)


def test_each_run_that_finishes_is_sent_once_and_runs_before_the_start_never(
    sent: list[tuple[str, Any, Any]],
) -> None:
    runs, clock = Runs(), Clock()
    runs.finish("pipe", "before", NOW - 30)
    reporter = _reporter(runs, clock)
    assert reporter.check() == 0  # the first check marks where measuring starts
    runs.finish("pipe", "r1", NOW + 20)
    clock.now = NOW + 60
    assert reporter.check() == 1
    assert sent == [("pipe", _error(5.0)["start_error_s"], _error(5.0)["end_error_s"])]
    clock.now = NOW + 120
    runs.finish("pipe", "r2", NOW + 100, state="failed", plan_error=_error(9.0))
    assert reporter.check() == 1
    assert [dag_run for dag_run in runs.built] == [("pipe", "r1"), ("pipe", "r2")]
    assert sent[-1] == ("pipe", _error(9.0)["start_error_s"], _error(9.0)["end_error_s"])
    clock.now = NOW + 180
    assert reporter.check() == 0 and len(sent) == 2  # within the look-back margin, not sent again
    assert [r for r in reporter.sent if r[1] == "before"] == []


def test_a_run_whose_end_is_committed_late_is_still_found(sent: list[tuple[str, Any, Any]]) -> None:
    runs, clock = Runs(), Clock()
    reporter = _reporter(runs, clock)
    reporter.check()
    runs.finish("pipe", "late", NOW + 50)
    clock.now = NOW + 60
    runs.finish("pipe", "later", NOW + 58)
    assert reporter.check() == 2
    runs.finish("pipe", "committed-late", NOW + 55)  # ended before the latest end seen, listed after it
    clock.now = NOW + 120
    assert reporter.check() == 1
    assert [r[1] for r in reporter.sent] == ["late", "later", "committed-late"]


def test_a_dag_not_on_the_provider_is_skipped_without_asking_again(sent: list[tuple[str, Any, Any]]) -> None:
    runs, clock = Runs(), Clock()
    reporter = _reporter(runs, clock)
    reporter.check()
    runs.finish("etl", "a", NOW + 10)
    runs.reports[("etl", "a")] = ExplainError("not ours", EXIT_NOT_PROVIDER)
    clock.now = NOW + 60
    assert reporter.check() == 0
    runs.finish("etl", "b", NOW + 70)
    clock.now = NOW + 120
    assert reporter.check() == 0
    assert runs.built == [("etl", "a")]  # b was not built
    runs.finish("etl", "c", NOW + 120 + NOT_PROVIDER_TTL)
    clock.now = NOW + 180 + NOT_PROVIDER_TTL
    reporter.check()
    assert runs.built[-1] == ("etl", "c")  # asked again once the TTL ran out
    assert [run for _dag, run, _e in reporter.sent] == ["c"]


def test_only_runs_in_the_controllers_pools_with_gpu_tasks_are_sent(sent: list[tuple[str, Any, Any]]) -> None:
    runs, clock = Runs(), Clock()
    reporter = _reporter(runs, clock, pools=("gpu_a100",))
    reporter.check()
    runs.finish("other_pool", "r", NOW + 10)  # its GPU pool is "gpu"
    runs.finish("mine", "r", NOW + 11, controller={"gpu_a100": {}})
    runs.finish("mine", "no-tasks", NOW + 12, controller={"gpu_a100": {}}, plan_error={"tasks": 0})
    runs.finish("mine", "running-when-built", NOW + 13, controller={"gpu_a100": {}}, plan_error=None)
    clock.now = NOW + 60
    assert reporter.check() == 1
    assert [(dag, run) for dag, run, _e in reporter.sent] == [("mine", "r")]
    assert len(sent) == 1


def test_failures_never_raise_and_are_logged_once(
    sent: list[tuple[str, Any, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    runs, clock = Runs(), Clock()
    reporter = _reporter(runs, clock)
    reporter.check()
    runs.down = ConnectionError("api-server down")
    caplog.set_level(logging.DEBUG, logger=plan_quality.__name__)
    for step in (1, 2, 3):
        clock.now = NOW + 60 * step
        assert reporter.check() == 0
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot list the finished runs" in warnings[0].getMessage()

    runs.down = None
    runs.finish("pipe", "boom", NOW + 200)
    runs.reports[("pipe", "boom")] = RuntimeError("unexpected answer")
    runs.finish("pipe", "api", NOW + 201)
    runs.reports[("pipe", "api")] = ExplainError("cannot reach", EXIT_API)
    runs.finish("pipe", "fine", NOW + 202)
    clock.now = NOW + 260
    caplog.clear()
    assert reporter.check() == 1  # the others' failures do not cost the good run
    assert [r[1] for r in reporter.sent] == ["fine"]
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("pipe/boom not measured (unexpected answer)" in m for m in messages)
    assert any("pipe/api: cannot reach" in m for m in messages)


def test_an_unexpected_failure_inside_the_check_is_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    runs, clock = Runs(), Clock()
    reporter = _reporter(runs, clock)
    reporter.check()
    runs.pages = lambda *args, **kwargs: ["not a run object"]  # type: ignore[method-assign]
    clock.now = NOW + 60
    assert reporter.check() == 0
    assert "gpu-dag plan error: not measured this tick" in caplog.text


def test_more_runs_than_the_limit_in_one_tick_measures_the_latest(
    sent: list[tuple[str, Any, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    runs, clock = Runs(), Clock()
    reporter = _reporter(runs, clock)
    reporter.check()
    for i in range(MAX_RUNS + 5):
        runs.finish("pipe", f"r{i:03d}", NOW + 1 + i)
    clock.now = NOW + 60
    assert reporter.check() == MAX_RUNS
    assert [r[1] for r in reporter.sent] == [f"r{i:03d}" for i in range(5, MAX_RUNS + 5)]
    assert "more than 20: the oldest are not measured" in caplog.text
    clock.now = NOW + 120
    assert reporter.check() == 0  # the dropped ones are not measured later either: no backlog


def test_a_check_stops_at_its_budget_and_the_next_measures_the_rest(sent: list[tuple[str, Any, Any]]) -> None:
    runs, clock = Runs(), Clock()
    spent = [0.0]
    building = runs.report

    def slow_report(dag_id: str, run_id: str) -> Mapping[str, Any]:
        spent[0] += 10.0  # each report takes 10 s
        return building(dag_id, run_id)

    reporter = PlanErrorReporter(
        runs, ["gpu"], history=None, clock=clock, budget=15.0, timer=lambda: spent[0], report=slow_report
    )
    reporter.check()
    for i in range(5):
        runs.finish("pipe", f"r{i}", NOW + 1 + i)
    clock.now = NOW + 60
    assert reporter.check() == 2  # 0 s and 10 s into the budget: built; at 20 s: over it
    assert reporter.check() == 2
    clock.now = NOW + 120
    assert reporter.check() == 1
    assert reporter.check() == 0
    assert [r[1] for r in reporter.sent] == ["r0", "r1", "r2", "r3", "r4"]
    assert len(sent) == 5


def test_the_default_report_is_explains_with_the_controllers_durations_and_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[Any, ...]] = []

    def build_report(client: Any, dag_id: str, run_id: str, **kwargs: Any) -> dict[str, Any]:
        asked.append((client, dag_id, run_id, kwargs))
        return {}

    monkeypatch.setattr(plan_quality, "build_report", build_report)
    client, history, gate = Runs(), object(), object()
    reporter = PlanErrorReporter(client, ["gpu"], history=history, gate=gate, epoch=12.0)  # type: ignore[arg-type]
    reporter.report("pipe", "r1")
    assert asked == [(client, "pipe", "r1", {"history": history, "gate": gate, "epoch": 12.0})]
