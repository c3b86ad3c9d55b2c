"""Tests of ``airflow_gpu_dag.sensors.start_deadline``."""

from __future__ import annotations

import pytest
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk.exceptions import DownstreamTasksSkipped

from airflow_gpu_dag.operators.fallback import FALLBACK_XCOM_KEY
from airflow_gpu_dag.sensors.start_deadline import StartDeadlineSensor
from tests.unit.fallback_contexts import ladder_context, ladder_dag, mapped_ladder_context


def test_watcher_in_an_expanded_group_skips_the_rung_of_its_map_index():
    with ladder_dag("fba"):
        PythonOperator(task_id="rung", python_callable=lambda: None)
        sensor = StartDeadlineSensor(task_id="rung_start_deadline", watched_task_id="rung", start_within=60)
    ctx, _ = mapped_ladder_context({"rung": "running"}, waited=3600)
    assert sensor.poke(ctx).xcom_value == {"outcome": "started", "state": "running"}
    ctx, pushed = mapped_ladder_context({"rung": "scheduled"}, waited=61)
    with pytest.raises(DownstreamTasksSkipped) as skip:
        sensor.poke(ctx)
    assert skip.value.tasks == [("rung", 1)]
    assert [v["outcome"] for k, v in pushed if k == FALLBACK_XCOM_KEY] == ["not_started"]


class TestStartDeadlineSensor:
    def _sensor(self):
        with ladder_dag():
            rung = PythonOperator(task_id="rung", python_callable=lambda: None)
            sensor = StartDeadlineSensor(
                task_id="rung_start_deadline", watched_task_id="rung", start_within=60
            )
        return rung, sensor

    @pytest.mark.parametrize("state", ["queued", "running", "success", "up_for_retry", "deferred"])
    def test_started_rung_ends_the_watch(self, state):
        _, sensor = self._sensor()
        ctx, pushed = ladder_context({"rung": state}, waited=3600)
        result = sensor.poke(ctx)
        assert result.is_done and result.xcom_value == {"outcome": "started", "state": state}
        assert pushed == []

    @pytest.mark.parametrize("state", ["failed", "upstream_failed", "skipped", "removed"])
    def test_rung_that_ended_otherwise_is_not_reported_as_started(self, state, capsys):
        # A rung failed or skipped while it waited (by hand, by an older controller) never got its
        # resources: the watch ends, but neither the XCom nor the log claims it started.
        _, sensor = self._sensor()
        ctx, pushed = ladder_context({"rung": state}, waited=10)
        result = sensor.poke(ctx)
        assert result.is_done and result.xcom_value == {"outcome": "ended", "state": state}
        assert pushed == []
        logged = capsys.readouterr().out  # the task logger writes through structlog to stdout
        assert f"rung is {state}: it left its pool's queue" in logged
        assert "got its resources" not in logged

    @pytest.mark.parametrize("state", [None, "scheduled"])
    def test_waiting_rung_within_deadline_keeps_waiting(self, state):
        _, sensor = self._sensor()
        ctx, pushed = ladder_context({"rung": state}, waited=10)
        assert sensor.poke(ctx) is False and pushed == []

    def test_waiting_rung_after_deadline_is_marked_and_skipped(self):
        _, sensor = self._sensor()
        ctx, pushed = ladder_context({"rung": "scheduled"}, waited=61)
        with pytest.raises(DownstreamTasksSkipped) as skip:
            sensor.poke(ctx)
        assert skip.value.tasks == [("rung", -1)] or skip.value.tasks == ["rung"]
        (_key, value), *_ = [p for p in pushed if p[0] == FALLBACK_XCOM_KEY]
        assert value["outcome"] == "not_started" and "did not start within 60s" in value["reason"]
