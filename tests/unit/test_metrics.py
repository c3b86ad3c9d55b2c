"""The provider's metrics arrive at a real StatsD listener (a UDP socket on localhost) through Airflow's
own stats client, with the names and tags documented in docs/metrics.md."""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import sys
import threading
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


# -- the functions, against a fake stats module ---------------------------------------------------------
class FakeStats:
    """Records what the provider sends: ``(kind, name, value, tags)``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float, dict[str, str]]] = []

    def gauge(self, name: str, value: float, tags: dict[str, str]) -> None:
        self.sent.append(("gauge", name, value, tags))

    def timing(self, name: str, value: float, tags: dict[str, str]) -> None:
        self.sent.append(("timer", name, value, tags))

    def incr(self, name: str, value: float, tags: dict[str, str]) -> None:
        self.sent.append(("counter", name, value, tags))


@pytest.fixture
def fake_stats(monkeypatch: pytest.MonkeyPatch) -> FakeStats:
    """This process's stats, configured: a :class:`FakeStats`, legacy names on."""
    stats = FakeStats()
    monkeypatch.setitem(metrics._state, "pid", os.getpid())
    monkeypatch.setitem(metrics._state, "stats", stats)
    monkeypatch.setitem(metrics._state, "legacy", True)
    return stats


def test_a_tagged_metric_is_also_sent_with_the_tag_value_in_its_name(fake_stats: FakeStats) -> None:
    metrics.watermark_pool_write("gpu_a100", ok=True)
    metrics.watermark_pool_write("gpu_a100", ok=False)
    assert fake_stats.sent == [
        ("counter", metrics.WATERMARK_POOL_WRITES, 1, {"pool": "gpu_a100"}),
        ("counter", f"{metrics.WATERMARK_POOL_WRITES}.gpu_a100", 1, {}),
        ("counter", metrics.WATERMARK_POOL_WRITE_ERRORS, 1, {"pool": "gpu_a100"}),
        ("counter", f"{metrics.WATERMARK_POOL_WRITE_ERRORS}.gpu_a100", 1, {}),
    ]


def test_legacy_names_off_sends_each_metric_once(
    fake_stats: FakeStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(metrics._state, "legacy", False)
    metrics.watermark_fail_open("gpu_h100", "watchdog")
    assert fake_stats.sent == [
        ("counter", metrics.WATERMARK_FAIL_OPEN, 1, {"pool": "gpu_h100", "by": "watchdog"})
    ]


def test_the_legacy_name_keeps_the_other_tags(fake_stats: FakeStats) -> None:
    metrics.watermark_decision("gpu_a100", "too-wide")
    assert fake_stats.sent[1] == (
        "counter",
        f"{metrics.WATERMARK_DECISIONS}.gpu_a100",
        1,
        {"code": "too-wide"},
    )


def test_every_metric_is_sent_as_the_kind_and_with_the_tags_its_table_says(
    fake_stats: FakeStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "_cache_counts", {})
    metrics.watermark_pool(
        "p", capacity=8, size=6, reserved_slots=2, backfill_slots=1, source_status="ok", failed_intervals=0
    )
    metrics.watermark_pool_write("p", ok=True)
    metrics.watermark_pool_write("p", ok=False)
    metrics.watermark_tick(0.25, active=True)
    metrics.watermark_decision("p", "fits")
    metrics.watermark_fail_open("p", "controller")
    metrics.lease_waited(1.0, "p")
    metrics.lease_used(2, 0.0, 10.0, "reclaimed", "p")
    metrics.plan_error("d", {"median": 1.0, "p90": 2.0}, {"median": 3.0, "p90": 4.0})
    metrics.priority_plan_time(0.1, "packing")
    metrics.priority_cache(True, "packing")
    metrics.priority_cache(False, "packing")  # a miss flushes at once
    tagged = [(kind, name, set(tags)) for kind, name, _, tags in fake_stats.sent if name in metrics.METRICS]
    assert {name for _, name, _ in tagged} == set(metrics.METRICS)
    for kind, name, tags in tagged:
        assert (kind, tuple(sorted(tags))) == (
            metrics.METRICS[name][0],
            tuple(sorted(metrics.METRICS[name][1])),
        )


def test_watermark_pool_skips_an_undecided_size_and_codes_the_source_status(fake_stats: FakeStats) -> None:
    metrics.watermark_pool(
        "p",
        capacity=8,
        size=None,
        reserved_slots=0,
        backfill_slots=0,
        source_status="stale",
        failed_intervals=3,
    )
    names = [name for _, name, _, tags in fake_stats.sent if "pool" in tags]
    assert metrics.WATERMARK_POOL_SIZE not in names
    status = [(v, t) for _, name, v, t in fake_stats.sent if name == metrics.WATERMARK_SOURCE_STATUS]
    assert status == [(1, {"pool": "p", "status": "stale"})]


@pytest.mark.parametrize(("status", "code"), [("ok", 0), ("stale", 1), ("floor", 2), ("unheard-of", 2)])
def test_an_unknown_source_status_is_sent_as_the_floor_code(
    fake_stats: FakeStats, status: str, code: int
) -> None:
    metrics.watermark_pool(
        "p", capacity=1, size=1, reserved_slots=0, backfill_slots=0, source_status=status, failed_intervals=0
    )
    assert [v for _, name, v, _ in fake_stats.sent if name == metrics.WATERMARK_SOURCE_STATUS] == [code]


def test_the_tick_is_timed_in_milliseconds_by_role(fake_stats: FakeStats) -> None:
    metrics.watermark_tick(0.25, active=False)
    assert fake_stats.sent[0] == ("timer", metrics.WATERMARK_TICK_DURATION, 250.0, {"role": "standby"})
    assert fake_stats.sent[1] == ("timer", f"{metrics.WATERMARK_TICK_DURATION}.standby", 250.0, {})
    assert fake_stats.sent[2] == ("counter", metrics.WATERMARK_TICKS, 1, {"role": "standby"})


def test_a_lease_wait_is_never_negative_and_a_task_without_pool_is_tagged_none(fake_stats: FakeStats) -> None:
    """A wall clock stepped back can give a negative wait; a timer of -5 s is no wait."""
    metrics.lease_waited(-5.0, None)
    assert fake_stats.sent[:2] == [
        ("timer", metrics.LEASE_WAIT, 0.0, {"pool": "none"}),
        ("timer", f"{metrics.LEASE_WAIT}.none", 0.0, {}),
    ]


@pytest.mark.parametrize(
    ("devices", "start", "end", "gpu_seconds"),
    [
        (4, 100.0, 160.5, 242.0),
        (1, 0.0, 1 / 3, 0.333),
        (2, 50.0, 10.0, 0.0),
        (-1, 0.0, 10.0, 0.0),
        (0, 0, 9, 0.0),
    ],
)
def test_a_leases_gpu_seconds_are_devices_times_the_time_held(
    fake_stats: FakeStats, devices: int, start: float, end: float, gpu_seconds: float
) -> None:
    metrics.lease_used(devices, start, end, "success", "gpu_a100")
    assert fake_stats.sent[0] == (
        "counter",
        metrics.LEASE_GPU_SECONDS,
        gpu_seconds,
        {"pool": "gpu_a100", "outcome": "success"},
    )
    assert fake_stats.sent[1][1:] == (
        f"{metrics.LEASE_GPU_SECONDS}.gpu_a100",
        gpu_seconds,
        {"outcome": "success"},
    )
    assert len(fake_stats.sent) == 2  # no reclaim counted


def test_a_reclaimed_lease_is_also_counted_as_a_reclaim(fake_stats: FakeStats) -> None:
    metrics.lease_used(1, 0.0, 1.0, "reclaimed", None)
    assert ("counter", metrics.LEASE_RECLAIMS, 1, {"pool": "none"}) in fake_stats.sent


@pytest.mark.parametrize(
    ("devices", "start", "end"), [(0, -math.inf, 1.0), (2, 0.0, math.inf), (1, -1e308, 1e308)]
)
def test_a_lease_with_a_non_finite_time_adds_no_non_finite_gpu_seconds(
    fake_stats: FakeStats, devices: int, start: float, end: float
) -> None:
    """``acquired_at`` comes from the lease file (``float()`` of JSON, which reads ``Infinity``); one inf
    or NaN increment spoils a Prometheus counter for good."""
    metrics.lease_used(devices, start, end, "success", "p")
    assert all(math.isfinite(value) for _, _, value, _ in fake_stats.sent)


def test_plan_error_sends_only_the_values_it_has(fake_stats: FakeStats) -> None:
    metrics.plan_error("nightly", {"median": 4, "p90": None}, {})
    assert fake_stats.sent == [
        ("gauge", metrics.PLAN_START_ERROR_MEDIAN, 4.0, {"dag_id": "nightly"}),
        ("gauge", f"{metrics.PLAN_START_ERROR_MEDIAN}.nightly", 4.0, {}),
    ]


@pytest.mark.parametrize(
    ("value", "suffix"),
    [
        ("gpu_a100", "gpu_a100"),
        ("gpu a100/x:y|z", "gpu_a100_x_y_z"),
        ("gpu_ä100", "gpu__100"),
        ("", "_"),
        ("x" * 150, "x" * 100),
        (7, "7"),
    ],
)
def test_a_tag_value_in_a_name_has_only_statsd_safe_characters(value: object, suffix: str) -> None:
    assert metrics._suffix(value) == suffix


def test_a_failing_backend_is_swallowed(fake_stats: FakeStats, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("statsd is down")

    monkeypatch.setattr(fake_stats, "gauge", broken)
    metrics.plan_error("d", {"median": 1.0}, {})  # does not raise
    metrics.watermark_tick(0.1, True)  # the other kinds still go out
    assert [name for _, name, _, _ in fake_stats.sent][:1] == [metrics.WATERMARK_TICK_DURATION]


@pytest.mark.parametrize(
    "call",
    [
        lambda: metrics.watermark_tick(None, True),  # type: ignore[arg-type]
        lambda: metrics.lease_waited(None, "p"),  # type: ignore[arg-type]
        lambda: metrics.lease_used(1, None, 5.0, "success", "p"),  # type: ignore[arg-type]
        lambda: metrics.lease_used(float("nan"), 0.0, 5.0, "success", "p"),  # type: ignore[arg-type]
        lambda: metrics.plan_error("d", {"median": "n/a"}, {}),  # type: ignore[dict-item]
        lambda: metrics.priority_plan_time(None, "packing"),  # type: ignore[arg-type]
    ],
    ids=[
        "tick-none",
        "wait-none",
        "lease-start-none",
        "lease-devices-nan",
        "plan-error-text",
        "plan-time-none",
    ],
)
def test_a_metric_function_never_raises_whatever_it_is_given(fake_stats: FakeStats, call) -> None:
    """The module promises each function "never raises: a metric must never break a controller tick, a
    GPU lease or the scheduler's weight rule"; the arithmetic before ``_send`` is outside its guard."""
    call()


def test_outside_an_airflow_process_nothing_is_sent_and_airflow_is_not_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(metrics._state, "pid", None)
    monkeypatch.delitem(sys.modules, "airflow")
    configured: list[bool] = []
    monkeypatch.setattr(metrics, "configure", lambda force=False: configured.append(force))
    assert metrics._stats() is None
    metrics.watermark_tick(0.1, True)
    assert configured == []


def test_configure_runs_once_per_process_unless_forced(
    fake_stats: FakeStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail() -> None:
        raise AssertionError("configured again")

    monkeypatch.setattr(metrics, "_sdk_stats", fail)
    metrics.configure()  # this pid is configured: nothing read
    assert metrics._state["stats"] is fake_stats


def test_a_backend_that_cannot_be_configured_turns_metrics_off_with_a_warning(
    fake_stats: FakeStats, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def fail() -> None:
        raise ImportError("no stats here")

    monkeypatch.setattr(metrics, "_sdk_stats", fail)
    with caplog.at_level(logging.WARNING, logger=metrics.__name__):
        metrics.configure(force=True)
    assert metrics._state["stats"] is None and metrics._state["pid"] == os.getpid()
    assert "metrics disabled" in caplog.text
    metrics.watermark_tick(0.1, True)
    assert fake_stats.sent == []


def test_cache_counts_from_many_threads_are_all_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """``get_weight`` runs in several threads of the api-server: no count may be lost."""
    sent: list[tuple[str, str, float]] = []
    lock = threading.Lock()

    def record(kind: str, name: str, value: float, tags: dict, per: str | None = None) -> None:
        with lock:
            sent.append((name, tags["strategy"], value))

    monkeypatch.setattr(metrics, "_cache_counts", {})
    monkeypatch.setattr(metrics, "_send", record)
    monkeypatch.setattr(metrics, "PRIORITY_CACHE_FLUSH_S", 0.0)  # every hit may flush: the worst race

    def work(strategy: str) -> None:
        for i in range(500):
            metrics.priority_cache(i % 10 != 0, strategy)

    threads = [threading.Thread(target=work, args=(s,)) for s in ("a", "b", "a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    metrics.flush_priority_cache()
    totals: dict[tuple[str, str], float] = {}
    for name, strategy, value in sent:
        totals[(name, strategy)] = totals.get((name, strategy), 0) + value
    assert totals == {
        (metrics.PRIORITY_CACHE_HITS, "a"): 900,
        (metrics.PRIORITY_CACHE_MISSES, "a"): 100,
        (metrics.PRIORITY_CACHE_HITS, "b"): 900,
        (metrics.PRIORITY_CACHE_MISSES, "b"): 100,
    }


def test_flush_sends_nothing_when_nothing_was_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[object] = []
    monkeypatch.setattr(metrics, "_cache_counts", {})
    monkeypatch.setattr(metrics, "_send", lambda *args, **kwargs: sent.append(args))
    metrics.flush_priority_cache()
    assert sent == []
