"""Audit of the REST hook and the REST-based capacity sources: IPv6 connection URIs, Kubernetes nodes
whose pods hold more than they now offer, Prometheus credentials and error answers."""

from __future__ import annotations

import json
from typing import Any

import httpx
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

from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook, base_url_of
from airflow_gpu_dag.watermark import prometheus_source
from airflow_gpu_dag.watermark.capacity import SourceError
from airflow_gpu_dag.watermark.kubernetes_source import KubernetesSource
from airflow_gpu_dag.watermark.prometheus_source import PrometheusSource

PASSWORD = "s3cr3t-p%40ss"


# -- IPv6 hosts ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("uri", "url"),
    [
        (f"gpu-dag-api://admin:{PASSWORD}@[::1]:8080", "http://[::1]:8080"),
        (f"gpu-dag-api://admin:{PASSWORD}@[fd00::2a]", "http://[fd00::2a]"),
        (
            f"gpu-dag-api://https://admin:{PASSWORD}@[2001:db8::1]:8443/airflow",
            "https://[2001:db8::1]:8443/airflow",
        ),
    ],
)
def test_an_ipv6_host_in_a_connection_uri(monkeypatch: pytest.MonkeyPatch, uri: str, url: str) -> None:
    """Airflow reads ``[::1]`` of a URI as the host ``::1`` (no brackets): its colons are no port."""
    monkeypatch.setenv("AIRFLOW_CONN_GPU_DAG_API", uri)
    client = AirflowApiHook().get_client()
    try:
        assert client.base_url == url
    finally:
        client.close()


def test_base_url_of_bare_and_bracketed_ipv6() -> None:
    assert base_url_of("::1", 8080) == "http://[::1]:8080"
    assert base_url_of("https://fe80::1", None) == "https://[fe80::1]"
    assert base_url_of("http://[::1]:9000/x", 8080) == "http://[::1]:9000/x"
    assert base_url_of("localhost", 8080) == "http://localhost:8080"
    with pytest.raises(ValueError, match="not a number"):
        base_url_of("http://host:port", None)


# -- Kubernetes: per-node accounting ------------------------------------------------------------------
def _node(name: str, gpus: str) -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name),
        spec=V1NodeSpec(),
        status=V1NodeStatus(
            allocatable={"nvidia.com/gpu": gpus},
            conditions=[V1NodeCondition(type="Ready", status="True")],
        ),
    )


def _pod(node: str, gpus: int) -> V1Pod:
    resources = V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)})
    return V1Pod(
        metadata=V1ObjectMeta(name=f"foreign-{node}"),
        spec=V1PodSpec(node_name=node, containers=[V1Container(name="c", resources=resources)]),
    )


class _Api:
    def __init__(self, nodes: list[V1Node], pods: list[V1Pod]) -> None:
        self.nodes, self.pods = nodes, pods

    def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
        return V1NodeList(items=self.nodes)

    def list_pod_for_all_namespaces(
        self, field_selector: str | None = None, _request_timeout: Any = None
    ) -> V1PodList:
        return V1PodList(items=self.pods)


def test_kubernetes_pods_over_a_nodes_allocatable_hold_nothing_elsewhere() -> None:
    """The device plugin marked n1's GPUs unhealthy (allocatable 0) after a foreign 4-GPU pod was
    scheduled there: n2's 8 free GPUs are still all usable."""
    api = _Api([_node("n1", "0"), _node("n2", "8"), _node("n3", "4")], [_pod("n1", 4), _pod("n3", 1)])
    reading = KubernetesSource(api=api).read()
    assert reading.gpus == 11
    assert reading.detail == "kubernetes 11 = 12 allocatable on 3 nodes - 1 held"


# -- Prometheus -----------------------------------------------------------------------------------------
def _series(host: str, value: float) -> dict[str, Any]:
    return {"metric": {"Hostname": host, "gpu": "0"}, "value": [1.7e9, str(value)]}


_OK = {
    "status": "success",
    "data": {"resultType": "vector", "result": [_series("h1", 0)]},
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


# -- timeout -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["inf", 1e400, "nan"])
def test_an_infinite_timeout_is_named_at_once(monkeypatch: pytest.MonkeyPatch, bad: object) -> None:
    """``{"timeout": "inf"}`` (meant as "no limit") made every REST call fail in httpx with
    ``OverflowError: timestamp out of range``, tick after tick, naming neither connection nor field."""
    conn = {"conn_type": "gpu_dag_api", "host": "http://api:8080", "extra": {"timeout": bad}}
    monkeypatch.setenv("AIRFLOW_CONN_SLOW_INF", json.dumps(conn))
    with pytest.raises(ValueError, match=r"connection 'slow_inf': timeout must be a number of seconds > 0"):
        AirflowApiHook("slow_inf").get_client()


def test_kubernetes_client_is_built_again_after_a_401(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook's client holds the credentials of the connection when it was built: after a 401 the
    next read builds it again (a rotated token), instead of failing until the controller restarts."""
    from kubernetes.client.exceptions import ApiException

    class Expired(_Api):
        def list_node(self, label_selector: str | None = None, _request_timeout: Any = None) -> V1NodeList:
            raise ApiException(status=401, reason="Unauthorized")

    clients: list[_Api] = [Expired([], []), _Api([_node("n1", "8")], [])]
    built: list[dict[str, Any]] = []

    class FakeHook:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)
            self.core_v1_client = clients[len(built) - 1]

    import airflow.providers.cncf.kubernetes.hooks.kubernetes as hooks

    monkeypatch.setattr(hooks, "KubernetesHook", FakeHook)
    source = KubernetesSource(kubernetes_conn_id="k8s_gpu")
    with pytest.raises(SourceError, match="401"):
        source.read()
    assert source.read().gpus == 8
    assert len(built) == 2
    # a client given by the caller is kept
    given = Expired([], [])
    fixed = KubernetesSource(api=given)
    with pytest.raises(SourceError):
        fixed.read()
    assert fixed._client() is given
