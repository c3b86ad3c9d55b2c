"""Tests of ``airflow_gpu_dag.operators.fallback``."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchTimeoutException
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_gpu_dag.operators.fallback import (
    FALLBACK_XCOM_KEY,
    FallbackDecision,
    FallbackResult,
    NotStartedInTime,
)
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator, GpuPodNotScheduled
from tests.unit.fallback_contexts import ladder_context, ladder_dag, mapped_ladder_context
from tests.unit.operators.conftest import HOOK, _context, _dag, pending_pod


def test_decision_and_result_read_the_rungs_of_their_own_map_index():
    with ladder_dag("fba"):
        decision = FallbackDecision(
            task_id="decide",
            rung_task_id="big",
            watcher_task_id=None,
            next_rung="small",
            ladder=[("big", None)],
        )
        result = FallbackResult(task_id="result", rung_task_ids=["big", "small"])
    mark = {"outcome": "not_started", "reason": "big: no GPUs"}
    ctx, _ = mapped_ladder_context({"big": "failed"}, {("big", FALLBACK_XCOM_KEY): mark})
    assert decision.execute(ctx) == {"from": "big", "to": "small", "reason": "big: no GPUs"}
    ctx, pushed = mapped_ladder_context({"big": "failed", "small": "success"}, {("small", "return_value"): 7})
    assert result.execute(ctx) == 7 and pushed == [("fallback_rung", "small")]


def test_ladder_decisions_and_join_retry_infrastructure_faults() -> None:
    """The decision and join tasks had ``retries=0``: a try killed with the scheduler, or an Execution API
    call made while the api-server restarted, failed the run (the chaos test's ``exhausted`` did, with
    every rung fine). They take the DAG's retries now (at least 1, 5 s apart); their own outcomes (a skip,
    an exhausted ladder's AirflowFailException) are never retried."""
    from datetime import timedelta

    from airflow.sdk import DAG

    from airflow_gpu_dag.operators.fallback import FallbackDecision, FallbackResult

    with DAG("ladder_retries", schedule=None, default_args={"retries": 3}):
        decision = FallbackDecision(
            task_id="exhausted", rung_task_id="r", watcher_task_id=None, next_rung=None
        )
        join = FallbackResult(task_id="result", rung_task_ids=["r"])
    with DAG("ladder_no_retries", schedule=None):
        plain = FallbackDecision(task_id="exhausted", rung_task_id="r", watcher_task_id=None, next_rung=None)
    assert (decision.retries, join.retries, plain.retries) == (3, 3, 1)
    assert decision.retry_delay == join.retry_delay == timedelta(seconds=5)


class TestFallbackDecision:
    def _decision(self, next_rung: str | None = "small", watcher: str | None = "big_start_deadline"):
        with ladder_dag():
            return FallbackDecision(
                task_id="decide",
                rung_task_id="big",
                watcher_task_id=watcher,
                next_rung=next_rung,
                ladder=[("big", watcher)],
            )

    NOT_STARTED = {"outcome": "not_started", "reason": "big did not start within 60s"}

    def test_watcher_skipped_the_rung_falls_back(self):
        ctx, _ = ladder_context(
            {"big": "skipped"}, {("big_start_deadline", FALLBACK_XCOM_KEY): self.NOT_STARTED}
        )
        assert self._decision().execute(ctx)["to"] == "small"

    def test_rung_that_reported_not_started_falls_back(self):
        ctx, _ = ladder_context({"big": "failed"}, {("big", FALLBACK_XCOM_KEY): self.NOT_STARTED})
        assert self._decision(watcher=None).execute(ctx)["from"] == "big"

    @pytest.mark.parametrize(
        ("states", "xcoms"),
        [
            ({"big": "success"}, {}),
            ({"big": "failed"}, {}),  # crashed after it started: a real failure, no fallback
            ({"big": "upstream_failed"}, {}),
            ({"big": "skipped"}, {}),  # skipped by an upstream branch, not by the watcher
            # the watcher marked it, but the rung had started in the meantime (the skip did not apply)
            ({"big": "success"}, {("big_start_deadline", FALLBACK_XCOM_KEY): NOT_STARTED}),
            ({"big": "failed"}, {("big_start_deadline", FALLBACK_XCOM_KEY): NOT_STARTED}),
        ],
    )
    def test_anything_else_skips_the_rest_of_the_ladder(self, states, xcoms):
        ctx, _ = ladder_context(states, xcoms)
        with pytest.raises(AirflowSkipException, match="no fallback"):
            self._decision().execute(ctx)

    def test_end_of_ladder_fails_with_every_reason(self):
        ctx, _ = ladder_context(
            {"big": "skipped"}, {("big_start_deadline", FALLBACK_XCOM_KEY): self.NOT_STARTED}
        )
        with pytest.raises(
            AirflowFailException, match=r"no rung could start: big: big did not start within 60s"
        ):
            self._decision(next_rung=None).execute(ctx)


def test_mark_not_started_pushes_the_marker():
    from airflow_gpu_dag.operators.fallback import mark_not_started

    ti = mock.Mock()
    mark_not_started({"ti": ti}, "no lease")
    ti.xcom_push.assert_called_once_with(
        key=FALLBACK_XCOM_KEY, value={"outcome": "not_started", "reason": "no lease"}
    )


def _run_sync(scheduled: bool, on_finish_action: str = "keep_pod") -> tuple[Any, mock.Mock, Exception]:
    with _dag("unsched") as dag:
        op = GpuKubernetesPodOperator(
            task_id="train",
            image="i",
            namespace="ml",
            gpus=8,
            schedule_timeout_seconds=5,
            durable=False,
            log_events_on_startup=False,
            get_logs=False,
            on_finish_action=on_finish_action,
        )
    remote = pending_pod(scheduled)
    pod_manager = mock.Mock()
    pod_manager.create_pod.side_effect = lambda pod: pod
    pod_manager.read_pod.return_value = remote

    async def never_scheduled(**kwargs: Any) -> None:
        raise PodLaunchTimeoutException(
            "Pod took too long to be scheduled on the cluster, giving up. More than 5s."
            if not scheduled
            else "Pod took too long to start. More than 120s."
        )

    pod_manager.await_pod_start.side_effect = never_scheduled
    op.__dict__["pod_manager"] = pod_manager
    op.__dict__["client"] = mock.Mock()
    ti = mock.Mock(dag_id="unsched", task_id="train", map_index=-1, try_number=1)
    with mock.patch(HOOK) as hook, mock.patch.object(type(op), "find_pod", return_value=remote):
        hook.return_value.is_in_cluster = False
        with pytest.raises(AirflowException) as err:
            op.execute(_context(dag, "train", ti=ti))
    return ti, pod_manager, err.value


def test_unscheduled_pod_is_deleted_and_fails_as_not_started_without_retry():
    ti, pod_manager, err = _run_sync(scheduled=False, on_finish_action="keep_pod")
    assert isinstance(err, GpuPodNotScheduled)
    assert isinstance(err, NotStartedInTime) and isinstance(err, AirflowFailException)  # no retries
    assert "was not scheduled within 5s" in str(err)
    pod_manager.delete_pod.assert_called_once()  # even with keep_pod: it must not start later
    marks = [c for c in ti.xcom_push.call_args_list if c.kwargs.get("key") == FALLBACK_XCOM_KEY]
    assert len(marks) == 1 and marks[0].kwargs["value"]["outcome"] == "not_started"


def test_scheduled_but_not_started_pod_keeps_the_providers_failure():
    ti, _, err = _run_sync(scheduled=True, on_finish_action="delete_pod")
    assert not isinstance(err, NotStartedInTime)
    assert not [c for c in ti.xcom_push.call_args_list if c.kwargs.get("key") == FALLBACK_XCOM_KEY]
