"""Tests of ``airflow_gpu_dag.sensors.start_deadline``."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import DownstreamTasksSkipped

from airflow_gpu_dag.operators.fallback import FALLBACK_XCOM_KEY
from airflow_gpu_dag.sensors.start_deadline import StartDeadlineSensor

RUN_ID = "manual__2026-11-30T00:00:00+00:00"


def _dag(dag_id: str = "fba", **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), **kwargs)


def _mapped_ctx(states: dict[str, str | None], xcoms: dict[tuple[str, str], Any] | None = None, waited=0.0):
    """A task instance with map index 1 in an expanded task group: the Execution API keys the states of
    mapped task instances ``<task_id>_<map_index>``, and an XCom pull without ``map_indexes`` returns
    the values of every map index."""
    xcoms = dict(xcoms or {})
    pushed: list[tuple[str, Any]] = []

    def get_task_states(dag_id, task_ids, run_ids, map_index=None):
        rows = {f"{t}_{i}": states.get(t) for t in task_ids for i in (0, 1, 2) if map_index in (None, i)}
        return {RUN_ID: rows}

    def xcom_pull(task_ids, key="return_value", map_indexes=None):
        value = xcoms.get((task_ids, key))
        if map_indexes is None:  # the Task SDK returns the values of every map index
            return [value, value, value]
        return value if map_indexes == 1 else None

    ti = SimpleNamespace(
        dag_id="fba",
        map_index=1,
        start_date=datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=waited),
        get_task_states=get_task_states,
        get_first_reschedule_date=lambda context: None,
        xcom_pull=xcom_pull,
        xcom_push=lambda key, value: pushed.append((key, value)),
    )
    return {"ti": ti, "run_id": RUN_ID}, pushed


def test_watcher_in_an_expanded_group_skips_the_rung_of_its_map_index():
    with _dag():
        PythonOperator(task_id="rung", python_callable=lambda: None)
        sensor = StartDeadlineSensor(task_id="rung_start_deadline", watched_task_id="rung", start_within=60)
    ctx, _ = _mapped_ctx({"rung": "running"}, waited=3600)
    assert sensor.poke(ctx).xcom_value == {"outcome": "started", "state": "running"}
    ctx, pushed = _mapped_ctx({"rung": "scheduled"}, waited=61)
    with pytest.raises(DownstreamTasksSkipped) as skip:
        sensor.poke(ctx)
    assert skip.value.tasks == [("rung", 1)]
    assert [v["outcome"] for k, v in pushed if k == FALLBACK_XCOM_KEY] == ["not_started"]


def _dag_fallback_ladder(dag_id: str = "fb") -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1))


def _ctx(states: dict[str, str | None], xcoms: dict[tuple[str, str], Any] | None = None, waited: float = 0):
    xcoms = dict(xcoms or {})
    pushed: list[tuple[str, Any]] = []

    def xcom_pull(task_ids: str, key: str = "return_value") -> Any:
        return xcoms.get((task_ids, key))

    ti = SimpleNamespace(
        dag_id="fb",
        map_index=-1,
        start_date=datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=waited),
        get_task_states=lambda dag_id, task_ids, run_ids: {RUN_ID: {t: states.get(t) for t in task_ids}},
        get_first_reschedule_date=lambda context: None,
        xcom_pull=xcom_pull,
        xcom_push=lambda key, value: pushed.append((key, value)),
    )
    return {"ti": ti, "run_id": RUN_ID}, pushed


class TestStartDeadlineSensor:
    def _sensor(self):
        with _dag_fallback_ladder():
            rung = PythonOperator(task_id="rung", python_callable=lambda: None)
            sensor = StartDeadlineSensor(
                task_id="rung_start_deadline", watched_task_id="rung", start_within=60
            )
        return rung, sensor

    @pytest.mark.parametrize("state", ["queued", "running", "success", "up_for_retry", "deferred"])
    def test_started_rung_ends_the_watch(self, state):
        _, sensor = self._sensor()
        ctx, pushed = _ctx({"rung": state}, waited=3600)
        result = sensor.poke(ctx)
        assert result.is_done and result.xcom_value == {"outcome": "started", "state": state}
        assert pushed == []

    @pytest.mark.parametrize("state", ["failed", "upstream_failed", "skipped", "removed"])
    def test_rung_that_ended_otherwise_is_not_reported_as_started(self, state, capsys):
        # A rung failed or skipped while it waited (by hand, by an older controller) never got its
        # resources: the watch ends, but neither the XCom nor the log claims it started.
        _, sensor = self._sensor()
        ctx, pushed = _ctx({"rung": state}, waited=10)
        result = sensor.poke(ctx)
        assert result.is_done and result.xcom_value == {"outcome": "ended", "state": state}
        assert pushed == []
        logged = capsys.readouterr().out  # the task logger writes through structlog to stdout
        assert f"rung is {state}: it left its pool's queue" in logged
        assert "got its resources" not in logged

    @pytest.mark.parametrize("state", [None, "scheduled"])
    def test_waiting_rung_within_deadline_keeps_waiting(self, state):
        _, sensor = self._sensor()
        ctx, pushed = _ctx({"rung": state}, waited=10)
        assert sensor.poke(ctx) is False and pushed == []

    def test_waiting_rung_after_deadline_is_marked_and_skipped(self):
        _, sensor = self._sensor()
        ctx, pushed = _ctx({"rung": "scheduled"}, waited=61)
        with pytest.raises(DownstreamTasksSkipped) as skip:
            sensor.poke(ctx)
        assert skip.value.tasks == [("rung", -1)] or skip.value.tasks == ["rung"]
        (_key, value), *_ = [p for p in pushed if p[0] == FALLBACK_XCOM_KEY]
        assert value["outcome"] == "not_started" and "did not start within 60s" in value["reason"]
