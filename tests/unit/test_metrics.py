"""The provider's metrics arrive at a real StatsD listener (a UDP socket on localhost) through Airflow's
own stats client, with the names and tags documented in docs/metrics.md."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from tests.unit.watermark.conftest import (
    NOW,
    FakeRest,
    Source,
    ti,
)

DOCS = Path(__file__).parents[2] / "docs" / "metrics.md"


class StatsdListener:
    """A StatsD server in miniature: collects the datagrams sent to 127.0.0.1:<port>."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []

    def drain(self, until: str | None = None, timeout: float = 10.0) -> list[str]:
        """Read what arrived (until a line containing ``until`` was seen, or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data, _ = self.sock.recvfrom(65536)
            except TimeoutError:
                if until is None or any(until in line for line in self.lines):
                    break
                continue
            self.lines.extend(data.decode().splitlines())
        return self.lines

    def value(self, name: str) -> tuple[float, str]:
        """The last ``(value, type)`` sent for ``airflow.<name>``."""
        for line in reversed(self.lines):
            stat, _, rest = line.partition(":")
            if stat == f"airflow.{name}":
                value, kind = rest.split("|")[:2]
                return float(value), kind
        raise AssertionError(f"{name} never arrived; got {sorted({ln.split(':')[0] for ln in self.lines})}")


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdListener]:
    listener = StatsdListener()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    monkeypatch.setenv("AIRFLOW__METRICS__LEGACY_NAMES_ON", "True")
    metrics.configure(force=True)
    try:
        yield listener
    finally:
        listener.sock.close()
        monkeypatch.undo()
        metrics.configure(force=True)  # back to this process's defaults (no StatsD)


def test_controller_tick_metrics_reach_statsd(statsd: StatsdListener) -> None:
    rest = FakeRest()
    rest.tis = [ti("hold", "running", started=NOW - 10, duration=100), ti("wide", "scheduled", slots=4)]
    config = parse_config(
        {
            "pools": {"gpu": {"source": 0, "backfill": False}, "gpu_down": {"source": 0, "floor": 1}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    sources = {"gpu": Source(4), "gpu_down": Source(RuntimeError("exporter down"))}
    controller = WatermarkController(config, rest, sources, default_duration=60.0, clock=lambda: NOW)  # type: ignore[arg-type]
    controller.tick()
    statsd.drain(until="gpu_dag.watermark.ticks")
    # tagged names (OpenTelemetry / Datadog / influx-style StatsD keep the tags) ...
    assert statsd.value("gpu_dag.watermark.capacity") in {(4.0, "g"), (1.0, "g")}
    # ... and, for plain StatsD, the same value under a name ending with the tag
    assert statsd.value("gpu_dag.watermark.capacity.gpu") == (4.0, "g")
    assert statsd.value("gpu_dag.watermark.pool_size.gpu") == (0.0, "g")
    assert statsd.value("gpu_dag.watermark.reserved_slots.gpu") == (4.0, "g")
    assert statsd.value("gpu_dag.watermark.backfill_slots.gpu") == (0.0, "g")
    assert statsd.value("gpu_dag.watermark.source_status.gpu") == (0.0, "g")
    assert statsd.value("gpu_dag.watermark.source_status.gpu_down") == (2.0, "g")  # floor: no last good
    assert statsd.value("gpu_dag.watermark.source_failed_intervals.gpu_down") == (1.0, "g")
    assert statsd.value("gpu_dag.watermark.pool_writes.gpu") == (1.0, "c")
    assert statsd.value("gpu_dag.watermark.ticks.active") == (1.0, "c")
    duration, kind = statsd.value("gpu_dag.watermark.tick_duration.active")
    assert kind == "ms" and duration >= 0
    controller.shutdown()  # fail open on a clean stop is counted
    statsd.drain(until="gpu_dag.watermark.fail_open.gpu")
    assert statsd.value("gpu_dag.watermark.fail_open.gpu") == (1.0, "c")


def test_lease_metrics_reach_statsd(statsd: StatsdListener, tmp_path: Path) -> None:
    settings = LeaseSettings(lease_dir=tmp_path, ttl_s=60, heartbeat_s=5, poll_s=0.05, wait_timeout_s=30)
    manager = LeaseManager(settings, parse_inventory("2xa100:80GiB"))
    owner = LeaseOwner(dag_id="d", task_id="t", run_id="r", try_number=1, pool="gpu_a100")
    with manager.lease(GpuRequest(2), owner):
        time.sleep(0.2)
    statsd.drain(until="gpu_dag.lease.gpu_seconds.gpu_a100")
    wait, kind = statsd.value("gpu_dag.lease.wait_time.gpu_a100")
    assert kind == "ms" and wait >= 0
    gpu_seconds, kind = statsd.value("gpu_dag.lease.gpu_seconds.gpu_a100")
    assert kind == "c" and gpu_seconds >= 0.4  # 2 GPUs for at least 0.2 s
    metrics.lease_used(2, 0.0, 30.0, "reclaimed", "gpu_a100")
    statsd.drain(until="gpu_dag.lease.reclaims.gpu_a100")
    assert statsd.value("gpu_dag.lease.reclaims.gpu_a100") == (1.0, "c")


def test_priority_metrics_reach_statsd(statsd: StatsdListener, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_cache_counts", {})  # hits other tests' strategies counted
    metrics.priority_plan_time(1.25, "packing")
    metrics.priority_cache(True, "packing")
    metrics.priority_cache(False, "packing")
    statsd.drain(until="gpu_dag.priority.cache_misses.packing")
    assert statsd.value("gpu_dag.priority.plan_time.packing") == (1250.0, "ms")
    assert statsd.value("gpu_dag.priority.cache_hits.packing") == (1.0, "c")
    assert statsd.value("gpu_dag.priority.cache_misses.packing") == (1.0, "c")


def test_plan_error_metrics_reach_statsd(statsd: StatsdListener) -> None:
    metrics.plan_error("pipe", {"median": 4.5, "p90": 12.0}, {"median": None, "p90": 30.0})
    statsd.drain(until="gpu_dag.plan.end_error_tail.pipe")
    assert statsd.value("gpu_dag.plan.start_error_median.pipe") == (4.5, "g")
    assert statsd.value("gpu_dag.plan.start_error_tail.pipe") == (12.0, "g")
    assert statsd.value("gpu_dag.plan.end_error_tail.pipe") == (30.0, "g")
    with pytest.raises(AssertionError, match="never arrived"):  # no value: nothing sent
        statsd.value("gpu_dag.plan.end_error_median.pipe")


def test_cache_hits_are_added_up_not_sent_per_get_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """get_weight runs per task instance in the scheduler loop: a hit must not cost a StatsD packet."""
    sent: list[tuple[str, float]] = []
    monkeypatch.setattr(metrics, "_cache_counts", {})  # hits other tests' strategies counted
    monkeypatch.setattr(
        metrics, "_send", lambda kind, name, value, tags, per=None: sent.append((name, value))
    )
    metrics.flush_priority_cache()
    for _ in range(1000):
        metrics.priority_cache(True, "critical_path")
    assert sent == []  # within PRIORITY_CACHE_FLUSH_S of the last flush
    metrics.priority_cache(False, "critical_path")  # a miss sends what was counted
    assert sent == [("gpu_dag.priority.cache_hits", 1000), ("gpu_dag.priority.cache_misses", 1)]
    sent.clear()
    monkeypatch.setattr(metrics, "PRIORITY_CACHE_FLUSH_S", 0.0)
    metrics.priority_cache(True, "critical_path")
    assert sent == [("gpu_dag.priority.cache_hits", 1)]


def test_metrics_go_through_the_public_task_sdk_stats(statsd: StatsdListener) -> None:
    """The backend is ``airflow.sdk.observability.stats``, Airflow's public stats API (not its private
    ``airflow.sdk._shared...`` / ``airflow._shared...`` modules, which move between versions)."""
    from airflow.sdk.observability import stats

    assert metrics._stats() is stats


def test_a_new_process_configures_the_stats_from_metrics_settings(
    statsd: StatsdListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a process the provider has not configured yet (a worker, the scheduler), the first metric
    configures the stats from ``[metrics]``, whatever backend the stats module held before."""
    from airflow.sdk.observability import stats

    class Nowhere:
        def __getattr__(self, name: str) -> object:
            return lambda *args, **kwargs: None

    stats.initialize(factory=Nowhere, export_legacy_names=True)
    monkeypatch.setitem(metrics._state, "pid", None)  # as after a fork: this process has sent nothing yet
    metrics.watermark_tick(0.5, active=True)
    statsd.drain(until="gpu_dag.watermark.ticks.active")
    assert statsd.value("gpu_dag.watermark.ticks.active") == (1.0, "c")


def test_metrics_never_raise_without_a_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> object:
        raise RuntimeError("no stats")

    monkeypatch.setattr(metrics, "_stats", broken)
    metrics.watermark_tick(0.1, True)
    metrics.lease_used(1, 0, 1, "success", None)
    metrics.priority_cache(True, "packing")


def test_every_metric_is_documented() -> None:
    text = DOCS.read_text()
    documented = set(re.findall(r"^\| `(gpu_dag\.[a-z_.]+)`", text, re.MULTILINE))
    assert set(metrics.METRICS) <= documented, set(metrics.METRICS) - documented
    assert documented <= set(metrics.METRICS), documented - set(metrics.METRICS)
    for name, (kind, tags, _) in metrics.METRICS.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}`"))
        assert kind in row and all(f"`{tag}`" in row for tag in tags), row
