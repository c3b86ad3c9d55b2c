"""``[gpu_dag]`` values that used to escape the checks: a pool size ``int()`` refuses, a default
duration longer than any estimate may be, ``[gpu_dag] queues`` entries of the wrong type, and numbers
outside their range. Each is reported by ``config_problems`` (so ``lint`` and the cluster policy show
it) and ignored where it is read, and nothing raises in the scheduler."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from airflow_gpu_dag import settings
from tests.unit.test_priority_settings import _fresh, _problem, _set  # noqa: F401 (autouse fixture)


def test_a_pool_size_int_refuses_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    # "²".isdigit() is True but int("²") raises: before, config_problems, pool_capacities and with them
    # every cross-DAG weight (WeightSettings.read) raised ValueError
    _set(monkeypatch, "pools", '{"gpu_default": "²"}')
    assert "gives pool 'gpu_default' '²' slots" in str(_problem("pools"))
    assert settings.pool_capacities() is None
    _set(monkeypatch, "pools", '{"gpu_default": " 8 "}')
    assert settings.pool_capacities() == {"gpu_default": 8}


def test_a_default_duration_longer_than_any_estimate_is_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # before: taken as is, every key of a run fell before the epoch and all weights saturated at int32
    _set(monkeypatch, "default_duration", "1000d")
    assert "longer than any task runs" in str(_problem("default_duration"))
    with caplog.at_level(logging.WARNING):
        assert settings.default_duration_seconds() == 1800.0
    _set(monkeypatch, "default_duration", "2h")
    assert _problem("default_duration") is None and settings.default_duration_seconds() == 7200.0


@pytest.mark.parametrize(
    "site",
    [
        {"pool": "gpu01", "node_labels": "gpu01"},  # before: an unexplained dict() error in pin_to_queue
        {"pool": 7},  # before: task.pool = "7"
        {"pool": ["a"]},  # before: task.pool = "['a']"
        {"pool": None},  # before: the GPU task silently stayed in default_pool
        {"pool": "gpu01", "node_labels": {"zone": 1}},
    ],
)
def test_queue_entries_of_the_wrong_type_are_refused(monkeypatch: pytest.MonkeyPatch, site: Any) -> None:
    import json

    _set(monkeypatch, "queues", json.dumps({"host-gpu01": site}))
    with pytest.raises(ValueError, match=r"\[gpu_dag\] queues .*'host-gpu01': pools must be names"):
        settings.queue_sites()


def test_queue_entries_of_the_right_type_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, "queues", '{"a": "gpu_a", "b": {"pool": "gpu_b", "node_labels": {"zone": "z1"}}}')
    assert settings.queue_sites() == {
        "a": {"pool": "gpu_a"},
        "b": {"pool": "gpu_b", "node_labels": {"zone": "z1"}},
    }


@pytest.mark.parametrize(
    ("option", "value", "problem", "used"),
    [
        ("planner_nice", "-5", "-5 must be >= 0 and <= 19", 19),
        ("planner_nice", "25", "25 must be >= 0 and <= 19", 19),
        ("plan_search_budget", "-5", "-5 must be >= 0", 0),
    ],
)
def test_numbers_outside_their_range_are_reported_and_logged(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    option: str,
    value: str,
    problem: str,
    used: int,
) -> None:
    # before: clamped silently (planner_nice -5 -> 0, neither the default nor logged), never reported
    _set(monkeypatch, option, value)
    assert _problem(option) == problem
    with caplog.at_level(logging.WARNING):
        assert getattr(settings, option)() == used
    assert f"[gpu_dag] {option} '{value}'" in caplog.text
