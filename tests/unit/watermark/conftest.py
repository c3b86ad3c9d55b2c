"""Shared fakes and helpers of the tests under ``tests/unit/watermark/``."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from kubernetes.client import V1Container, V1Node, V1NodeList, V1Pod, V1PodList, V1ResourceRequirements

from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseSettings
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.pool_claim.state import PoolState, parse_pool_state
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from airflow_gpu_dag.watermark.sources import (
    CapacityReading,
)

NOW = 1_800_000_000.0


class FakeRest:
    """Pools, task instances and Variables in memory, with the REST client's method names."""

    def __init__(self) -> None:
        self.pools: dict[str, dict[str, Any]] = {}
        self.tis: list[dict[str, Any]] = []
        self.variables: dict[str, str] = {}
        self.writes: list[tuple[str, int]] = []
        self.ti_error: Exception | None = None
        self.upstream: dict[str, list[str]] = {}  # task id -> upstream task ids (DAG "d")
        self.tasks_error: Exception | None = None

    def get_pool(self, name: str) -> dict[str, Any] | None:
        return dict(self.pools[name]) if name in self.pools else None

    def set_pool(
        self, name: str, slots: int, description: str, include_deferred: bool = False
    ) -> dict[str, Any]:
        self.pools[name] = {
            "name": name,
            "slots": slots,
            "description": description,
            "include_deferred": include_deferred,
        }
        self.writes.append((name, slots))
        return self.pools[name]

    def task_instances(self, pools: Any, states: Any) -> list[dict[str, Any]]:
        if self.ti_error:
            raise self.ti_error
        wanted = {None if s == "no_status" else s for s in states}
        return [t for t in self.tis if t["pool"] in set(pools) and t["state"] in wanted]

    def run_task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return [t for t in self.tis if t["dag_id"] == dag_id and t["dag_run_id"] == run_id]

    def upstream_task_ids(self, dag_id: str) -> dict[str, list[str]]:
        if self.tasks_error:
            raise self.tasks_error
        return dict(self.upstream)

    def get_variable(self, key: str) -> str | None:
        return self.variables.get(key)

    def create_variable(self, key: str, value: str, description: str = "") -> bool:
        if key in self.variables:
            return False
        self.variables[key] = value
        return True

    def put_variable(self, key: str, value: str, description: str = "") -> None:
        self.variables[key] = value


def ti(
    task_id: str,
    state: str | None,
    slots: int = 1,
    priority: int = 1,
    duration: float | None = 60.0,
    started: float | None = None,
    pool: str = "gpu",
    scheduled: float | None = None,
) -> dict[str, Any]:
    config = {"gpu_dag": {"duration_s": duration}} if duration is not None else {}
    return {
        "dag_id": "d",
        "dag_run_id": "r",
        "task_id": task_id,
        "map_index": -1,
        "state": state,
        "pool": pool,
        "pool_slots": slots,
        "priority_weight": priority,
        "executor_config": str(config),
        "logical_date": "2026-11-30T00:00:00Z",
        "start_date": datetime.fromtimestamp(started, UTC).isoformat() if started is not None else None,
        "scheduled_when": datetime.fromtimestamp(scheduled, UTC).isoformat()
        if scheduled is not None
        else None,
    }


class Source:
    kind = "fake"

    def __init__(self, value: int | Exception) -> None:
        self.value = value

    def read(self) -> CapacityReading:
        if isinstance(self.value, Exception):
            raise self.value
        return CapacityReading(self.value, f"fake {self.value}")


def controller(rest: FakeRest, source: Source, **pool: Any) -> WatermarkController:
    config = parse_config(
        {"pools": {"gpu": {"source": 0, **pool}}, "lease": {"lock_file": None, "variable": None}}
    )
    return WatermarkController(config, rest, {"gpu": source}, default_duration=60.0, clock=lambda: NOW)  # type: ignore[arg-type]


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


def _load(started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "120"])
    started.append(proc)
    return proc


def lease_manager(lease_dir: Path) -> LeaseManager:
    """A lease manager in ``lease_dir`` for :data:`N` A100s with UUIDs ``GPU-0000``..."""
    inventory = GpuInventory(tuple(GpuDevice(i, "a100", 81920, uuid=f"GPU-{i:04d}") for i in range(N)))
    return LeaseManager(LeaseSettings(lease_dir=lease_dir, poll_s=0.1), inventory)


class FailingRest(FakeRest):
    def __init__(self) -> None:
        super().__init__()
        self.failed: list[tuple[str, str, str, int, str, str | None]] = []
        self.fail_error: Exception | None = None

    def set_task_instance_state(
        self, dag_id: str, run_id: str, task_id: str, map_index: int, state: str, note: str | None = None
    ) -> list[dict[str, Any]]:
        if self.fail_error:
            raise self.fail_error
        self.failed.append((dag_id, run_id, task_id, map_index, state, note))
        for t in self.tis:
            if (t["task_id"], t["map_index"]) == (task_id, map_index):
                t["state"] = state
        return []


@pytest.fixture
def _own_lease_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nvml source reads the host's lease table: give every test an empty one of its own."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "leases"))


# -- malformed inputs (property tests) -------------------------------------------------------------
#: Hypothesis settings of the malformed-input property tests.
FUZZ_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


#: Scalars a hand-written config or a REST answer may hold where something else is expected.
FUZZ_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["30s", "2m", "-1s", "1h30m", "NaN", "inf", "8", "", "static", "strict", "💥"]),
)


#: :data:`FUZZ_SCALARS` and lists and dicts of them.
FUZZ_VALUES = st.recursive(
    FUZZ_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


#: The fields of a task instance from the REST API, each malformed in any way.
TI_FIELDS = {
    "dag_id": st.one_of(st.text(max_size=20), FUZZ_VALUES),
    "dag_run_id": FUZZ_VALUES,
    "task_id": st.one_of(st.text(max_size=30), FUZZ_VALUES),
    "map_index": FUZZ_VALUES,
    "state": st.sampled_from(["scheduled", "queued", "running", "deferred", None, "success", 7]),
    "pool": st.sampled_from(["gpu", "gpu", "other", None, 3]),
    "pool_slots": FUZZ_VALUES,
    "priority_weight": FUZZ_VALUES,
    "executor_config": st.one_of(
        FUZZ_VALUES,
        st.builds(lambda d: str({"gpu_dag": {"duration_s": d}}), FUZZ_VALUES),
        st.just("{'gpu_dag': {'duration_s': float('nan')}}"),
        st.just("__import__('os').system('false')"),
    ),
    "logical_date": FUZZ_VALUES,
    "start_date": st.one_of(FUZZ_VALUES, st.just("2026-11-30T00:00:00Z"), st.just("not a date")),
}


#: What the REST API's task-instance list may hold: task instances with any fields, and anything else.
TASK_INSTANCES = st.lists(st.one_of(st.fixed_dictionaries({}, optional=TI_FIELDS), FUZZ_VALUES), max_size=25)


def mock_rest_client(handler: Any) -> AirflowRestClient:
    """The REST client with ``handler`` answering its requests (an httpx mock transport)."""
    return AirflowRestClient("http://api", token="t", transport=httpx.MockTransport(handler))


# -- Kubernetes -----------------------------------------------------------------------------------
class FakeCoreV1:
    """The Kubernetes CoreV1Api calls the Kubernetes source makes: these nodes and pods (or ``fail`` raised
    by list_node), each call recorded."""

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


def gpu_container(
    name: str, gpus: str | None, restart: str | None = None, limits_only: bool = False
) -> V1Container:
    """A container requesting ``gpus`` nvidia.com/gpu (as a limit only with ``limits_only``); ``restart``
    is its restart policy (``Always``: a sidecar init container)."""
    amounts = {"nvidia.com/gpu": gpus} if gpus is not None else {}
    resources = (
        V1ResourceRequirements(limits=amounts) if limits_only else V1ResourceRequirements(requests=amounts)
    )
    container = V1Container(name=name, resources=resources)
    container.restart_policy = restart
    return container


# -- Prometheus -----------------------------------------------------------------------------------
@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering with ``handler`` in a thread, for the duration: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


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

    with serving(Handler) as url:
        yield url, state


# -- Prometheus with DCGM series, recording each query's headers -------------------------------
class _DcgmState:
    """What the DCGM Prometheus answers (series by metric name) and the headers of each query it got."""

    def __init__(self) -> None:
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.headers: list[dict[str, str]] = []


@pytest.fixture
def prometheus_dcgm() -> Iterator[tuple[str, _DcgmState]]:
    """A Prometheus answering every query with the DCGM series of its state (``dcgm_series``): its URL
    and the state."""
    state = _DcgmState()

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

    with serving(Handler) as url:
        yield url, state


def dcgm_series(gpus: list[tuple[str, int, bool, dict[str, str]]]) -> dict[str, list[dict[str, Any]]]:
    """DCGM series for (host, gpu, busy, extra labels)."""
    free, util = [], []
    for host, gpu, busy, extra in gpus:
        labels = {"Hostname": host, "gpu": str(gpu), "UUID": f"{host}-{gpu}", **extra}
        free.append({"metric": labels, "value": [0, "1000" if busy else "80000"]})
        util.append({"metric": labels, "value": [0, "99" if busy else "0"]})
    return {"DCGM_FI_DEV_FB_FREE": free, "DCGM_FI_DEV_GPU_UTIL": util}


# -- one 4-GPU pool ``gpu`` under a controller on a fake clock (claims, lifecycle, watchdog) ------
#: The controller's tick interval in these tests (a claim expires after 3 of them).
INTERVAL = 10.0


def claim_controller(
    rest: FakeRest,
    clock: dict[str, float],
    gpus: int = 4,
    holder: str = "me",
    lease: dict[str, Any] | None = None,
    **pool: Any,
) -> WatermarkController:
    """A controller of pool ``gpu`` (``gpus`` GPUs from a fake source, no backfill) whose clock is
    ``clock["t"]``, holding its claim as ``holder``."""
    config = parse_config(
        {
            "interval": INTERVAL,
            "pools": {"gpu": {"source": 0, "backfill": False, **pool}},
            "lease": lease or {"lock_file": None, "variable": None},
        }
    )
    return WatermarkController(
        config,
        rest,  # type: ignore[arg-type]
        {"gpu": Source(gpus)},  # type: ignore[dict-item]
        default_duration=60.0,
        clock=lambda: clock["t"],
        holder=holder,
    )


def reserving(rest: FakeRest) -> None:
    """A 4-slot task waits behind a running 1-slot task: with no backfill the pool is held at 0."""
    rest.tis = [ti("hold", "running", started=NOW - 10, duration=100), ti("wide", "scheduled", slots=4)]


def pool_state(rest: FakeRest) -> PoolState:
    """The claim state the controller wrote into pool ``gpu``'s description."""
    found = parse_pool_state(rest.pools["gpu"]["description"])
    assert found is not None, rest.pools["gpu"]
    return found
