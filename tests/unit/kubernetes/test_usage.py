"""Tests of ``airflow_gpu_dag.kubernetes.usage``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

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


# -- pod_run_window, pod_usage_record ---------------------------------------------------------------------
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _status(name: str, started: object, finished: object = None, running: bool = False) -> SimpleNamespace:
    """A container status as a plain object (a pod read as JSON): terminated at ``finished``, or
    running since ``started``."""
    terminated = SimpleNamespace(started_at=started, finished_at=finished) if not running else None
    state = SimpleNamespace(
        terminated=terminated, running=SimpleNamespace(started_at=started) if running else None
    )
    return SimpleNamespace(name=name, state=state)


def _raw_pod(*statuses: SimpleNamespace, start_time: object = None, phase: str | None = "Succeeded") -> Any:
    return SimpleNamespace(
        metadata=SimpleNamespace(name="p", namespace="ml", uid="u", labels={}),
        spec=SimpleNamespace(node_name="n1"),
        status=SimpleNamespace(phase=phase, start_time=start_time, container_statuses=list(statuses)),
    )


def test_a_pod_without_a_status_never_ran() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_run_window

    assert pod_run_window(SimpleNamespace(status=None)) is None
    assert pod_run_window(object()) is None
    assert pod_run_window(_raw_pod()) is None  # no container statuses at all


def test_the_main_container_is_found_by_name_not_by_its_position() -> None:
    """A sidecar listed first (started earlier, ended later) must not stand for the main container."""
    from airflow_gpu_dag.kubernetes.usage import pod_run_window

    sidecar = _status("istio-proxy", T0 - timedelta(minutes=5), T0 + timedelta(hours=2))
    main = _status("base", T0, T0 + timedelta(minutes=10))
    assert pod_run_window(_raw_pod(sidecar, main)) == (T0.timestamp(), T0.timestamp() + 600)
    other = _status("trainer", T0, T0 + timedelta(minutes=1))
    assert pod_run_window(_raw_pod(sidecar, other), container="trainer") == (
        T0.timestamp(),
        T0.timestamp() + 60,
    )


def test_a_pod_of_one_container_counts_it_whatever_its_name_but_several_are_never_guessed() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_run_window

    only = _status("trainer", T0, T0 + timedelta(minutes=10))
    assert pod_run_window(_raw_pod(only)) == (T0.timestamp(), T0.timestamp() + 600)
    sidecar = _status("istio-proxy", T0 - timedelta(minutes=5), T0 + timedelta(hours=2))
    assert pod_run_window(_raw_pod(sidecar, only)) is None  # neither is "base"


def test_iso_timestamps_with_z_or_an_offset_are_the_same_instant() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_run_window

    zulu = _raw_pod(_status("base", "2026-11-30T10:00:00Z", "2026-11-30T10:30:00.123456Z"))
    offset = _raw_pod(_status("base", "2026-11-30T11:00:00+01:00", "2026-11-30T11:30:00.123456+01:00"))
    expected = (T0.timestamp(), T0.timestamp() + 1800.123456)
    assert pod_run_window(zulu) == pytest.approx(expected)
    assert pod_run_window(offset) == pytest.approx(expected)


def test_a_naive_datetime_is_read_as_utc() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_run_window

    naive = T0.replace(tzinfo=None)
    window = pod_run_window(_raw_pod(_status("base", naive, naive + timedelta(seconds=90))))
    assert window == (T0.timestamp(), T0.timestamp() + 90)


def test_a_naive_iso_string_is_read_as_utc_like_a_naive_datetime() -> None:
    import os
    import time

    from airflow_gpu_dag.kubernetes.usage import pod_run_window

    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"  # a worker whose local time is not UTC
    time.tzset()
    try:
        window = pod_run_window(_raw_pod(_status("base", "2026-11-30T10:00:00", "2026-11-30T10:01:00")))
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
    assert window == (T0.timestamp(), T0.timestamp() + 60)


def test_an_unreadable_container_start_falls_back_to_the_pods_start_time() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_run_window

    pod = _raw_pod(_status("base", "not a time", T0 + timedelta(minutes=20)), start_time=T0)
    assert pod_run_window(pod) == (T0.timestamp(), T0.timestamp() + 1200)
    # without a pod start time either there is nothing to charge from
    assert pod_run_window(_raw_pod(_status("base", "", T0))) is None


def test_a_container_that_is_only_waiting_never_ran_even_if_the_pod_started() -> None:
    """Image pull failures leave the container waiting: no GPU time, whatever ``status.startTime`` says."""
    from airflow_gpu_dag.kubernetes.usage import pod_run_window, pod_usage_record

    waiting = SimpleNamespace(name="base", state=SimpleNamespace(terminated=None, running=None, waiting=1))
    pod = _raw_pod(waiting, start_time=T0, phase="Pending")
    assert pod_run_window(pod) is None
    assert pod_usage_record(pod, gpus=8, dag_id="d", run_id="r", task_id="t") is None


def test_a_clock_skew_never_gives_negative_gpu_time() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_run_window, pod_usage_record

    ended_before = _raw_pod(_status("base", T0, T0 - timedelta(minutes=3)))
    assert pod_run_window(ended_before) == (T0.timestamp(), T0.timestamp())
    running = _raw_pod(_status("base", T0, running=True), phase="Running")
    record = pod_usage_record(running, gpus=4, dag_id="d", run_id="r", task_id="t", now=T0.timestamp() - 60)
    assert record is not None and record.gpu_seconds == 0


def test_a_terminated_container_without_a_finish_time_is_charged_until_now() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_run_window

    pod = _raw_pod(_status("base", T0, None))
    assert pod_run_window(pod, now=T0.timestamp() + 42) == (T0.timestamp(), T0.timestamp() + 42)


@pytest.mark.parametrize("gpus", [0, -1])
def test_a_pod_without_gpus_gives_no_record(gpus: int) -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_usage_record

    pod = finished_pod(T0, T0 + timedelta(hours=1))
    assert pod_usage_record(pod, gpus=gpus, dag_id="d", run_id="r", task_id="t") is None


def test_the_record_keeps_the_task_instance_and_pool_and_names_a_pod_without_metadata() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_usage_record

    record = pod_usage_record(
        finished_pod(T0, T0 + timedelta(minutes=1), "Failed"),
        gpus=2,
        dag_id="d",
        run_id="r",
        task_id="t",
        map_index=3,
        try_number=2,
        pool="gpu_a100",
    )
    assert record is not None
    assert (record.dag_id, record.run_id, record.task_id, record.map_index, record.try_number) == (
        "d",
        "r",
        "t",
        3,
        2,
    )
    assert (record.pool, record.devices, record.outcome, record.extra) == (
        "gpu_a100",
        (0, 1),
        "failed",
        {"source": "pod"},
    )
    bare = _raw_pod(_status("base", T0, T0 + timedelta(seconds=1)), phase=None)
    bare.metadata, bare.spec = None, None
    anonymous = pod_usage_record(bare, gpus=1, dag_id=None, run_id=None, task_id=None)
    assert anonymous is not None
    assert (anonymous.lease_id, anonymous.outcome, anonymous.host) == ("pod:default/?:", "unknown", None)


# -- charge_finished_pod ----------------------------------------------------------------------------------
@pytest.fixture
def pod_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This host's usage ledger, empty, in ``tmp_path`` (no shared SQL ledger)."""
    path = tmp_path / "usage.jsonl"
    monkeypatch.delenv("AIRFLOW__GPU_DAG__BUDGET_CONN_ID", raising=False)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(path))
    return path


def _charged(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_finished_pod_is_charged_with_the_task_instance_of_the_context(pod_ledger: Path) -> None:
    from airflow_gpu_dag.kubernetes.usage import charge_finished_pod

    ti = SimpleNamespace(dag_id="d", run_id="manual__x", task_id="train", map_index=2, try_number=3)
    pod = finished_pod(T0, T0 + timedelta(minutes=30))
    assert charge_finished_pod(pod, gpus=4, context={"ti": ti}, pool="gpu") is True
    (line,) = _charged(pod_ledger)
    assert (line["dag_id"], line["run_id"], line["task_id"], line["map_index"], line["try_number"]) == (
        "d",
        "manual__x",
        "train",
        2,
        3,
    )
    assert line["gpu_seconds"] == 4 * 1800 and line["pool"] == "gpu"


def test_a_pod_charged_twice_is_recorded_once(pod_ledger: Path) -> None:
    """``on_kill`` and ``cleanup`` can both charge one pod: the ledger keeps one record per pod uid."""
    from airflow_gpu_dag.kubernetes.usage import charge_finished_pod

    pod = finished_pod(T0, T0 + timedelta(minutes=30))
    for _ in range(2):
        charge_finished_pod(pod, gpus=1, context={}, pool=None)
    assert len(_charged(pod_ledger)) == 1


def test_without_a_task_instance_the_pods_labels_name_the_run(pod_ledger: Path) -> None:
    from airflow_gpu_dag.kubernetes.usage import charge_finished_pod

    pod = finished_pod(T0, T0 + timedelta(minutes=1))
    pod.metadata.labels = {"dag_id": "d", "run_id": "r7", "task_id": "t"}
    assert charge_finished_pod(pod, gpus=1, context=None, pool=None) is True
    (line,) = _charged(pod_ledger)
    assert (line["dag_id"], line["run_id"], line["task_id"], line["map_index"]) == ("d", "r7", "t", -1)


def test_a_stale_pending_snapshot_is_read_again_before_charging(pod_ledger: Path) -> None:
    """The operator's pod can be the one it created (Pending): hours of GPU time would be charged as none."""
    from airflow_gpu_dag.kubernetes.usage import charge_finished_pod

    fresh = finished_pod(T0, T0 + timedelta(hours=2))
    reread = mock.Mock(return_value=fresh)
    stale = finished_pod(None, None, "Pending")
    assert charge_finished_pod(stale, gpus=8, context={}, pool=None, reread=reread) is True
    reread.assert_called_once_with(stale)
    assert _charged(pod_ledger)[0]["gpu_seconds"] == 8 * 7200


def test_a_pod_that_shows_its_container_ended_is_not_read_again(pod_ledger: Path) -> None:
    from airflow_gpu_dag.kubernetes.usage import charge_finished_pod

    reread = mock.Mock(side_effect=AssertionError("read again"))
    assert charge_finished_pod(
        finished_pod(T0, T0 + timedelta(seconds=5)), gpus=1, context={}, pool=None, reread=reread
    )
    reread.assert_not_called()


def test_charging_never_raises_when_reading_again_or_the_ledger_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.kubernetes.usage import charge_finished_pod

    monkeypatch.delenv("AIRFLOW__GPU_DAG__BUDGET_CONN_ID", raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(blocker / "usage.jsonl"))  # under a file
    broken = mock.Mock(side_effect=RuntimeError("api-server gone"))
    stale = finished_pod(None, None, "Pending")
    assert charge_finished_pod(stale, gpus=1, context={}, pool=None, reread=broken) is False
    assert (
        charge_finished_pod(finished_pod(T0, T0 + timedelta(seconds=5)), gpus=1, context={}, pool=None)
        is False
    )
    weird_ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=mock.Mock(), try_number=1)
    assert charge_finished_pod(finished_pod(T0, T0), gpus="x", context={"ti": weird_ti}, pool=None) is False  # type: ignore[arg-type]


def test_a_map_index_that_is_not_an_int_is_charged_as_unmapped(pod_ledger: Path) -> None:
    from airflow_gpu_dag.kubernetes.usage import charge_finished_pod

    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=mock.Mock(), try_number=1)
    assert charge_finished_pod(
        finished_pod(T0, T0 + timedelta(seconds=9)), gpus=1, context={"ti": ti}, pool=None
    )
    assert _charged(pod_ledger)[0]["map_index"] == -1
