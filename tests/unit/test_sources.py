"""Capacity sources (static, file, NVML, Kubernetes, Prometheus) and the fault ladder."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes.client import (
    V1Container,
    V1Node,
    V1NodeCondition,
    V1NodeList,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodList,
    V1PodSpec,
    V1ResourceRequirements,
)

from airflow_gpu_dag.watermark.config import PoolSpec, SourceSpec
from airflow_gpu_dag.watermark.sources import (
    CapacityReading,
    CapacityTracker,
    FileSource,
    KubernetesSource,
    NvmlSource,
    PrometheusSource,
    SourceError,
    StaticSource,
    build_source,
)
from tests.unit.test_rest_deadline import TrickleServer

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _own_lease_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nvml source reads the host's lease table: give every test an empty one of its own."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "leases"))


# -- static / file --------------------------------------------------------------------------------
def test_static_source_reports_its_count() -> None:
    assert StaticSource(8).read() == CapacityReading(8, "static 8")


def test_file_source_reads_int_and_json(tmp_path: Path) -> None:
    path = tmp_path / "gpus"
    path.write_text("6\n")
    assert FileSource(str(path)).read().gpus == 6
    path.write_text('{"gpus": 3}')
    assert FileSource(str(path)).read().gpus == 3


@pytest.mark.parametrize("content", ["", "many", '{"count": 2}', "-1"])
def test_file_source_rejects_garbage(tmp_path: Path, content: str) -> None:
    path = tmp_path / "gpus"
    path.write_text(content)
    with pytest.raises(SourceError, match="gpus"):
        FileSource(str(path)).read()


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


# -- NVML -----------------------------------------------------------------------------------------
class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """The pynvml functions the source uses, over a list of fake GPUs."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self, gpus: list[dict[str, Any]], init_fails: bool = False) -> None:
        self.gpus = gpus
        self.init_fails = init_fails
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        gpu = self.gpus[index]
        if gpu.get("lost"):
            raise FakeNvmlError("GPU is lost")
        return gpu

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(free=handle["free_mib"] * MIB, total=80 * 1024 * MIB)

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle["util"], memory=0)

    def nvmlDeviceGetTotalEccErrors(self, handle: dict[str, Any], kind: int, counter: int) -> int:
        if "ecc" not in handle:
            raise FakeNvmlError("Not Supported")
        return int(handle["ecc"])


def test_nvml_counts_healthy_gpus_within_thresholds() -> None:
    nvml = FakeNvml(
        [
            {"free_mib": 80000, "util": 0},
            {"free_mib": 80000, "util": 95},  # busy
            {"free_mib": 1000, "util": 0},  # memory taken
            {"free_mib": 80000, "util": 0, "lost": True},  # fell off the bus
            {"free_mib": 80000, "util": 0, "ecc": 3},  # uncorrected ECC errors
            {"free_mib": 40960, "util": 10, "ecc": 0},  # exactly at the thresholds
        ]
    )
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml).read()
    assert reading.gpus == 2
    assert "gpu1 util 95% > 10%" in reading.detail
    assert "gpu2 free 1000MiB" in reading.detail
    assert "gpu3 unhealthy (GPU is lost)" in reading.detail
    assert "gpu4 unhealthy (3 uncorrected ECC" in reading.detail
    assert nvml.shutdowns == 1


def test_nvml_device_filter_and_init_failure() -> None:
    gpus = [{"free_mib": 80000, "util": 0}] * 4
    assert NvmlSource(devices=[0, 2], nvml=FakeNvml(gpus)).read().gpus == 2
    with pytest.raises(SourceError, match="NVML init failed: Driver Not Loaded"):
        NvmlSource(nvml=FakeNvml(gpus, init_fails=True)).read()
    nvml = FakeNvml(gpus)
    with pytest.raises(SourceError, match=r"devices \[7, 9\] are not on this host \(NVML sees 4 GPU"):
        NvmlSource(devices=[0, 7, 9], nvml=nvml).read()  # was "ok, 1 usable": a typo read as capacity
    assert nvml.shutdowns == 1


# -- Kubernetes -----------------------------------------------------------------------------------
def _node(name: str, gpus: str, ready: bool = True, unschedulable: bool = False) -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels={"gpu": "a100"}),
        spec=V1NodeSpec(unschedulable=unschedulable),
        status=V1NodeStatus(
            allocatable={"nvidia.com/gpu": gpus, "cpu": "64"},
            conditions=[V1NodeCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


def _pod(node: str, gpus: int, labels: dict[str, str] | None = None) -> V1Pod:
    resources = V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)})
    return V1Pod(
        metadata=V1ObjectMeta(name=f"p{gpus}", labels=labels),
        spec=V1PodSpec(node_name=node, containers=[V1Container(name="base", resources=resources)]),
    )


class FakeCoreV1:
    def __init__(self, nodes: list[V1Node], pods: list[V1Pod], fail: Exception | None = None) -> None:
        self.nodes, self.pods, self.fail = nodes, pods, fail
        self.calls: list[tuple[str, Any]] = []

    def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
        self.calls.append(("list_node", label_selector))
        if self.fail:
            raise self.fail
        return V1NodeList(items=self.nodes)

    def list_pod_for_all_namespaces(
        self, field_selector: str | None = None, _request_timeout: Any = None
    ) -> V1PodList:
        self.calls.append(("list_pod", field_selector))
        return V1PodList(items=self.pods)


def test_kubernetes_allocatable_minus_foreign_pods() -> None:
    api = FakeCoreV1(
        nodes=[
            _node("n1", "8"),
            _node("n2", "8"),
            _node("down", "8", ready=False),
            _node("cord", "8", True, True),
        ],
        pods=[
            _pod("n1", 2),  # someone else's job: not available to Airflow
            _pod(
                "n2", 4, {"kubernetes_pod_operator": "True", "dag_id": "x"}
            ),  # ours: the pool accounts for it
            _pod("down", 8),  # on a node not counted
            _pod("elsewhere", 1),
        ],
    )
    reading = KubernetesSource(label_selector="gpu=a100", api=api).read()
    assert reading.gpus == 14
    assert reading.detail == "kubernetes 14 = 16 allocatable on 2 nodes - 2 held"
    assert ("list_node", "gpu=a100") in api.calls
    assert ("list_pod", "status.phase!=Succeeded,status.phase!=Failed") in api.calls


def test_kubernetes_api_failure_is_a_source_error() -> None:
    api = FakeCoreV1([], [], fail=RuntimeError("connection refused\ntraceback"))
    with pytest.raises(SourceError, match=r"kubernetes API: RuntimeError: connection refused$"):
        KubernetesSource(api=api).read()


# -- Prometheus -----------------------------------------------------------------------------------
class _PromState:
    def __init__(self) -> None:
        self.status = 200
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.queries: list[str] = []
        self.authorization: list[str | None] = []  # the Authorization header of each query
        self.body_status = "success"
        self.page: bytes | None = None  # an HTML page answered instead of the query's JSON


@pytest.fixture
def prometheus() -> Iterator[tuple[str, _PromState]]:
    state = _PromState()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query).get("query", [""])[0]
            state.queries.append(query)
            state.authorization.append(self.headers.get("Authorization"))
            metric = query.split("{")[0]
            body = {
                "status": state.body_status,
                "data": {"resultType": "vector", "result": state.results.get(metric, [])},
            }
            payload = json.dumps(body).encode() if state.page is None else state.page
            self.send_response(state.status if url.path == "/api/v1/query" else 404)
            self.send_header("Content-Type", "application/json" if state.page is None else "text/html")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _series(host: str, gpu: str, value: float) -> dict[str, Any]:
    return {
        "metric": {"Hostname": host, "gpu": gpu, "modelName": "A100"},
        "value": [1700000000.0, str(value)],
    }


def test_prometheus_counts_gpus_from_dcgm_metrics(prometheus: tuple[str, _PromState]) -> None:
    url, state = prometheus
    state.results = {
        "DCGM_FI_DEV_FB_FREE": [
            _series("h1", "0", 80000),
            _series("h1", "1", 80000),
            _series("h1", "2", 500),  # memory taken
            _series("h2", "0", 80000),
            _series("h2", "1", 80000),  # no utilisation series: not counted
        ],
        "DCGM_FI_DEV_GPU_UTIL": [
            _series("h1", "0", 0),
            _series("h1", "1", 99),  # busy
            _series("h1", "2", 0),
            _series("h2", "0", 5),
        ],
    }
    source = PrometheusSource(url, selector='{Hostname=~"h.*"}', min_free_memory=40960, max_utilization=10)
    reading = source.read()
    assert reading == CapacityReading(2, "prometheus 2/5 usable")
    assert state.queries == ['DCGM_FI_DEV_FB_FREE{Hostname=~"h.*"}', 'DCGM_FI_DEV_GPU_UTIL{Hostname=~"h.*"}']


def test_prometheus_failures(prometheus: tuple[str, _PromState]) -> None:
    url, state = prometheus
    with pytest.raises(SourceError, match="no DCGM_FI_DEV_FB_FREE series"):
        PrometheusSource(url).read()
    state.status = 503
    with pytest.raises(SourceError, match="HTTPStatusError"):
        PrometheusSource(url).read()
    state.status, state.body_status = 200, "error"
    with pytest.raises(SourceError, match="status 'error'"):
        PrometheusSource(url).read()
    with pytest.raises(SourceError, match="ConnectError"):
        PrometheusSource("http://127.0.0.1:9", timeout=2).read()
    with pytest.raises(ValueError, match="selector"):
        PrometheusSource(url, selector="Hostname=h1")


def test_a_trickling_prometheus_fails_by_its_timeout() -> None:
    # before: each query waited for as long as the server kept sending a byte now and then
    with TrickleServer() as server:
        started = time.monotonic()
        with pytest.raises(SourceError, match="prometheus query DCGM_FI_DEV_FB_FREE: ReadTimeout"):
            PrometheusSource(server.url, timeout=1.0).read()
        assert time.monotonic() - started < 1.0 + 3.0
        assert server.wait_closed()


def test_a_trickling_prometheus_ends_its_read_within_the_source_timeout() -> None:
    # the tracker's worker thread ends with the read: the next tick reads again instead of finding it hung
    spec = PoolSpec("gpu", SourceSpec("prometheus", {}), floor=1, stale_intervals=0, source_timeout=10.0)
    with TrickleServer() as server:
        tracker = CapacityTracker(spec, PrometheusSource(server.url, timeout=1.0))
        started = time.monotonic()
        first = tracker.read()
        assert time.monotonic() - started < 1.0 + 3.0
        assert first.status == "floor" and "ReadTimeout" in first.detail
        second = tracker.read()
        assert "ReadTimeout" in second.detail and "still hung" not in second.detail


def test_a_prometheus_answering_a_login_page_says_what_came_back(prometheus: tuple[str, _PromState]) -> None:
    url, state = prometheus
    state.page = b"<html><title>Sign in</title><p>token: abc-SECRET</p></html>"
    with pytest.raises(SourceError) as err:
        PrometheusSource(url).read()
    message = str(err.value)
    assert "not JSON (HTTP 200, text/html): <html><title>Sign in</title>" in message
    assert "SECRET" not in message


@pytest.mark.parametrize("timeout", [None, 0, -1.0, float("inf"), True])
def test_sources_refuse_a_timeout_that_is_no_limit(timeout: Any) -> None:
    with pytest.raises(ValueError, match="prometheus timeout must be seconds > 0"):
        PrometheusSource("http://p", timeout=timeout)
    with pytest.raises(ValueError, match="kubernetes timeout must be seconds > 0"):
        KubernetesSource(api=FakeCoreV1([], []), timeout=timeout)


def test_the_kubernetes_requests_share_the_sources_timeout() -> None:
    class SlowNodes(FakeCoreV1):
        def __init__(self, delay: float) -> None:
            super().__init__([_node("n1", "8")], [])
            self.delay = delay
            self.timeouts: list[float] = []

        def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
            self.timeouts.append(_request_timeout)
            time.sleep(self.delay)
            return super().list_node(label_selector, _request_timeout)

        def list_pod_for_all_namespaces(
            self, field_selector: str | None = None, _request_timeout: Any = None
        ) -> V1PodList:
            self.timeouts.append(_request_timeout)
            return super().list_pod_for_all_namespaces(field_selector, _request_timeout)

    api = SlowNodes(delay=0.3)
    assert KubernetesSource(api=api, timeout=2.0).read().gpus == 8
    first, second = api.timeouts
    assert 1.5 < first <= 2.0 and second <= first - 0.3  # the second gets what the first left
    api = SlowNodes(delay=0.6)
    with pytest.raises(SourceError, match=r"kubernetes API: no complete answer within 0.5s"):
        KubernetesSource(api=api, timeout=0.5).read()
    assert len(api.timeouts) == 1  # no second request once the time is spent


# -- build_source ---------------------------------------------------------------------------------
def test_build_source_from_spec(tmp_path: Path) -> None:
    assert isinstance(build_source(SourceSpec("static", {"gpus": 2})), StaticSource)
    assert isinstance(build_source(SourceSpec("file", {"path": str(tmp_path)})), FileSource)
    nvml = build_source(SourceSpec("nvml", {"min_free_memory": 1024, "max_utilization": 5}))
    assert isinstance(nvml, NvmlSource) and nvml.min_free_mib == 1024
    with pytest.raises(ValueError, match="bad options"):
        build_source(SourceSpec("prometheus", {"url": "http://x", "bogus": 1}))


# -- fault ladder ---------------------------------------------------------------------------------
class FlakySource:
    kind = "fake"

    def __init__(self) -> None:
        self.value: int | Exception = 4

    def read(self) -> CapacityReading:
        if isinstance(self.value, Exception):
            raise self.value
        return CapacityReading(self.value, f"fake {self.value}")


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


def test_fault_ladder_without_last_good_goes_to_floor_and_survives_any_exception() -> None:
    source = FlakySource()
    source.value = ZeroDivisionError("bug in a source")
    tracker = CapacityTracker(PoolSpec("gpu", SourceSpec("static", {"gpus": 0}), floor=0), source)
    result = tracker.read()
    assert (result.gpus, result.status) == (0, "floor")
    assert "ZeroDivisionError: bug in a source" in result.detail


def test_fault_ladder_restored_state_continues_counting() -> None:
    source = FlakySource()
    source.value = SourceError("down")
    tracker = CapacityTracker(
        PoolSpec("gpu", SourceSpec("static", {"gpus": 0}), floor=0, stale_intervals=3), source
    )
    tracker.restore(last_good=6, failures=2)
    assert (tracker.read().gpus, tracker.failures) == (6, 3)
    assert tracker.read().status == "floor"


class HangingSource:
    kind = "fake"

    def __init__(self) -> None:
        self.release = threading.Event()

    def read(self) -> CapacityReading:
        self.release.wait(10)
        return CapacityReading(4, "late")


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


@pytest.mark.parametrize("value", [-1, 2.5, True, None])
def test_an_invalid_count_is_a_failure(value: Any) -> None:
    class Bad:
        kind = "fake"

        def read(self) -> CapacityReading:
            return CapacityReading(value, "bad")

    tracker = CapacityTracker(PoolSpec("gpu", SourceSpec("static", {"gpus": 0}), floor=2), Bad())
    result = tracker.read()
    assert (result.gpus, result.status) == (2, "floor") and "invalid GPU count" in result.detail
