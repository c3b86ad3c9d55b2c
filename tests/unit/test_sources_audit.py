"""Capacity sources: readings that must fail instead of reporting a count, timeouts, leaked secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import V1NodeList, V1PodList

from airflow_gpu_dag.watermark.config import ConfigError, PoolSpec, SourceSpec, parse_config
from airflow_gpu_dag.watermark.sources import (
    CapacityTracker,
    FileSource,
    KubernetesSource,
    PrometheusSource,
    SourceError,
    build_sources,
)
from tests.unit import test_sources
from tests.unit.test_sources import _PromState


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


# -- prometheus (the fake Prometheus server of test_sources) -------------------------------------
prometheus = test_sources.prometheus  # the fake Prometheus server fixture


def _series(uuid: str, value: object) -> dict[str, Any]:
    return {"metric": {"UUID": uuid, "Hostname": "h1"}, "value": [1700000000.0, str(value)]}


def test_prometheus_without_utilisation_series_fails_instead_of_reading_zero(
    prometheus: tuple[str, _PromState],
) -> None:
    url, state = prometheus
    state.results = {"DCGM_FI_DEV_FB_FREE": [_series("a", 80000), _series("b", 80000)]}
    with pytest.raises(SourceError, match="no DCGM_FI_DEV_GPU_UTIL series"):
        PrometheusSource(url).read()


def test_prometheus_non_finite_values_are_no_reading(prometheus: tuple[str, _PromState]) -> None:
    url, state = prometheus
    state.results = {
        "DCGM_FI_DEV_FB_FREE": [_series("a", "+Inf"), _series("b", 80000), _series("c", 80000)],
        "DCGM_FI_DEV_GPU_UTIL": [_series("a", 0), _series("b", 0), _series("c", "NaN")],
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


# -- kubernetes -----------------------------------------------------------------------------------
class _HangingApi:
    """As the real client: without ``_request_timeout`` a dead connection never answers."""

    def __init__(self) -> None:
        self.timeouts: list[Any] = []

    def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
        self.timeouts.append(_request_timeout)
        if _request_timeout is None:
            raise AssertionError("list_node without a timeout would hang on a dead connection")
        return V1NodeList(items=[])

    def list_pod_for_all_namespaces(
        self, field_selector: str | None = None, _request_timeout: Any = None
    ) -> V1PodList:
        self.timeouts.append(_request_timeout)
        if _request_timeout is None:
            raise AssertionError("list_pod without a timeout would hang on a dead connection")
        return V1PodList(items=[])


def test_kubernetes_requests_carry_a_timeout() -> None:
    api = _HangingApi()
    assert KubernetesSource(api=api).read().gpus == 0
    assert 14.0 < api.timeouts[0] <= 15.0 and 0 < api.timeouts[1] <= api.timeouts[0]  # both within 15 s
    config = parse_config({"pools": {"gpu_k": {"source": {"type": "kubernetes", "timeout": "30s"}}}})
    assert config.pools[0].source.options["timeout"] == 30.0
    api = _HangingApi()
    KubernetesSource(api=api, timeout=config.pools[0].source.options["timeout"]).read()
    assert 29.0 < api.timeouts[0] <= 30.0 and 0 < api.timeouts[1] <= api.timeouts[0]


# -- configuration --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "key"),
    [
        ({"type": "kubernetes", "airflow_pod_labels": "airflow-worker"}, "airflow_pod_labels"),
        (
            {"type": "prometheus", "url": "http://p:9090", "airflow_namespaces": "airflow"},
            "airflow_namespaces",
        ),
    ],
)
def test_a_string_instead_of_a_list_is_a_config_error(source: dict[str, Any], key: str) -> None:
    config = parse_config({"pools": {"gpu_a": {"source": source}}})
    with pytest.raises(ConfigError, match=rf"pools\.gpu_a\.source: {key} must be a list"):
        build_sources(config.pools)


def test_bad_headers_error_does_not_show_their_values() -> None:
    headers = {"Authorization": "Bearer s3cr3t-token", "X-Retries": 3}
    with pytest.raises(
        ConfigError, match=r"headers: .*a non-text entry among \['Authorization', 'X-Retries'\]"
    ) as caught:
        parse_config(
            {"pools": {"gpu_a": {"source": {"type": "prometheus", "url": "http://p", "headers": headers}}}}
        )
    assert "s3cr3t" not in str(caught.value)
