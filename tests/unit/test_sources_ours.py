"""Capacity = healthy GPUs minus GPUs held by work that is not ours.

NVML with the real lease table: GPUs busy with our leased tasks still count, GPUs busy with a foreign
process do not (issue #12: 8 GPUs, 4 running our 1-GPU tasks, gave capacity 4 and 4 idle GPUs).
Prometheus/DCGM: busy GPUs on a host where our running task instances hold GPUs, or of our pods,
still count. Kubernetes: init containers, quantities, and the client from ``KubernetesHook``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
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

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.gpu.lease_view import held_devices
from airflow_gpu_dag.gpu.process import HostIdentity
from airflow_gpu_dag.watermark.config import SourceSpec
from airflow_gpu_dag.watermark.kubernetes_source import KubernetesSource, pod_request
from airflow_gpu_dag.watermark.nvml_source import NvmlSource
from airflow_gpu_dag.watermark.own_gpus import RunningTaskGpus, gpus_of_task_instance, normalize_host
from airflow_gpu_dag.watermark.prometheus_source import PrometheusSource
from airflow_gpu_dag.watermark.sources import build_source

MIB = 1024 * 1024
N = 8


class FakeNvml:
    """pynvml over fake GPUs that know their UUID and the processes running on them."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self, count: int = N, list_processes: bool = True) -> None:
        self.gpus = [
            {"index": i, "uuid": f"GPU-{i:04d}", "free_mib": 80000, "util": 0, "procs": []}
            for i in range(count)
        ]
        self.list_processes = list_processes

    def busy(self, index: int, pid: int, used_mib: int = 70000, util: int = 97) -> None:
        gpu = self.gpus[index]
        gpu["procs"].append(SimpleNamespace(pid=pid, usedGpuMemory=used_mib * MIB))
        gpu["free_mib"] -= used_mib
        gpu["util"] = max(gpu["util"], util)

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> bytes:
        return handle["uuid"].encode()

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(free=handle["free_mib"] * MIB, total=80 * 1024 * MIB)

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle["util"], memory=0)

    def nvmlDeviceGetTotalEccErrors(self, handle: dict[str, Any], kind: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: dict[str, Any]) -> list[SimpleNamespace]:
        if not self.list_processes:
            raise RuntimeError("Not Supported")
        return list(handle["procs"])


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Real processes standing for CUDA loads (ours once registered with a lease, else foreign)."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(10)


def _load(started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "120"])
    started.append(proc)
    return proc


def _manager(lease_dir: Path) -> LeaseManager:
    inventory = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i:04d}") for i in range(N)))
    return LeaseManager(LeaseSettings(lease_dir=lease_dir, poll_s=0.1), inventory)


@pytest.mark.parametrize(("k", "j"), [(4, 0), (4, 2), (0, 3), (8, 0), (3, 5)])
def test_nvml_counts_gpus_of_our_leased_tasks_and_not_foreign_ones(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]], k: int, j: int
) -> None:
    """k GPUs busy with our leased tasks, j with a foreign process: capacity N - j."""
    manager = _manager(tmp_path)
    nvml = FakeNvml()
    leases = [manager.acquire(GpuRequest(1), LeaseOwner("train", "r1", f"t{i}")) for i in range(k)]
    for lease in leases:
        proc = _load(workers)
        lease.register_process(proc.pid)
        nvml.busy(lease.devices[0], proc.pid)
    free = [i for i in range(N) if i not in {lease.devices[0] for lease in leases}]
    for index in free[:j]:
        nvml.busy(index, _load(workers).pid)
    reading = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, lease_dir=str(tmp_path)).read()
    assert reading.gpus == N - j, reading.detail
    if k:
        assert f"{k} of them held by our tasks" in reading.detail
    # without the lease table every busy GPU is excluded: the double counting of issue #12
    blind = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, leases=False).read()
    assert blind.gpus == N - j - k


def test_a_child_of_the_lease_holder_is_ours(tmp_path: Path, workers: list[subprocess.Popen[bytes]]) -> None:
    """A CUDA process started by the task (a child of the lease holder, here this test process)
    counts as the lease's even when it was never registered."""
    manager = _manager(tmp_path)
    nvml = FakeNvml()
    lease = manager.acquire(GpuRequest(1), LeaseOwner("d", "r", "t"))
    nvml.busy(lease.devices[0], _load(workers).pid)
    source = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, lease_dir=str(tmp_path))
    assert source.read().gpus == N


def test_a_foreign_process_on_a_leased_gpu_is_judged_without_our_memory(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    manager = _manager(tmp_path)
    ours = manager.acquire(GpuRequest(1), LeaseOwner("d", "r", "ours"))
    worker = _load(workers)
    ours.register_process(worker.pid)
    stranger = subprocess.Popen(  # not a child of this process: start it through a shell that exits
        ["/bin/sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    foreign_pid = int(stranger.communicate(timeout=30)[0].decode().strip())
    try:
        nvml = FakeNvml()
        index = ours.devices[0]
        nvml.busy(index, worker.pid, used_mib=30000)
        nvml.busy(index, foreign_pid, used_mib=5000, util=50)  # small: room left without our memory
        source = NvmlSource(min_free_memory=40960, max_utilization=100, nvml=nvml, lease_dir=str(tmp_path))
        assert source.read().gpus == N
        nvml.busy(index, foreign_pid, used_mib=40000)  # now the stranger alone leaves too little
        reading = source.read()
        assert reading.gpus == N - 1
        assert f"foreign pid {foreign_pid} on a leased GPU" in reading.detail
    finally:
        os.kill(foreign_pid, 9)


def test_stale_leases_do_not_count_and_other_namespaces_are_trusted(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    holder = _load(workers)
    manager = _manager(tmp_path)
    lease = manager.try_acquire(GpuRequest(1), LeaseOwner("d", "r", "t"), holder_pid=holder.pid)
    assert lease is not None
    nvml = FakeNvml()
    stranger = _load(workers)  # a child of this test process, not of the lease's holder
    nvml.busy(lease.devices[0], stranger.pid)
    source = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml, lease_dir=str(tmp_path))
    assert source.read().gpus == N - 1  # the stranger is not the lease's: foreign
    unseen = FakeNvml()
    unseen.busy(lease.devices[0], 999_999)  # a pid this process cannot see (a host pid in a container)
    assert NvmlSource(min_free_memory=40960, nvml=unseen, lease_dir=str(tmp_path)).read().gpus == N
    other = HostIdentity("another-host", None, "other-ns")
    assert [d.same_pidns for d in held_devices(tmp_path, identity=other)] == [False]
    nvml_blind = FakeNvml(list_processes=False)
    nvml_blind.busy(lease.devices[0], stranger.pid)
    blind = NvmlSource(min_free_memory=40960, max_utilization=10, nvml=nvml_blind, lease_dir=str(tmp_path))
    assert blind.read().gpus == N  # processes cannot be listed: the lease is trusted
    holder.kill()
    holder.wait(10)
    assert held_devices(tmp_path) == []  # holder gone: stale, not ours any more
    assert source.read().gpus == N - 1


def test_an_unreadable_lease_table_is_said_and_busy_gpus_are_excluded(tmp_path: Path) -> None:
    (tmp_path / "leases.json").write_text("{not json")
    nvml = FakeNvml()
    nvml.busy(0, 4242)
    reading = NvmlSource(min_free_memory=40960, nvml=nvml, lease_dir=str(tmp_path)).read()
    assert reading.gpus == N - 1 and "lease table unreadable" in reading.detail


# -- Prometheus / DCGM ------------------------------------------------------------------------------
class _Prom:
    def __init__(self) -> None:
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.headers: list[dict[str, str]] = []


@pytest.fixture
def prometheus() -> Iterator[tuple[str, _Prom]]:
    state = _Prom()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.headers.append(dict(self.headers))
            query = parse_qs(urlparse(self.path).query).get("query", [""])[0]
            result = state.results.get(query.split("{")[0], [])
            payload = json.dumps({"status": "success", "data": {"result": result}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
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


def _dcgm(gpus: list[tuple[str, int, bool, dict[str, str]]]) -> dict[str, list[dict[str, Any]]]:
    """DCGM series for (host, gpu, busy, extra labels)."""
    free, util = [], []
    for host, gpu, busy, extra in gpus:
        labels = {"Hostname": host, "gpu": str(gpu), "UUID": f"{host}-{gpu}", **extra}
        free.append({"metric": labels, "value": [0, "1000" if busy else "80000"]})
        util.append({"metric": labels, "value": [0, "99" if busy else "0"]})
    return {"DCGM_FI_DEV_FB_FREE": free, "DCGM_FI_DEV_GPU_UTIL": util}


def test_prometheus_counts_gpus_busy_with_our_running_tasks(prometheus: tuple[str, _Prom]) -> None:
    url, state = prometheus
    # h1: 4 GPUs, 3 busy (2 with our tasks, 1 foreign); h2: 4 GPUs, 1 busy (foreign)
    state.results = _dcgm(
        [("gpu-h1", i, i < 3, {}) for i in range(4)] + [("gpu-h2", i, i == 0, {}) for i in range(4)]
    )
    running = [
        {"hostname": "gpu-h1.cluster.local", "pool": "gpu_default", "pool_slots": 1, "executor_config": "{}"},
        {
            "hostname": "GPU-H1",
            "pool": "other",
            "pool_slots": 1,
            "executor_config": str({"gpu_dag": {"gpus": 1, "duration_s": 60.0}}),
        },
        {"hostname": "cpu-box", "pool": "default_pool", "pool_slots": 1, "executor_config": "{}"},
    ]
    ours = RunningTaskGpus(list_running=lambda: running)
    assert ours.by_host() == {"gpu-h1": 2}
    source = PrometheusSource(url, min_free_memory=40960, max_utilization=10, our_work=ours.by_host)
    reading = source.read()
    assert reading.gpus == 8 - 2, reading.detail  # N - j: the two foreign busy GPUs
    assert "2 of them busy with our tasks" in reading.detail
    assert PrometheusSource(url, min_free_memory=40960, max_utilization=10).read().gpus == 4


def test_prometheus_counts_gpus_of_our_pods(prometheus: tuple[str, _Prom]) -> None:
    url, state = prometheus
    state.results = _dcgm(
        [
            ("n1", 0, True, {"pod": "train-abc", "namespace": "airflow"}),
            ("n1", 1, True, {"pod": "llm-finetune-x1", "namespace": "ml"}),
            ("n1", 2, True, {"pod": "jupyter-bob", "namespace": "users"}),
            ("n1", 3, False, {}),
        ]
    )
    source = PrometheusSource(
        url,
        min_free_memory=40960,
        max_utilization=10,
        airflow_namespaces=["airflow"],
        airflow_pod_pattern=r"^llm-",
        our_work=lambda: {"n1": 1},  # the same task seen by host: not counted twice
    )
    assert source.read().gpus == 3


def test_prometheus_survives_a_failing_rest_read(prometheus: tuple[str, _Prom]) -> None:
    url, state = prometheus
    state.results = _dcgm([("h", 0, True, {}), ("h", 1, False, {})])

    def broken() -> dict[str, int]:
        raise RuntimeError("api-server down")

    reading = PrometheusSource(url, min_free_memory=40960, our_work=broken).read()
    assert reading.gpus == 1 and "our running tasks unknown" in reading.detail


def test_prometheus_from_an_airflow_connection(
    prometheus: tuple[str, _Prom], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = prometheus
    state.results = _dcgm([("h", 0, False, {})])
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


def test_host_names_and_gpus_of_task_instances() -> None:
    assert normalize_host("GPU-A.example.com") == "gpu-a"
    assert normalize_host("gpu-a:9400") == "gpu-a"
    assert normalize_host("10.0.0.7:9400") == "10.0.0.7"
    assert normalize_host("[fe80::1]:9400") == "fe80::1"
    assert gpus_of_task_instance({"executor_config": "{'gpu_dag': {'gpus': 4}}", "pool": "x"}) == 4
    assert gpus_of_task_instance({"executor_config": "{}", "pool": "gpu_a100", "pool_slots": 2}) == 2
    assert gpus_of_task_instance({"executor_config": "garbage(", "pool": "default_pool"}) == 0


def test_running_task_gpus_are_cached_per_tick() -> None:
    calls = []
    now = [0.0]

    def listing() -> list[dict[str, Any]]:
        calls.append(1)
        return [{"hostname": "h", "pool": "gpu_default", "pool_slots": 2, "executor_config": "{}"}]

    ours = RunningTaskGpus(list_running=listing, ttl=5, clock=lambda: now[0])
    assert ours.by_host() == ours.by_host() == {"h": 2} and len(calls) == 1
    now[0] = 6
    ours.by_host()
    assert len(calls) == 2


# -- Kubernetes -------------------------------------------------------------------------------------
def _c(name: str, gpus: str | None, restart: str | None = None, limits_only: bool = False) -> V1Container:
    amounts = {"nvidia.com/gpu": gpus} if gpus is not None else {}
    resources = (
        V1ResourceRequirements(limits=amounts) if limits_only else V1ResourceRequirements(requests=amounts)
    )
    container = V1Container(name=name, resources=resources)
    container.restart_policy = restart
    return container


def test_pod_request_counts_init_containers_like_the_scheduler() -> None:
    spec = V1PodSpec(
        containers=[_c("a", "1"), _c("b", "2", limits_only=True)], init_containers=[_c("i", "4")]
    )
    assert pod_request(spec) == 4  # max(init 4, apps 1 + 2)
    spec = V1PodSpec(containers=[_c("a", "3")], init_containers=[_c("i", "2"), _c("j", None)])
    assert pod_request(spec) == 3
    sidecar = V1PodSpec(containers=[_c("a", "2")], init_containers=[_c("s", "1", "Always"), _c("i", "2")])
    assert pod_request(sidecar) == 3  # the sidecar runs next to the app (and next to init i)
    assert pod_request(V1PodSpec(containers=[_c("a", "1k")])) == 1000  # parse_quantity
    assert pod_request(V1PodSpec(containers=[_c("a", "lots")])) == 0


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
        spec=V1PodSpec(node_name="n1", containers=[_c("a", "1")], init_containers=[_c("i", "3")]),
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
