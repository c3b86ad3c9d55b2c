"""``[gpu_dag]`` values that the readers and ``config_problems`` (lint, the cluster policy) judged
differently, or that raised where they must not, and hints that raised on odd values:

1. ``plan_search_budget`` / ``planner_nice`` written as ``int()`` (and Airflow's ``conf.getint``) reads
   them (``+5``, ``60_000``) passed lint but were ignored (the default used) where they are read;
2. a whole number ``int()`` refuses (over 4,300 digits) raised ``ValueError`` from the scheduler's weight
   settings and from ``config_problems`` (documented never to raise);
3. ``learned_window`` under ``learned_min_runs`` was accepted silently, and no task ever learned a
   duration (at most ``window`` tries are read, ``min_runs`` are needed);
4. ``duration_hint`` / ``read_hints`` raised on a hint too large for a float or an unhashable literal.
"""

from __future__ import annotations

import logging

import pytest

from airflow_gpu_dag import settings
from airflow_gpu_dag.executor_config import duration_hint, gpu_hints, read_hints
from tests.unit.test_priority_settings import _fresh, _problem, _set  # noqa: F401 (autouse fixture)


# -- 1. whole numbers as lint reads them ------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value", "used"),
    [
        ("plan_search_budget", "60_000", 60000),  # before: 0, with a warning in the scheduler log only
        ("plan_search_budget", "+5", 5),
        ("planner_nice", "+5", 5),  # before: 19
        ("planner_nice", " 1_0 ", 10),
    ],
)
def test_a_whole_number_lint_accepts_is_the_one_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, option: str, value: str, used: int
) -> None:
    _set(monkeypatch, option, value)
    assert _problem(option) is None
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        assert getattr(settings, option)() == used
    assert option not in caplog.text


@pytest.mark.parametrize(("option", "default"), [("plan_search_budget", 0), ("planner_nice", 19)])
def test_a_number_that_does_not_parse_is_warned_once_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, option: str, default: int
) -> None:
    _set(monkeypatch, option, "lots")
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        assert getattr(settings, option)() == default
        assert getattr(settings, option)() == default  # read again every 30 s: said once
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"[gpu_dag] {option} 'lots' is not a number; using {default}"]


# -- 2. numbers int() refuses -------------------------------------------------------------------------
@pytest.mark.parametrize(("option", "default"), [("plan_search_budget", 0), ("planner_nice", 19)])
def test_a_number_too_long_for_int_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, option: str, default: int
) -> None:
    # before: ValueError "Exceeds the limit (4300 digits)" from WeightSettings.read (the scheduler)
    _set(monkeypatch, option, "9" * 5000)
    assert getattr(settings, option)() == default
    assert str(_problem(option)).endswith("is not a whole number")


def test_pool_slots_too_long_for_int_are_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: config_problems (the cluster policy, lint) and pool_capacities (the weights) raised ValueError
    _set(monkeypatch, "pools", '{"gpu_default": "%s"}' % ("9" * 5000))
    assert "gives pool 'gpu_default'" in str(_problem("pools"))
    assert settings.pool_capacities() is None


# -- 3. a window that can never hold min_runs tries -----------------------------------------------------
@pytest.mark.parametrize(("window", "min_runs"), [("2", None), (None, "30"), ("4", "5")])
def test_a_window_under_min_runs_is_reported_and_the_defaults_used(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    window: str | None,
    min_runs: str | None,
) -> None:
    """At most ``learned_window`` tries of a task are read and ``learned_min_runs`` are needed: with fewer
    in the window than needed, no task ever learned (declared estimates everywhere) and nothing said so."""
    from airflow_gpu_dag.core.analysis.estimates import EstimateSettings, RunSample, estimate_duration

    if window is not None:
        _set(monkeypatch, "learned_window", window)
    if min_runs is not None:
        _set(monkeypatch, "learned_min_runs", min_runs)
    problem = _problem("learned_window")
    assert problem is not None and "learned_min_runs" in problem, settings.config_problems()
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        used = settings.estimate_settings()
    assert (used.window, used.min_runs) == (EstimateSettings().window, EstimateSettings().min_runs)
    assert "learned_window" in caplog.text
    runs = [RunSample(600.0 + i % 3) for i in range(40)]
    assert estimate_duration("t", runs, 60.0, 60.0, used).learned is not None
    assert estimate_duration("t", runs, 60.0, 60.0, EstimateSettings(window=2)).learned is None  # before


def test_a_window_that_holds_min_runs_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, "learned_window", "5")
    _set(monkeypatch, "learned_min_runs", "5")
    assert settings.config_problems() == []
    used = settings.estimate_settings()
    assert (used.window, used.min_runs) == (5, 5)


# -- 4. hints that raised --------------------------------------------------------------------------------
def test_a_duration_hint_too_large_for_a_float_is_no_duration() -> None:
    config = gpu_hints(duration=10**400)  # kept as written (the cluster policy reports it)
    assert duration_hint(config) is None  # before: OverflowError


@pytest.mark.parametrize("text", ["{{}: 1}", "{'gpu_dag': {'duration_s': 1}, (1, [2]): 3}"])
def test_an_unhashable_literal_is_unreadable_not_raised(text: str) -> None:
    assert read_hints(text) == {}  # before: TypeError (the controller reads executor_config from REST)
