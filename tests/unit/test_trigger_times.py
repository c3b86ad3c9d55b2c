"""Trigger times of DAG runs as the priority strategy sees them: a run id cannot claim any time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_gpu_dag.priority import trigger

NOW = 1_796_040_000.0  # 2026-11-30T12:00:00Z


def _ti(run_id: str) -> SimpleNamespace:
    return SimpleNamespace(dag_id="d", run_id=run_id)


@pytest.fixture
def times(monkeypatch: pytest.MonkeyPatch) -> trigger.TriggerTimes:
    monkeypatch.setattr(trigger, "MAX_RUN_AGE", 30 * 86400.0)  # the shipped bound (tests/conftest.py)
    return trigger.TriggerTimes(clock=lambda: NOW)


def test_a_run_id_in_the_future_is_weighed_as_triggered_now(
    times: trigger.TriggerTimes, caplog: pytest.LogCaptureFixture
) -> None:
    """``manual__9999-...`` put every task of the run behind every other DAG's for ever: a wait with no
    bound, which the cross-DAG policy promises never happens."""
    with caplog.at_level("WARNING", logger="airflow_gpu_dag.priority.trigger"):
        assert times.of(_ti("manual__9999-12-31T23:59:59+00:00")) == NOW
        assert times.of(_ti("manual__9999-12-31T23:59:59+00:00")) == NOW  # remembered: logged once
    (record,) = caplog.records
    assert "from now" in record.getMessage() and "weighed as triggered now" in record.getMessage()


def test_a_run_id_long_ago_is_weighed_as_at_most_30_days_old(times: trigger.TriggerTimes) -> None:
    """``manual__0001-...`` put every task of the run ahead of every other DAG's (the int32 maximum)."""
    assert times.of(_ti("manual__0001-01-01T00:00:00+00:00")) == NOW - 30 * 86400.0


def test_run_ids_within_the_bound_keep_their_time(times: trigger.TriggerTimes) -> None:
    assert times.of(_ti("manual__2026-11-30T11:00:00+00:00")) == NOW - 3600.0
    assert times.of(_ti("manual__2026-11-01T12:00:00+00:00")) == NOW - 29 * 86400.0
    assert times.of(_ti("scheduled__2020-01-01T00:00:00+00:00")) == NOW  # a logical date: first seen
    assert times.of(_ti("manual__2026-11-30T12:05:00+00:00")) == NOW + 300.0  # another host's clock, ahead
