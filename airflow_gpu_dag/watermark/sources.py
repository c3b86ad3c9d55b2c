"""Capacity sources: how many GPUs of a pool are usable right now, and the fault ladder around them.

Each source returns a :class:`CapacityReading` (usable GPU count + a short status) or raises
:class:`SourceError`. :class:`CapacityTracker` applies the fault policy: a failing source keeps its
last good value for ``stale_intervals`` ticks, then falls to the pool's ``floor``; its state can be
saved in (and restored from) the pool description so a restarted controller continues the ladder.

Sources:

- ``static``: a fixed count (``gpus``).
- ``file``: an integer (or JSON ``{"gpus": n}``) in a file written by something else; fails when
  the file is missing, unreadable, or older than ``max_age`` seconds.
- ``nvml``: local GPUs through NVML (pynvml): a GPU counts when every query on it succeeds, it has no
  uncorrected volatile ECC errors, free memory >= ``min_free_memory`` and utilisation <=
  ``max_utilization`` percent. ``devices`` restricts to given indices.
- ``kubernetes``: allocatable ``nvidia.com/gpu`` on Ready, schedulable nodes matching
  ``label_selector``, minus GPU requests of running/pending pods on them that are not Airflow's
  (pods carrying any label in ``airflow_pod_labels``).
- ``prometheus``: DCGM exporter metrics ``DCGM_FI_DEV_FB_FREE`` (MiB) and ``DCGM_FI_DEV_GPU_UTIL``
  (%) over the HTTP query API, filtered by ``selector``; a GPU counts when both series exist and are
  within the thresholds.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from airflow_gpu_dag.watermark.config import PoolSpec, SourceSpec

log = logging.getLogger(__name__)

__all__ = [
    "CapacityReading",
    "CapacitySource",
    "CapacityTracker",
    "FileSource",
    "KubernetesSource",
    "NvmlSource",
    "PoolCapacity",
    "PrometheusSource",
    "SourceError",
    "StaticSource",
    "build_source",
]

GPU_RESOURCE = "nvidia.com/gpu"
#: Labels that mark a pod as started by Airflow (KubernetesPodOperator, KubernetesExecutor).
DEFAULT_AIRFLOW_POD_LABELS = ("kubernetes_pod_operator", "airflow-worker", "airflow_kpo_in_cluster")


class SourceError(RuntimeError):
    """A capacity source could not say how many GPUs are usable."""


@dataclass(frozen=True)
class CapacityReading:
    """Usable GPUs reported by a source, with a one-line explanation."""

    gpus: int
    detail: str


class CapacitySource(Protocol):
    """Anything with ``read() -> CapacityReading`` (raising :class:`SourceError` on failure)."""

    kind: str

    def read(self) -> CapacityReading: ...


class StaticSource:
    """A fixed GPU count."""

    kind = "static"

    def __init__(self, gpus: int) -> None:
        self.gpus = int(gpus)

    def read(self) -> CapacityReading:
        return CapacityReading(self.gpus, f"static {self.gpus}")


class FileSource:
    """A GPU count written to a file by another process (an integer or ``{"gpus": n}``)."""

    kind = "file"

    def __init__(
        self, path: str, max_age: float | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path)
        self.max_age = max_age
        self._clock = clock

    def read(self) -> CapacityReading:
        try:
            text = self.path.read_text().strip()
            mtime = self.path.stat().st_mtime
        except OSError as err:
            raise SourceError(f"cannot read {self.path}: {err.strerror or err}") from None
        if self.max_age is not None and self._clock() - mtime > self.max_age:
            raise SourceError(f"{self.path} is older than {self.max_age:g}s")
        try:
            value = json.loads(text)
            gpus = int(value["gpus"] if isinstance(value, dict) else value)
        except (ValueError, KeyError, TypeError):
            raise SourceError(f"{self.path} does not hold a GPU count: {text[:40]!r}") from None
        if gpus < 0:
            raise SourceError(f"{self.path} holds a negative GPU count {gpus}")
        return CapacityReading(gpus, f"file {gpus}")


class NvmlSource:
    """Local GPUs through NVML, filtered by health, free memory and utilisation.

    :param nvml: the ``pynvml`` module or a fake with the same functions (tests).
    """

    kind = "nvml"

    def __init__(
        self,
        min_free_memory: int = 0,
        max_utilization: int = 100,
        devices: Sequence[int] | None = None,
        nvml: Any = None,
    ) -> None:
        self.min_free_mib = int(min_free_memory)
        self.max_utilization = int(max_utilization)
        self.devices = list(devices) if devices is not None else None
        self._nvml = nvml

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise SourceError("pynvml is not installed (pip install nvidia-ml-py)") from None
            self._nvml = pynvml
        return self._nvml

    def read(self) -> CapacityReading:
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except Exception as err:
            raise SourceError(f"NVML init failed: {err}") from None
        try:
            try:
                count = int(nvml.nvmlDeviceGetCount())
            except Exception as err:
                raise SourceError(f"NVML device count failed: {err}") from None
            indices = [i for i in range(count) if self.devices is None or i in self.devices]
            usable, reasons = 0, []
            for index in indices:
                reason = self._excluded(nvml, index)
                if reason is None:
                    usable += 1
                else:
                    reasons.append(f"gpu{index} {reason}")
            detail = f"nvml {usable}/{len(indices)} usable"
            if reasons:
                detail += " (" + "; ".join(reasons) + ")"
            return CapacityReading(usable, detail)
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:
                log.debug("NVML shutdown failed", exc_info=True)

    def _excluded(self, nvml: Any, index: int) -> str | None:
        """Why GPU ``index`` is not usable, or None when it is."""
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            utilization = nvml.nvmlDeviceGetUtilizationRates(handle)
        except Exception as err:
            return f"unhealthy ({err})"
        try:
            ecc = nvml.nvmlDeviceGetTotalEccErrors(
                handle,
                getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                getattr(nvml, "NVML_VOLATILE_ECC", 0),
            )
            if int(ecc) > 0:
                return f"unhealthy ({ecc} uncorrected ECC errors)"
        except Exception:  # ECC not supported on this GPU
            pass
        free_mib = int(memory.free) // (1024 * 1024)
        if free_mib < self.min_free_mib:
            return f"free {free_mib}MiB < {self.min_free_mib}MiB"
        if int(utilization.gpu) > self.max_utilization:
            return f"util {int(utilization.gpu)}% > {self.max_utilization}%"
        return None


def _quantity(value: object) -> int:
    """Whole GPUs of a Kubernetes quantity (``"8"``, ``8``); anything else is 0."""
    try:
        return int(float(str(value)))
    except (TypeError, ValueError):
        return 0


class KubernetesSource:
    """Allocatable GPUs on matching nodes minus what non-Airflow pods request there.

    :param api: a ``kubernetes.client.CoreV1Api`` (or a fake with ``list_node`` and
        ``list_pod_for_all_namespaces``); None = build one from in-cluster or kubeconfig settings.
    """

    kind = "kubernetes"

    def __init__(
        self,
        label_selector: str = "",
        airflow_pod_labels: Sequence[str] = DEFAULT_AIRFLOW_POD_LABELS,
        resource: str = GPU_RESOURCE,
        context: str | None = None,
        api: Any = None,
    ) -> None:
        self.label_selector = label_selector
        self.airflow_pod_labels = tuple(airflow_pod_labels)
        self.resource = resource
        self.context = context
        self._api = api

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client, config

            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config(context=self.context)
            self._api = client.CoreV1Api()
        return self._api

    def read(self) -> CapacityReading:
        try:
            api = self._client()
            nodes = api.list_node(label_selector=self.label_selector or None).items
            pods = api.list_pod_for_all_namespaces(
                field_selector="status.phase!=Succeeded,status.phase!=Failed"
            ).items
        except Exception as err:
            raise SourceError(
                f"kubernetes API: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
            ) from None
        allocatable: dict[str, int] = {}
        for node in nodes:
            name = node.metadata.name
            if node.spec is not None and node.spec.unschedulable:
                continue
            conditions = (node.status.conditions or []) if node.status else []
            if not any(c.type == "Ready" and c.status == "True" for c in conditions):
                continue
            allocatable[name] = _quantity(
                ((node.status.allocatable or {}) if node.status else {}).get(self.resource)
            )
        foreign = 0
        for pod in pods:
            node_name = pod.spec.node_name if pod.spec else None
            if node_name not in allocatable:
                continue
            labels = pod.metadata.labels or {}
            if any(key in labels for key in self.airflow_pod_labels):
                continue
            for container in pod.spec.containers or []:
                resources = container.resources
                requests = (resources.requests or {}) if resources else {}
                limits = (resources.limits or {}) if resources else {}
                foreign += _quantity(requests.get(self.resource, limits.get(self.resource)))
        total = sum(allocatable.values())
        usable = max(0, total - foreign)
        return CapacityReading(
            usable, f"kubernetes {usable} = {total} allocatable on {len(allocatable)} nodes - {foreign} held"
        )


_LABEL_SELECTOR = re.compile(r"^\{.*\}$")


class PrometheusSource:
    """GPUs from DCGM exporter metrics over the Prometheus HTTP API (``/api/v1/query``)."""

    kind = "prometheus"
    FREE_METRIC = "DCGM_FI_DEV_FB_FREE"
    UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"

    def __init__(
        self,
        url: str,
        selector: str = "",
        min_free_memory: int = 0,
        max_utilization: int = 100,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if selector and not _LABEL_SELECTOR.match(selector):
            raise ValueError(
                f"prometheus selector must look like '{{Hostname=~\"gpu-.*\"}}', got {selector!r}"
            )
        self.url = url.rstrip("/")
        self.selector = selector
        self.min_free_mib = int(min_free_memory)
        self.max_utilization = int(max_utilization)
        self.timeout = timeout
        self.headers = dict(headers or {})

    def _query(self, metric: str) -> dict[tuple[str, ...], float]:
        import httpx

        query = f"{metric}{self.selector}"
        try:
            response = httpx.get(
                f"{self.url}/api/v1/query",
                params={"query": query},
                timeout=self.timeout,
                headers=self.headers,
            )
            response.raise_for_status()
            body = response.json()
        except Exception as err:
            raise SourceError(f"prometheus query {metric}: {type(err).__name__}: {err}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            status = body.get("status") if isinstance(body, dict) else body
            raise SourceError(f"prometheus query {metric}: status {status!r}")
        series: dict[tuple[str, ...], float] = {}
        for item in body.get("data", {}).get("result", []):
            labels = item.get("metric", {})
            key = (
                (labels["UUID"],)
                if labels.get("UUID")
                else (
                    labels.get("Hostname") or labels.get("instance", ""),
                    labels.get("gpu", ""),
                )
            )
            try:
                series[key] = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return series

    def read(self) -> CapacityReading:
        free = self._query(self.FREE_METRIC)
        util = self._query(self.UTIL_METRIC)
        if not free:
            raise SourceError(f"prometheus: no {self.FREE_METRIC}{self.selector} series (exporter down?)")
        usable = sum(
            1
            for key, free_mib in free.items()
            if key in util and free_mib >= self.min_free_mib and util[key] <= self.max_utilization
        )
        return CapacityReading(usable, f"prometheus {usable}/{len(free)} usable")


def build_source(spec: SourceSpec) -> CapacitySource:
    """Instantiate the source a pool's configuration names."""
    options = dict(spec.options)
    try:
        if spec.type == "static":
            return StaticSource(int(options["gpus"]))
        if spec.type == "file":
            return FileSource(str(options["path"]), max_age=options.get("max_age"))
        if spec.type == "nvml":
            return NvmlSource(**options)
        if spec.type == "kubernetes":
            return KubernetesSource(**options)
        if spec.type == "prometheus":
            return PrometheusSource(**options)
    except TypeError as err:
        raise ValueError(f"source type {spec.type!r}: bad options {sorted(options)} ({err})") from None
    raise ValueError(f"unknown source type {spec.type!r}")


@dataclass(frozen=True)
class PoolCapacity:
    """Capacity decided for one tick, after the fault ladder.

    ``status`` is ``ok``, ``stale`` (source failed, last good value kept) or ``floor``.
    """

    gpus: int
    status: str
    detail: str
    failures: int
    last_good: int | None


class CapacityTracker:
    """The fault ladder of one pool: last good value for ``stale_intervals`` failed ticks, then floor."""

    def __init__(self, spec: PoolSpec, source: CapacitySource) -> None:
        self.spec = spec
        self.source = source
        self.last_good: int | None = None
        self.failures = 0
        self._hung: threading.Thread | None = None

    def _call(self) -> CapacityReading:
        """``source.read()`` bounded by ``spec.source_timeout``; a hung read counts as a failure."""
        timeout = self.spec.source_timeout
        if timeout is None:
            reading = self.source.read()
        else:
            if self._hung is not None and self._hung.is_alive():
                raise SourceError(f"previous read still hung (no answer within {timeout:g}s)")
            box: dict[str, Any] = {}

            def target() -> None:
                try:
                    box["reading"] = self.source.read()
                except BaseException as err:
                    box["error"] = err

            thread = threading.Thread(target=target, name=f"capacity-{self.spec.name}", daemon=True)
            thread.start()
            thread.join(timeout)
            if thread.is_alive():
                self._hung = thread
                raise SourceError(f"no answer within {timeout:g}s")
            self._hung = None
            if "error" in box:
                raise box["error"]
            reading = box["reading"]
        gpus = getattr(reading, "gpus", None)
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
            raise SourceError(f"invalid GPU count {gpus!r}")
        return reading

    def restore(self, last_good: int | None, failures: int) -> None:
        """Continue from state saved in the pool description by a previous controller."""
        self.last_good = last_good
        self.failures = max(0, int(failures))

    def read(self) -> PoolCapacity:
        """Read the source once and apply the ladder."""
        try:
            reading = self._call()
        except Exception as err:  # a source must never kill the controller
            self.failures += 1
            reason = str(err) if isinstance(err, SourceError) else f"{type(err).__name__}: {err}"
            if self.last_good is not None and self.failures <= self.spec.stale_intervals:
                log.warning(
                    "pool %s: %s source failed (%s); keeping last good %d (%d/%d failed intervals)",
                    self.spec.name,
                    self.source.kind,
                    reason,
                    self.last_good,
                    self.failures,
                    self.spec.stale_intervals,
                )
                return PoolCapacity(
                    self.last_good,
                    "stale",
                    f"{self.source.kind} failed {self.failures}/{self.spec.stale_intervals}: {reason}; "
                    f"last good {self.last_good} kept",
                    self.failures,
                    self.last_good,
                )
            log.error(
                "pool %s: %s source failed (%s) for %d intervals; falling to floor %d",
                self.spec.name,
                self.source.kind,
                reason,
                self.failures,
                self.spec.floor,
            )
            return PoolCapacity(
                self.spec.floor,
                "floor",
                f"{self.source.kind} failed {self.failures} intervals: {reason}; floor {self.spec.floor}",
                self.failures,
                self.last_good,
            )
        self.failures = 0
        self.last_good = max(0, int(reading.gpus))
        return PoolCapacity(self.last_good, "ok", reading.detail, 0, self.last_good)
