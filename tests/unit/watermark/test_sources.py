"""Capacity sources (static, file, NVML, Kubernetes, Prometheus) and the fault ladder."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import (
    V1Node,
    V1NodeCondition,
    V1NodeList,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodList,
    V1PodSpec,
)

from airflow_gpu_dag.watermark.config import PoolSpec, SourceSpec
from airflow_gpu_dag.watermark.kubernetes_source import KubernetesSource
from airflow_gpu_dag.watermark.own_gpus import RunningTaskGpus
from airflow_gpu_dag.watermark.prometheus_source import PrometheusSource
from airflow_gpu_dag.watermark.sources import (
    CapacityReading,
    CapacityTracker,
    FileSource,
    NvmlSource,
    SourceError,
    StaticSource,
    build_source,
)
from tests.unit.watermark.conftest import _DcgmState, dcgm_series, gpu_container


# -- fault ladder ---------------------------------------------------------------------------------
class FlakySource:
    kind = "fake"

    def __init__(self) -> None:
        self.value: int | Exception = 4

    def read(self) -> CapacityReading:
        if isinstance(self.value, Exception):
            raise self.value
        return CapacityReading(self.value, f"fake {self.value}")


class HangingSource:
    kind = "fake"

    def __init__(self) -> None:
        self.release = threading.Event()

    def read(self) -> CapacityReading:
        self.release.wait(10)
        return CapacityReading(4, "late")


# -- static / file --------------------------------------------------------------------------------
@pytest.mark.usefixtures("_own_lease_dir")
def test_static_source_reports_its_count() -> None:
    assert StaticSource(8).read() == CapacityReading(8, "static 8")


@pytest.mark.usefixtures("_own_lease_dir")
def test_file_source_reads_int_and_json(tmp_path: Path) -> None:
    path = tmp_path / "gpus"
    path.write_text("6\n")
    assert FileSource(str(path)).read().gpus == 6
    path.write_text('{"gpus": 3}')
    assert FileSource(str(path)).read().gpus == 3


@pytest.mark.usefixtures("_own_lease_dir")
@pytest.mark.parametrize("content", ["", "many", '{"count": 2}', "-1"])
def test_file_source_rejects_garbage(tmp_path: Path, content: str) -> None:
    path = tmp_path / "gpus"
    path.write_text(content)
    with pytest.raises(SourceError, match="gpus"):
        FileSource(str(path)).read()


@pytest.mark.usefixtures("_own_lease_dir")
def test_file_source_fails_when_missing_or_stale(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="cannot read"):
        FileSource(str(tmp_path / "absent")).read()
    path = tmp_path / "gpus"
    path.write_text("4")
    old = time.time() - 600
    os.utime(path, (old, old))
    with pytest.raises(SourceError, match="older than 60s"):
        FileSource(str(path), max_age=60).read()
    assert FileSource(str(path), max_age=3600).read().gpus == 4


# -- build_source ---------------------------------------------------------------------------------
@pytest.mark.usefixtures("_own_lease_dir")
def test_build_source_from_spec(tmp_path: Path) -> None:
    assert isinstance(build_source(SourceSpec("static", {"gpus": 2})), StaticSource)
    assert isinstance(build_source(SourceSpec("file", {"path": str(tmp_path)})), FileSource)
    nvml = build_source(SourceSpec("nvml", {"min_free_memory": 1024, "max_utilization": 5}))
    assert isinstance(nvml, NvmlSource) and nvml.min_free_mib == 1024
    with pytest.raises(ValueError, match="bad options"):
        build_source(SourceSpec("prometheus", {"url": "http://x", "bogus": 1}))


@pytest.mark.usefixtures("_own_lease_dir")
def test_fault_ladder_keeps_last_good_then_falls_to_floor_then_recovers() -> None:
    source = FlakySource()
    tracker = CapacityTracker(
        PoolSpec("gpu", SourceSpec("static", {"gpus": 0}), floor=1, stale_intervals=2), source
    )
    assert (tracker.read().gpus, tracker.read().status) == (4, "ok")
    source.value = SourceError("exporter down")
    first, second, third = tracker.read(), tracker.read(), tracker.read()
    assert (first.gpus, first.status, first.failures) == (4, "stale", 1)
    assert "fake failed 1/2: exporter down; last good 4 kept" in first.detail
    assert (second.gpus, second.status) == (4, "stale")
    assert (third.gpus, third.status, third.failures) == (1, "floor", 3)
    assert "floor 1" in third.detail
    source.value = 3
    back = tracker.read()
    assert (back.gpus, back.status, back.failures) == (3, "ok", 0)


@pytest.mark.usefixtures("_own_lease_dir")
def test_fault_ladder_without_last_good_goes_to_floor_and_survives_any_exception() -> None:
    source = FlakySource()
    source.value = ZeroDivisionError("bug in a source")
    tracker = CapacityTracker(PoolSpec("gpu", SourceSpec("static", {"gpus": 0}), floor=0), source)
    result = tracker.read()
    assert (result.gpus, result.status) == (0, "floor")
    assert "ZeroDivisionError: bug in a source" in result.detail


@pytest.mark.usefixtures("_own_lease_dir")
def test_fault_ladder_restored_state_continues_counting() -> None:
    source = FlakySource()
    source.value = SourceError("down")
    tracker = CapacityTracker(
        PoolSpec("gpu", SourceSpec("static", {"gpus": 0}), floor=0, stale_intervals=3), source
    )
    tracker.restore(last_good=6, failures=2)
    assert (tracker.read().gpus, tracker.failures) == (6, 3)
    assert tracker.read().status == "floor"


@pytest.mark.usefixtures("_own_lease_dir")
def test_a_hung_source_times_out_and_counts_as_failed() -> None:
    source = HangingSource()
    spec = PoolSpec("gpu", SourceSpec("static", {"gpus": 0}), floor=0, stale_intervals=1, source_timeout=0.2)
    tracker = CapacityTracker(spec, source)
    tracker.restore(last_good=3, failures=0)
    first = tracker.read()
    assert (first.gpus, first.status) == (3, "stale") and "no answer within 0.2s" in first.detail
    second = tracker.read()  # still hung: not piled up, floor now
    assert (second.gpus, second.status) == (0, "floor") and "previous read still hung" in second.detail
    source.release.set()
    hung = tracker._hung
    assert hung is not None
    hung.join(30)  # the hung read returns (on a loaded machine that can take longer than a sleep(0.1))
    assert tracker.read().status == "ok"


@pytest.mark.usefixtures("_own_lease_dir")
@pytest.mark.parametrize("value", [-1, 2.5, True, None])
def test_an_invalid_count_is_a_failure(value: Any) -> None:
    class Bad:
        kind = "fake"

        def read(self) -> CapacityReading:
            return CapacityReading(value, "bad")

    tracker = CapacityTracker(PoolSpec("gpu", SourceSpec("static", {"gpus": 0}), floor=2), Bad())
    result = tracker.read()
    assert (result.gpus, result.status) == (2, "floor") and "invalid GPU count" in result.detail


# -- file -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("content", ["true", '{"gpus": true}', "2.5", '{"gpus": 7.9}', "Infinity"])
def test_file_source_rejects_booleans_fractions_and_infinity(tmp_path: Path, content: str) -> None:
    (tmp_path / "gpus").write_text(content)
    with pytest.raises(SourceError, match="does not hold a GPU count"):
        FileSource(str(tmp_path / "gpus")).read()


def test_file_source_integral_values_still_read(tmp_path: Path) -> None:
    for content, gpus in (("8.0", 8), ('{"gpus": "4"}', 4), (" 3\n", 3)):
        (tmp_path / "gpus").write_text(content)
        assert FileSource(str(tmp_path / "gpus")).read().gpus == gpus


def test_a_count_beyond_any_pool_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "gpus").write_text("1e20")
    spec = PoolSpec("gpu_a", SourceSpec("file", {"path": str(tmp_path / "gpus")}), floor=1)
    result = CapacityTracker(spec, FileSource(str(tmp_path / "gpus"))).read()
    assert (result.gpus, result.status) == (1, "floor")
    assert "invalid GPU count" in result.detail


def test_prometheus_counts_only_its_own_pools_running_tasks() -> None:
    running = [
        {"hostname": "h1", "pool": "gpu_a100", "pool_slots": 2, "executor_config": "{}"},
        {"hostname": "h1", "pool": "gpu_t4", "pool_slots": 1, "executor_config": "{}"},
    ]
    ours = RunningTaskGpus(list_running=lambda: running)
    assert ours.by_host() == {"h1": 3}
    assert ours.by_host("gpu_t4") == {"h1": 1} and ours.by_host("gpu_a100") == {"h1": 2}
    spec = SourceSpec("prometheus", {"url": "http://prom:9090"})

    class Client:
        def task_instances(self, pools: Any, states: Any) -> list[dict[str, Any]]:
            return running

    source: Any = build_source(spec, Client(), pool="gpu_t4")
    assert source.our_work() == {"h1": 1}


# -- Kubernetes -------------------------------------------------------------------------------------


def test_prometheus_from_an_airflow_connection(
    prometheus_dcgm: tuple[str, _DcgmState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = prometheus_dcgm
    state.results = dcgm_series([("h", 0, False, {})])
    conn = {"conn_type": "http", "host": url, "extra": {"token": "s3cret-token"}}
    monkeypatch.setenv("AIRFLOW_CONN_PROM_GPU", json.dumps(conn))
    source = build_source(SourceSpec("prometheus", {"conn_id": "prom_gpu"}), client=object())
    assert isinstance(source, PrometheusSource) and source.our_work is not None
    assert source.read().gpus == 1
    assert state.headers[-1].get("Authorization") == "Bearer s3cret-token"
    monkeypatch.setenv(
        "AIRFLOW_CONN_PROM_BASIC", json.dumps({**conn, "extra": {}, "login": "u", "password": "p"})
    )
    PrometheusSource(conn_id="prom_basic").read()
    assert state.headers[-1].get("Authorization", "").startswith("Basic ")
    with pytest.raises(ValueError, match="url or conn_id"):
        PrometheusSource()


def test_kubernetes_source_uses_the_kubernetes_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    node = V1Node(
        metadata=V1ObjectMeta(name="n1"),
        spec=V1NodeSpec(),
        status=V1NodeStatus(
            allocatable={"nvidia.com/gpu": "8"}, conditions=[V1NodeCondition(type="Ready", status="True")]
        ),
    )
    foreign = V1Pod(
        metadata=V1ObjectMeta(name="batch", labels={}),
        spec=V1PodSpec(
            node_name="n1", containers=[gpu_container("a", "1")], init_containers=[gpu_container("i", "3")]
        ),
    )
    api = SimpleNamespace(
        list_node=lambda label_selector=None, _request_timeout=None: V1NodeList(items=[node]),
        list_pod_for_all_namespaces=lambda field_selector=None, _request_timeout=None: V1PodList(
            items=[foreign]
        ),
    )
    built: list[dict[str, Any]] = []

    class FakeHook:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)
            self.core_v1_client = api

    import airflow.providers.cncf.kubernetes.hooks.kubernetes as hooks

    monkeypatch.setattr(hooks, "KubernetesHook", FakeHook)
    source = build_source(SourceSpec("kubernetes", {"kubernetes_conn_id": "k8s_gpu", "context": "prod"}))
    assert isinstance(source, KubernetesSource)
    reading = source.read()
    assert reading.gpus == 5 and built == [{"conn_id": "k8s_gpu", "cluster_context": "prod"}]
