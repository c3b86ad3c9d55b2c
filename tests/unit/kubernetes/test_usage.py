"""Tests of ``airflow_gpu_dag.kubernetes.usage``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.operators.conftest import finished_pod

#: Every test takes the deferring path (a deployment with a triggerer).
pytestmark = pytest.mark.usefixtures("_deferring")


def test_pod_usage_is_gpus_times_the_containers_run_time() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_usage_record

    start = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    record = pod_usage_record(
        finished_pod(start, start + timedelta(minutes=30)),
        gpus=4,
        dag_id="d",
        run_id="r7",
        task_id="train",
        pool="gpu",
    )
    assert record is not None and record.gpu_seconds == 4 * 1800
    assert (record.lease_id, record.host, record.outcome) == ("pod:ml/train-abc:u-1", "node-7", "succeeded")
    running = pod_usage_record(
        finished_pod(start, None, "Running"),
        gpus=1,
        dag_id="d",
        run_id="r",
        task_id="t",
        now=start.timestamp() + 60,
    )
    assert running is not None and running.gpu_seconds == 60
    assert (
        pod_usage_record(finished_pod(None, None, "Pending"), gpus=1, dag_id="d", run_id="r", task_id="t")
        is None
    )
