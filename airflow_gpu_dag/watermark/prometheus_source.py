"""The ``prometheus`` capacity source: GPUs from DCGM exporter metrics, minus those held by work that
is not ours.

``DCGM_FI_DEV_FB_FREE`` (MiB) and ``DCGM_FI_DEV_GPU_UTIL`` (%) are read over the Prometheus HTTP query
API, filtered by ``selector``. A GPU with both series is *free* when it is within the thresholds; a
GPU outside them is *busy*, and still counts when the work on it is ours:

* by pod: the series' ``pod`` / ``namespace`` labels (DCGM exporter's Kubernetes mapping) name a pod
  in one of ``airflow_namespaces`` or matching ``airflow_pod_pattern`` (a KubernetesPodOperator pod);
* by host: on a host where our running task instances hold ``k`` GPUs (from the REST API, when the
  controller gives the source its client: :class:`~airflow_gpu_dag.watermark.own_gpus.RunningTaskGpus`),
  up to ``k`` busy GPUs of that host are ours. Hosts are compared by the series' ``host_label``
  (default ``Hostname``, else ``instance`` without its port) and the task instance's ``hostname``,
  both lower-cased without their domain.

The URL and credentials come from ``url`` or, better, an Airflow connection ``conn_id`` (host = base
URL; ``extra`` ``{"token": ...}`` or a password without login for a bearer token, login + password
for basic auth, ``extra`` ``{"headers": {...}}`` for anything else), so no token sits in the
controller's configuration file. The connection is read again after a 401 or 403 (rotated credentials).

Each query ends within ``timeout`` seconds in all (connecting, sending, reading the whole answer, and
the second try after a 401 or 403), however slowly the server answers
(:mod:`airflow_gpu_dag.hooks.deadline`); an answer that is not JSON is a failure that shows its start.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from airflow_gpu_dag.hooks.deadline import deadline, deadline_client, fetch
from airflow_gpu_dag.hooks.rest_client import excerpt, mask
from airflow_gpu_dag.watermark.capacity import CapacityReading, SourceError
from airflow_gpu_dag.watermark.own_gpus import normalize_host

log = logging.getLogger(__name__)

__all__ = ["PrometheusSource", "http_get", "prometheus_connection"]

_LABEL_SELECTOR = re.compile(r"^\{.*\}$")


@dataclass(frozen=True)
class _Gpu:
    host: str
    pod: str | None
    namespace: str | None


def prometheus_connection(conn_id: str) -> tuple[str, dict[str, str], tuple[str, str] | None]:
    """``(base URL, headers, basic auth)`` from the Airflow connection ``conn_id``.

    :raises SourceError: the connection is missing or has no host.
    """
    try:
        # process boundary: the controller's modules load without Airflow (benchmarks/controller_thread.py)
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
    except Exception as err:
        raise SourceError(f"prometheus connection {conn_id!r}: {type(err).__name__}: {err}") from None
    from airflow_gpu_dag.hooks.airflow_api import base_url_of  # process boundary: it imports Airflow

    try:
        url = base_url_of(conn.host, conn.port, conn.schema, conn.conn_type)
    except ValueError as err:
        raise SourceError(f"prometheus connection {conn_id!r}: {err}") from None
    extra = conn.extra_dejson if conn.extra else {}
    headers = {str(k): str(v) for k, v in dict((extra or {}).get("headers") or {}).items()}
    token = (extra or {}).get("token") or (conn.password if not conn.login else None)
    auth = None
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif conn.login:
        auth = (str(conn.login), str(conn.password or ""))
    for secret in (token, conn.password):
        mask(secret)
    return url, headers, auth


def http_get(
    url: str,
    params: Mapping[str, str],
    timeout: float,
    headers: Mapping[str, str],
    auth: tuple[str, str] | None,
) -> httpx.Response:
    """``GET url`` with its whole answer read within ``timeout`` seconds (or the calling thread's
    deadline, when it comes sooner): not per read, as ``httpx.get`` would."""
    with deadline_client(timeout=timeout, headers=headers, auth=auth) as client:
        return fetch(client, "GET", url, seconds=timeout, params=params)


def _split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(URL without user:password@, (user, password) or None)``; the password is masked in logs."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    mask(unquote(password))
    return urlunsplit(parts._replace(netloc=host)), (unquote(user), unquote(password))


def _error_of(response: Any) -> str:
    """`` (the server's error text)`` of a failed query (Prometheus answers ``{"error": ...}``, e.g.
    the parse error of a bad ``selector``), else of its first 200 characters; empty when none."""
    try:
        body = response.json()
        text = str(body["error"]) if isinstance(body, dict) and body.get("error") else ""
    except Exception:
        text = getattr(response, "text", "")
    text = " ".join(str(text).split())[:200]
    return f" ({text})" if text else ""


class PrometheusSource:
    """GPUs from DCGM exporter metrics over the Prometheus HTTP API (``/api/v1/query``); GPUs busy
    with our work still count (see the module docstring).

    :param our_work: returns ``host -> GPUs`` held by our running task instances there (the controller
        passes :meth:`~airflow_gpu_dag.watermark.own_gpus.RunningTaskGpus.by_host`); None: not used.
    """

    kind = "prometheus"
    FREE_METRIC = "DCGM_FI_DEV_FB_FREE"
    UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"

    def __init__(
        self,
        url: str | None = None,
        selector: str = "",
        min_free_memory: int = 0,
        max_utilization: int = 100,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        conn_id: str | None = None,
        airflow_namespaces: Sequence[str] = (),
        airflow_pod_pattern: str | None = None,
        host_label: str = "Hostname",
        our_work: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        if selector and not _LABEL_SELECTOR.match(selector):
            raise ValueError(
                f"prometheus selector must look like '{{Hostname=~\"gpu-.*\"}}', got {selector!r}"
            )
        if not url and not conn_id:
            raise ValueError("a prometheus source needs url or conn_id (an Airflow connection)")
        if isinstance(timeout, bool) or not (isinstance(timeout, int | float) and 0 < timeout < math.inf):
            raise ValueError(f"prometheus timeout must be seconds > 0 (each query's limit), not {timeout!r}")
        if isinstance(airflow_namespaces, str):
            raise ValueError(f"airflow_namespaces must be a list like [{airflow_namespaces}], not a string")
        self.auth: tuple[str, str] | None = None
        if url:  # user:password@ in the URL: sent as basic auth, kept out of errors and request logs
            url, self.auth = _split_userinfo(url)
        self.url = url.rstrip("/") if url else None
        self._url_given = self.url is not None  # else the connection's, read again after a 401/403
        self.conn_id = conn_id
        self.selector = selector
        self.min_free_mib = int(min_free_memory)
        self.max_utilization = int(max_utilization)
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._own_headers = dict(self.headers)  # the configured ones, without the connection's
        self.airflow_namespaces = frozenset(airflow_namespaces)
        try:
            self.airflow_pod_pattern = re.compile(airflow_pod_pattern) if airflow_pod_pattern else None
        except (re.error, TypeError) as err:
            raise ValueError(
                f"airflow_pod_pattern {airflow_pod_pattern!r} is not a regular expression: {err}"
            ) from None
        self.host_label = host_label
        self.our_work = our_work

    def _endpoint(self) -> str:
        if self.url is None:
            url, headers, auth = prometheus_connection(str(self.conn_id))
            url, in_url = _split_userinfo(url)  # user:password@ in the host: out of errors, as for url
            self.url, self.auth = url.rstrip("/"), auth or in_url
            self.headers = {**headers, **self._own_headers}
        return self.url

    def _get(self, query: str) -> object:
        def get() -> httpx.Response:
            url = f"{self._endpoint()}/api/v1/query"
            return http_get(
                url, params={"query": query}, timeout=self.timeout, headers=self.headers, auth=self.auth
            )

        with deadline(self.timeout):
            response = get()
            if response.status_code in (401, 403) and self.conn_id and not self._url_given:
                # The connection's credentials may have been rotated (a secrets backend): read it again.
                self.url = None
                response = get()
        if not response.is_success:  # 3xx too: redirects are not followed
            raise SourceError(f"HTTPStatusError: HTTP {response.status_code}{_error_of(response)}")
        try:
            return response.json()
        except ValueError:  # an HTML page of a proxy, a login form: say what came back
            content_type = response.headers.get("content-type") or "no content type"
            shown = excerpt(response.text, (self.auth[1] if self.auth else None, *self.headers.values()))
            raise SourceError(f"not JSON (HTTP {response.status_code}, {content_type}): {shown}") from None

    def _query(self, metric: str) -> dict[tuple[str, ...], tuple[float, _Gpu]]:
        query = f"{metric}{self.selector}"
        try:
            body = self._get(query)
        except Exception as err:
            reason = str(err) if isinstance(err, SourceError) else f"{type(err).__name__}: {err}"
            raise SourceError(f"prometheus query {metric}: {reason}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            status = body.get("status") if isinstance(body, dict) else body
            error = (
                f": {str(body.get('error'))[:200]}" if isinstance(body, dict) and body.get("error") else ""
            )
            raise SourceError(f"prometheus query {metric}: status {status!r}{error}")
        series: dict[tuple[str, ...], tuple[float, _Gpu]] = {}
        for item in body.get("data", {}).get("result", []):
            labels = item.get("metric", {})
            host = labels.get(self.host_label) or labels.get("Hostname") or labels.get("instance", "")
            key = (labels["UUID"],) if labels.get("UUID") else (host, labels.get("gpu", ""))
            gpu = _Gpu(
                normalize_host(host),
                labels.get("pod") or labels.get("exported_pod") or None,
                labels.get("namespace") or labels.get("exported_namespace") or None,
            )
            try:
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if math.isfinite(value):  # NaN / +Inf: no reading of this GPU
                series[key] = (value, gpu)
        return series

    def _pod_is_ours(self, gpu: _Gpu) -> bool:
        if not gpu.pod:
            return False
        if gpu.namespace and gpu.namespace in self.airflow_namespaces:
            return True
        return bool(self.airflow_pod_pattern and self.airflow_pod_pattern.search(gpu.pod))

    def read(self) -> CapacityReading:
        free = self._query(self.FREE_METRIC)
        util = self._query(self.UTIL_METRIC)
        for metric, found in ((self.FREE_METRIC, free), (self.UTIL_METRIC, util)):
            if not found:  # a metric missing altogether is a failure, not "0 usable"
                raise SourceError(
                    f"prometheus: no {metric}{self.selector} series (exporter down or metric not exported?)"
                )
        usable = 0
        busy: list[_Gpu] = []
        pods: list[_Gpu] = []
        for key, (free_mib, gpu) in free.items():
            if key not in util:
                continue  # no utilisation series: not known to be usable
            if free_mib >= self.min_free_mib and util[key][0] <= self.max_utilization:
                usable += 1
            elif self._pod_is_ours(gpu):
                pods.append(gpu)
            else:
                busy.append(gpu)
        by_pod = len(pods)
        usable += by_pod
        by_host = 0
        note = ""
        if busy and self.our_work is not None:
            try:
                held = dict(self.our_work())
            except Exception as err:  # a REST hiccup must not fail the capacity reading
                held = {}
                note = f"; our running tasks unknown ({type(err).__name__}: {err})"
                log.warning("prometheus source: cannot read our running task instances (%s)", err)
            for gpu in pods:  # already counted by its pod label
                if held.get(gpu.host, 0) > 0:
                    held[gpu.host] -= 1
            for gpu in busy:
                if held.get(gpu.host, 0) > 0:
                    held[gpu.host] -= 1
                    by_host += 1
        usable += by_host
        detail = f"prometheus {usable}/{len(free)} usable"
        if by_pod or by_host:
            detail += f", {by_pod + by_host} of them busy with our tasks"
        return CapacityReading(usable, detail + note)
