"""Capacity sources: how many GPUs of a pool are usable right now, and the fault ladder around them.

Each source returns a :class:`CapacityReading` (usable GPU count + a short status) or raises
:class:`SourceError`. :class:`CapacityTracker` applies the fault policy: a failing source keeps its
last good value for ``stale_intervals`` ticks, then falls to the pool's ``floor``; its state can be
saved in (and restored from) the pool description so a restarted controller continues the ladder.

Sources:

- ``static``: a fixed count (``gpus``).
- ``file``: an integer (or JSON ``{"gpus": n}``) in a file written by something else; fails when
  the file is missing, unreadable, or older than ``max_age`` seconds.
- ``nvml`` (:mod:`.nvml_source`): local GPUs through NVML (pynvml): a GPU counts when every query on
  it succeeds, it has no uncorrected volatile ECC errors, and either free memory >= ``min_free_memory``
  and utilisation <= ``max_utilization`` percent, or one of our task instances holds it (a live
  lease of this host's lease table) and no foreign process shares it. ``devices`` restricts to given
  indices.
- ``kubernetes`` (:mod:`.kubernetes_source`): allocatable ``nvidia.com/gpu`` on Ready, schedulable
  nodes matching ``label_selector``, minus what running/pending pods on them that are not Airflow's
  (no label of ``airflow_pod_labels``) request, init containers counted as the kube-scheduler does;
  the client from ``KubernetesHook`` (``kubernetes_conn_id``).
- ``prometheus`` (:mod:`.prometheus_source`): DCGM exporter metrics ``DCGM_FI_DEV_FB_FREE`` (MiB) and
  ``DCGM_FI_DEV_GPU_UTIL`` (%) over the HTTP query API (``url`` or the connection ``conn_id``),
  filtered by ``selector``; a GPU counts when both series exist and are within the thresholds, or it
  is busy with our work (a pod of ``airflow_namespaces`` / ``airflow_pod_pattern``, or on a host
  where our running task instances hold GPUs, :mod:`.ours`).

Capacity is therefore healthy GPUs minus GPUs held by work that is not ours: Airflow subtracts the
pool slots of our own running tasks itself.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_gpu_dag.pool_claim.state import MAX_POOL_SLOTS
from airflow_gpu_dag.watermark.capacity import CapacityReading, CapacitySource, SourceError
from airflow_gpu_dag.watermark.config import DEFAULT_SOURCE_TIMEOUT, ConfigError, PoolSpec, SourceSpec
from airflow_gpu_dag.watermark.kubernetes_source import (
    DEFAULT_AIRFLOW_POD_LABELS,
    GPU_RESOURCE,
    KubernetesSource,
    pod_request,
)
from airflow_gpu_dag.watermark.nvml_source import NvmlSource
from airflow_gpu_dag.watermark.own_gpus import RunningTaskGpus
from airflow_gpu_dag.watermark.prometheus_source import PrometheusSource

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_AIRFLOW_POD_LABELS",
    "GPU_RESOURCE",
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
    "pod_request",
]


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
            value = value["gpus"] if isinstance(value, dict) else value
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)  # true / 2.5: not a GPU count
            gpus = int(value)
        except (ValueError, KeyError, TypeError, OverflowError):
            raise SourceError(f"{self.path} does not hold a GPU count: {text[:40]!r}") from None
        if gpus < 0:
            raise SourceError(f"{self.path} holds a negative GPU count {gpus}")
        return CapacityReading(gpus, f"file {gpus}")


def build_sources(specs: Iterable[PoolSpec], client: Any = None) -> dict[str, CapacitySource]:
    """Each pool's source (:func:`build_source`), by pool name. The ``prometheus`` sources share one
    :class:`RunningTaskGpus`: one REST read of the running task instances per tick, not one per pool.

    :raises ConfigError: naming the pool whose source cannot be built.
    """
    running = RunningTaskGpus(client) if client is not None else None
    sources: dict[str, CapacitySource] = {}
    for spec in specs:
        try:
            sources[spec.name] = build_source(spec.source, client, pool=spec.name, running=running)
        except ValueError as err:
            raise ConfigError(f"pools.{spec.name}.source: {err}") from None
    return sources


def build_source(
    spec: SourceSpec, client: Any = None, pool: str | None = None, running: RunningTaskGpus | None = None
) -> CapacitySource:
    """Instantiate the source a pool's configuration names.

    :param client: the controller's REST client; a ``prometheus`` source uses it to tell GPUs busy
        with our running task instances (per worker host) from GPUs busy with foreign work.
    :param pool: the pool the source measures: only its own tasks' GPUs count as "ours" (Airflow
        subtracts their slots); a GPU held by a task of another pool is not free for this one.
    :param running: the running task instances' GPUs to use (shared by the pools; default: read with
        ``client``).
    """
    options = dict(spec.options)
    try:
        if spec.type == "static":
            return StaticSource(int(options["gpus"]))
        if spec.type == "file":
            return FileSource(str(options["path"]), max_age=options.get("max_age"))
        if spec.type == "nvml":
            return NvmlSource(**options, pool=pool)
        if spec.type == "kubernetes":
            return KubernetesSource(**options)
        if spec.type == "prometheus":
            if "our_work" not in options and (running is not None or client is not None):
                options["our_work"] = functools.partial((running or RunningTaskGpus(client)).by_host, pool)
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
    #: :func:`source_fingerprint` of the source that measured ``last_good`` (kept in the pool state).
    source: str | None = None


def source_fingerprint(spec: SourceSpec) -> str:
    """A short id of a source configuration (type and options), saved with the pool's last good value:
    after a configuration change, a value measured by the old source is not restored."""
    raw = json.dumps({"type": spec.type, "options": dict(spec.options)}, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


class CapacityTracker:
    """The fault ladder of one pool: last good value for ``stale_intervals`` failed ticks, then floor."""

    def __init__(self, spec: PoolSpec, source: CapacitySource) -> None:
        self.spec = spec
        self.source = source
        self.last_good: int | None = None
        self.failures = 0
        self._hung: threading.Thread | None = None
        self.fingerprint = source_fingerprint(spec.source)

    def _call(self) -> CapacityReading:
        """``source.read()`` in a worker thread joined for ``spec.source_timeout`` seconds: a read
        still running then counts as a failure, and none other starts until it returns (the sources
        bound their own calls too, see docs/watermarks.md#timeouts; a call into a C library such as
        NVML cannot be interrupted)."""
        timeout = self.spec.source_timeout or DEFAULT_SOURCE_TIMEOUT
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
        if not isinstance(gpus, int) or isinstance(gpus, bool) or not 0 <= gpus <= MAX_POOL_SLOTS:
            raise SourceError(f"invalid GPU count {gpus!r} (expected 0 to {MAX_POOL_SLOTS:,})")
        return reading

    def restore(self, last_good: int | None, failures: int, source: str | None = None) -> bool:
        """Continue from state saved in the pool description by a previous controller; a last good
        value another source configuration measured (``source``: its fingerprint) is not taken: a
        source that now fails must not keep a capacity the old one saw, and one this tracker measured
        since (a first tick that could not read the pools still read the sources) is newer. True when
        restored."""
        if self.last_good is not None:  # measured since this controller started: newer than the saved one
            return False
        if source is not None and source != self.fingerprint:
            log.warning(
                "pool %s: its source configuration changed; not restoring last good %s",
                self.spec.name,
                last_good,
            )
            self.last_good, self.failures = None, 0
            return False
        self.last_good = last_good
        self.failures = max(0, int(failures))
        return True

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
                    self.fingerprint,
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
                self.fingerprint,
            )
        self.failures = 0
        self.last_good = max(0, int(reading.gpus))
        return PoolCapacity(self.last_good, "ok", reading.detail, 0, self.last_good, self.fingerprint)
