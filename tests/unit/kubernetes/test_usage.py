"""Tests of ``airflow_gpu_dag.kubernetes.usage``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

#: Every test takes the deferring path (a deployment with a triggerer).
pytestmark = pytest.mark.usefixtures("_deferring")


def _pod(started: datetime | None, finished: datetime | None, phase: str = "Succeeded") -> Any:
    from kubernetes.client import models as k8s

    state = k8s.V1ContainerState(
        terminated=k8s.V1ContainerStateTerminated(exit_code=0, started_at=started, finished_at=finished)
        if finished
        else None,
        running=k8s.V1ContainerStateRunning(started_at=started) if started and not finished else None,
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="train-abc", namespace="ml", uid="u-1", labels={"run_id": "r7"}),
        spec=k8s.V1PodSpec(containers=[], node_name="node-7"),
        status=k8s.V1PodStatus(
            phase=phase,
            start_time=started,
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="base", image="i", image_id="", ready=False, restart_count=0, state=state
                )
            ],
        ),
    )


def test_pod_usage_is_gpus_times_the_containers_run_time() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_usage_record

    start = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    record = pod_usage_record(
        _pod(start, start + timedelta(minutes=30)),
        gpus=4,
        dag_id="d",
        run_id="r7",
        task_id="train",
        pool="gpu",
    )
    assert record is not None and record.gpu_seconds == 4 * 1800
    assert (record.lease_id, record.host, record.outcome) == ("pod:ml/train-abc:u-1", "node-7", "succeeded")
    running = pod_usage_record(
        _pod(start, None, "Running"), gpus=1, dag_id="d", run_id="r", task_id="t", now=start.timestamp() + 60
    )
    assert running is not None and running.gpu_seconds == 60
    assert pod_usage_record(_pod(None, None, "Pending"), gpus=1, dag_id="d", run_id="r", task_id="t") is None
