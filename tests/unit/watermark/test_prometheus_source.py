"""Tests of ``airflow_gpu_dag.watermark.prometheus_source``."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.watermark import prometheus_source
from airflow_gpu_dag.watermark.config import SourceSpec
from airflow_gpu_dag.watermark.own_gpus import RunningTaskGpus
from airflow_gpu_dag.watermark.sources import CapacityReading, KubernetesSource, PrometheusSource, SourceError
from tests.unit.hooks.conftest import TrickleServer
from tests.unit.watermark.conftest import FakeCoreV1, _DcgmState, _PromState, dcgm_series


def _series(host: str, gpu: str, value: float) -> dict[str, Any]:
    return {
        "metric": {"Hostname": host, "gpu": gpu, "modelName": "A100"},
        "value": [1700000000.0, str(value)],
    }


@pytest.mark.usefixtures("_own_lease_dir")
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


@pytest.mark.usefixtures("_own_lease_dir")
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


@pytest.mark.usefixtures("_own_lease_dir")
def test_a_trickling_prometheus_fails_by_its_timeout() -> None:
    # before: each query waited for as long as the server kept sending a byte now and then
    with TrickleServer() as server:
        started = time.monotonic()
        with pytest.raises(SourceError, match="prometheus query DCGM_FI_DEV_FB_FREE: ReadTimeout"):
            PrometheusSource(server.url, timeout=1.0).read()
        assert time.monotonic() - started < 1.0 + 3.0
        assert server.wait_closed()


@pytest.mark.usefixtures("_own_lease_dir")
def test_a_prometheus_answering_a_login_page_says_what_came_back(prometheus: tuple[str, _PromState]) -> None:
    url, state = prometheus
    state.page = b"<html><title>Sign in</title><p>token: abc-SECRET</p></html>"
    with pytest.raises(SourceError) as err:
        PrometheusSource(url).read()
    message = str(err.value)
    assert "not JSON (HTTP 200, text/html): <html><title>Sign in</title>" in message
    assert "SECRET" not in message


@pytest.mark.usefixtures("_own_lease_dir")
@pytest.mark.parametrize("timeout", [None, 0, -1.0, float("inf"), True])
def test_sources_refuse_a_timeout_that_is_no_limit(timeout: Any) -> None:
    with pytest.raises(ValueError, match="prometheus timeout must be seconds > 0"):
        PrometheusSource("http://p", timeout=timeout)
    with pytest.raises(ValueError, match="kubernetes timeout must be seconds > 0"):
        KubernetesSource(api=FakeCoreV1([], []), timeout=timeout)


# -- Prometheus -----------------------------------------------------------------------------------------
def _gpu0_series(host: str, value: float) -> dict[str, Any]:
    return {"metric": {"Hostname": host, "gpu": "0"}, "value": [1.7e9, str(value)]}


_OK = {
    "status": "success",
    "data": {"resultType": "vector", "result": [_gpu0_series("h1", 0)]},
}


class _FakeGet:
    """Stands in for ``prometheus_source.http_get``: answers ``answer(url, headers, auth)``, records calls."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self, url: str, params: Any = None, timeout: Any = None, headers: Any = None, auth: Any = None
    ):
        self.calls.append({"url": url, "headers": dict(headers or {}), "auth": auth})
        status, body = self.answer(url, dict(headers or {}), auth)
        request = httpx.Request("GET", url, params=params)
        if isinstance(body, str):
            return httpx.Response(status, text=body, request=request)
        return httpx.Response(status, json=body, request=request)


def _conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "http", **fields}))


def test_prometheus_connection_host_credentials_stay_out_of_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection whose host carries ``user:password@`` (the JSON form) is treated like such a ``url``:
    sent as basic auth, never in the failure written to the log and the pool description."""
    _conn(monkeypatch, "prom_userinfo", host="http://admin:hunter22secret@prom.example:9090")
    fake = _FakeGet(lambda url, headers, auth: (502, "bad gateway"))
    monkeypatch.setattr(prometheus_source, "http_get", fake)
    source = PrometheusSource(conn_id="prom_userinfo")
    with pytest.raises(SourceError) as caught:
        source.read()
    assert "hunter22secret" not in str(caught.value) and "502" in str(caught.value)
    assert "hunter22secret" not in fake.calls[-1]["url"]
    assert fake.calls[-1]["auth"] == ("admin", "hunter22secret")


def test_prometheus_reads_a_rotated_connection_after_401(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``conn_id``, a 401 reads the connection again (a secrets backend rotated the token) instead
    of sending the old token until the controller restarts."""
    valid = {"token": "old-token-1"}
    _conn(monkeypatch, "prom_rot", host="http://prom.example:9090", extra={"token": "old-token-1"})

    def answer(url: str, headers: dict[str, str], auth: Any) -> tuple[int, Any]:
        if headers.get("Authorization") != f"Bearer {valid['token']}":
            return 401, {"status": "error", "error": "unauthorized"}
        return 200, _OK

    fake = _FakeGet(answer)
    monkeypatch.setattr(prometheus_source, "http_get", fake)
    source = PrometheusSource(conn_id="prom_rot", headers={"X-Scope-OrgID": "team-a"})
    assert source.read().gpus == 1
    valid["token"] = "new-token-2"
    _conn(monkeypatch, "prom_rot", host="http://prom.example:9090", extra={"token": "new-token-2"})
    assert source.read().gpus == 1
    assert fake.calls[-1]["headers"] == {"Authorization": "Bearer new-token-2", "X-Scope-OrgID": "team-a"}
    # a token that stays refused is one more request per query, not a loop
    valid["token"] = "nobody-has-this"
    before = len(fake.calls)
    with pytest.raises(SourceError, match="401"):
        source.read()
    assert len(fake.calls) - before == 2


def test_prometheus_error_answers_say_what_the_server_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 400 for a selector Prometheus cannot parse names its parse error (the fix), not only a status."""
    error = {
        "status": "error",
        "errorType": "bad_data",
        "error": "1:22: parse error: unterminated quoted string",
    }
    monkeypatch.setattr(prometheus_source, "http_get", _FakeGet(lambda url, headers, auth: (400, error)))
    with pytest.raises(SourceError, match="parse error: unterminated quoted string") as caught:
        PrometheusSource("http://prom.example:9090", selector='{Hostname=~"gpu-.*}').read()
    assert "HTTP 400" in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setattr(prometheus_source, "http_get", _FakeGet(lambda url, headers, auth: (200, error)))
    with pytest.raises(SourceError, match="status 'error': 1:22: parse error"):
        PrometheusSource("http://prom.example:9090").read()


def _uuid_series(uuid: str, value: object) -> dict[str, Any]:
    return {"metric": {"UUID": uuid, "Hostname": "h1"}, "value": [1700000000.0, str(value)]}


def test_prometheus_without_utilisation_series_fails_instead_of_reading_zero(
    prometheus: tuple[str, _PromState],
) -> None:
    url, state = prometheus
    state.results = {"DCGM_FI_DEV_FB_FREE": [_uuid_series("a", 80000), _uuid_series("b", 80000)]}
    with pytest.raises(SourceError, match="no DCGM_FI_DEV_GPU_UTIL series"):
        PrometheusSource(url).read()


def test_prometheus_non_finite_values_are_no_reading(prometheus: tuple[str, _PromState]) -> None:
    url, state = prometheus
    state.results = {
        "DCGM_FI_DEV_FB_FREE": [
            _uuid_series("a", "+Inf"),
            _uuid_series("b", 80000),
            _uuid_series("c", 80000),
        ],
        "DCGM_FI_DEV_GPU_UTIL": [
            _uuid_series("a", 0),
            _uuid_series("b", 0),
            _uuid_series("c", "NaN"),
        ],
    }
    reading = PrometheusSource(url, min_free_memory=40960, max_utilization=10).read()
    assert reading.gpus == 1  # only b: a's +Inf free memory is not a measurement


def test_prometheus_url_credentials_stay_out_of_errors(prometheus: tuple[str, _PromState]) -> None:
    url, state = prometheus
    state.status = 401
    source = PrometheusSource(url.replace("http://", "http://admin:hun%3Ater2@"))
    with pytest.raises(SourceError) as caught:
        source.read()
    assert "hun" not in str(caught.value) and "admin" not in str(caught.value)
    assert "401" in str(caught.value)
    assert source.url == url
    assert state.authorization[-1] == "Basic YWRtaW46aHVuOnRlcjI="  # admin:hun:ter2, still sent


def test_prometheus_counts_gpus_busy_with_our_running_tasks(
    prometheus_dcgm: tuple[str, _DcgmState],
) -> None:
    url, state = prometheus_dcgm
    # h1: 4 GPUs, 3 busy (2 with our tasks, 1 foreign); h2: 4 GPUs, 1 busy (foreign)
    state.results = dcgm_series(
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


def test_prometheus_counts_gpus_of_our_pods(prometheus_dcgm: tuple[str, _DcgmState]) -> None:
    url, state = prometheus_dcgm
    state.results = dcgm_series(
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


def test_prometheus_survives_a_failing_rest_read(prometheus_dcgm: tuple[str, _DcgmState]) -> None:
    url, state = prometheus_dcgm
    state.results = dcgm_series([("h", 0, True, {}), ("h", 1, False, {})])

    def broken() -> dict[str, int]:
        raise RuntimeError("api-server down")

    reading = PrometheusSource(url, min_free_memory=40960, our_work=broken).read()
    assert reading.gpus == 1 and "our running tasks unknown" in reading.detail


def test_the_pools_prometheus_sources_share_one_read_of_the_running_tasks() -> None:
    from airflow_gpu_dag.watermark.config import PoolSpec
    from airflow_gpu_dag.watermark.sources import build_sources

    calls: list[int] = []

    class Client:
        def task_instances(self, pools: Any, states: Any) -> list[dict[str, Any]]:
            calls.append(1)
            return [
                {"hostname": "h1", "pool": "gpu_a100", "pool_slots": 2, "executor_config": "{}"},
                {"hostname": "h1", "pool": "gpu_t4", "pool_slots": 1, "executor_config": "{}"},
            ]

    spec = SourceSpec("prometheus", {"url": "http://prom:9090"})
    sources: Any = build_sources([PoolSpec("gpu_a100", spec), PoolSpec("gpu_t4", spec)], Client())
    assert sources["gpu_a100"].our_work() == {"h1": 2} and sources["gpu_t4"].our_work() == {"h1": 1}
    assert len(calls) == 1  # one REST read for both pools in a tick
