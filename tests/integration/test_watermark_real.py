"""The watermark controller against a real Airflow api-server: faults, restart, two controllers, CLI,
and failing open (kill -9 of a controller holding a pool at 0: the scheduler's watchdog opens it).

Capacity comes from fakes that fail on demand (or a ``file``/static source for the CLI subprocess);
pools, descriptions and the lease Variable are real and read back over REST. The scheduler checks for
lapsed claims every second (``[gpu_dag] watermark_watchdog_interval``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.pool_claim.state import parse_pool_state
from airflow_gpu_dag.testing import AirflowCluster
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController, build_controller, parse_state
from airflow_gpu_dag.watermark.sources import CapacityReading, SourceError

pytestmark = pytest.mark.airflow_real

AIRFLOW_DAGS = "watermark"
AIRFLOW_POOLS = {"gpu_wm": 2}
WATCHDOG_INTERVAL = 1.0
AIRFLOW_ENV = {"AIRFLOW__GPU_DAG__WATERMARK_WATCHDOG_INTERVAL": str(WATCHDOG_INTERVAL)}


class FakeSource:
    """A capacity source whose next reads succeed, raise, return garbage or hang, on demand."""

    kind = "fake"

    def __init__(self, gpus: int) -> None:
        self.mode = "ok"
        self.gpus = gpus
        self.unblock = threading.Event()

    def read(self) -> CapacityReading:
        if self.mode == "source_error":
            raise SourceError("dcgm exporter unreachable")
        if self.mode == "crash":
            raise KeyError("bug in the source")
        if self.mode == "garbage":
            return CapacityReading(-3, "garbage")
        if self.mode == "hang":
            self.unblock.wait(30)
        return CapacityReading(self.gpus, f"fake {self.gpus}")


@pytest.fixture(scope="module")
def cluster(airflow_cluster: AirflowCluster) -> Iterator[AirflowCluster]:
    yield airflow_cluster


@pytest.fixture
def client(cluster: AirflowCluster) -> Iterator[AirflowRestClient]:
    rest = AirflowRestClient(cluster.api_url, cluster.USERNAME, cluster.PASSWORD)
    yield rest
    rest.close()


def _config(pool: str, **extra: Any) -> Any:
    lease = extra.pop("lease", {"lock_file": None, "variable": None})
    settings = {"source": 0, "floor": 1, "stale_intervals": 2, "source_timeout": 1.0, **extra}
    # claims of 10 min: the scheduler's watchdog must not fail a pool open between two ticks the test
    # makes by hand (3 intervals of 1 s would lapse whenever a REST call is slow on a loaded machine)
    config = {"interval": 1, "fail_open_after": 600, "pools": {pool: settings}, "lease": lease}
    return parse_config(config)


@pytest.mark.parametrize("mode", ["source_error", "crash", "garbage", "hang"])
def test_fault_ladder_last_good_then_floor(
    cluster: AirflowCluster, client: AirflowRestClient, mode: str
) -> None:
    pool = f"gpu_fault_{mode}"
    source = FakeSource(6)
    controller = WatermarkController(_config(pool), client, {pool: source}, default_duration=60)
    controller.tick()
    assert cluster.get_pool(pool)["slots"] == 6  # created at the watermark
    source.mode = mode
    for failed in (1, 2):
        controller.tick()
        body = cluster.get_pool(pool)
        assert body["slots"] == 6, body
        assert f"source stale: fake failed {failed}/2" in body["description"]
        assert "last good 6 kept" in body["description"]
    controller.tick()
    body = cluster.get_pool(pool)
    assert body["slots"] == 1 and "source floor: fake failed 3 intervals" in body["description"], body
    reason = {
        "source_error": "dcgm exporter unreachable",
        "crash": "KeyError: 'bug in the source'",
        "garbage": "invalid GPU count -3",
        "hang": "within 1s",
    }[mode]
    assert reason in body["description"]
    source.unblock.set()
    source.mode, source.gpus = "ok", 5
    time.sleep(0.2)  # let a hung read finish
    controller.tick()
    body = cluster.get_pool(pool)
    assert body["slots"] == 5 and "source ok: fake 5" in body["description"]


def test_restarted_controller_restores_sizes_and_the_ladder(
    cluster: AirflowCluster, client: AirflowRestClient
) -> None:
    pool = "gpu_restart"
    source = FakeSource(4)
    first = WatermarkController(_config(pool, stale_intervals=3), client, {pool: source}, default_duration=60)
    first.tick()
    source.mode = "source_error"
    first.tick()
    assert parse_state(cluster.get_pool(pool)["description"]) == (4, 1)
    del first  # crash: nothing of it survives
    cluster.set_pool(pool, 9, description="edited by hand while no controller ran")
    second = WatermarkController(
        _config(pool, stale_intervals=3), client, {pool: source}, default_duration=60
    )
    second.tick()  # one interval after the restart
    body = cluster.get_pool(pool)
    # the source is still down and the hand-edited description holds no state: last good unknown
    assert body["slots"] == 1 and "source floor" in body["description"]
    source.mode = "ok"
    second.tick()
    assert cluster.get_pool(pool)["slots"] == 4
    source.mode = "source_error"
    second.tick()
    third = WatermarkController(_config(pool, stale_intervals=3), client, {pool: source}, default_duration=60)
    third.tick()  # restarted mid-outage: continues from the saved state (last good 4, 1 failure -> 2)
    body = cluster.get_pool(pool)
    assert body["slots"] == 4 and "failed 2/3" in body["description"], body


def test_two_controllers_do_not_fight(
    cluster: AirflowCluster, client: AirflowRestClient, tmp_path: Path
) -> None:
    pool = "gpu_lease"
    # a 30 s lease on a clock the test moves forward: a slow tick on a loaded machine cannot let it lapse
    lease = {"lock_file": None, "variable": "gpu_dag_watermark_lease_test", "ttl": 30}
    config = _config(pool, lease=lease)
    ahead = [0.0]

    def clock() -> float:
        return time.time() + ahead[0]

    one = build_controller(config, client, "controller-one", {pool: FakeSource(4)}, clock=clock)
    two = build_controller(config, client, "controller-two", {pool: FakeSource(2)}, clock=clock)
    for _ in range(3):
        assert one.tick() and not two.tick()
        assert cluster.get_pool(pool)["slots"] == 4
    variable = cluster.api("GET", "/variables/gpu_dag_watermark_lease_test").json()
    assert json.loads(variable["value"])["holder"] == "controller-one"
    ahead[0] += 31  # "one" crashed: its lease expires
    assert two.tick() and cluster.get_pool(pool)["slots"] == 2
    assert not one.tick()  # back from the dead, it stands by
    assert cluster.get_pool(pool)["slots"] == 2
    assert two.leader_lock is not None
    two.leader_lock.release()
    assert one.tick()  # a clean shutdown hands over at once


def _cli_env(cluster: AirflowCluster) -> dict[str, str]:
    env = dict(cluster.env)
    env["AIRFLOW_CONN_GPU_DAG_API"] = (
        f"http://{cluster.USERNAME}:{cluster.PASSWORD}@{cluster.api_url.split('://', 1)[1]}"
    )
    return env


def _airflow() -> str:
    return str(Path(sys.executable).parent / "airflow")


def test_cli_once_and_long_running_with_host_lock(cluster: AirflowCluster, tmp_path: Path) -> None:
    capacity = tmp_path / "gpus"
    capacity.write_text("3")
    config = tmp_path / "watermark.yaml"
    config.write_text(
        "interval: 1\n"
        f"lease: {{lock_file: {tmp_path / 'wm.lock'}, variable: null}}\n"
        "pools:\n  gpu_cli:\n"
        f"    source: {{type: file, path: {capacity}}}\n    floor: 0\n    stale_intervals: 1\n"
    )
    env = _cli_env(cluster)
    once = subprocess.run(
        [_airflow(), "gpu-dag", "watermark", "--once", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert once.returncode == 0, once.stderr[-3000:]
    assert "gpu_cli: size 3 capacity 3 (source ok: file 3) written" in once.stdout
    assert cluster.get_pool("gpu_cli")["slots"] == 3
    assert cluster.PASSWORD not in once.stdout + once.stderr

    daemon = subprocess.Popen(
        [_airflow(), "gpu-dag", "watermark", "--config", str(config), "--interval", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        capacity.write_text("2")
        deadline = time.monotonic() + 120
        while cluster.get_pool("gpu_cli")["slots"] != 2:
            assert daemon.poll() is None and time.monotonic() < deadline, (
                "long-running controller did not follow"
            )
            time.sleep(0.5)
        standby = subprocess.run(
            [_airflow(), "gpu-dag", "watermark", "--once", "--config", str(config)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert "standing by" in standby.stdout, standby.stdout + standby.stderr[-2000:]
        capacity.unlink()  # the source fails: stale for 1 interval, then floor 0
        deadline = time.monotonic() + 120  # its own wait: the standby's CLI boot above may take a while
        while cluster.get_pool("gpu_cli")["slots"] != 0:
            assert daemon.poll() is None and time.monotonic() < deadline, (
                "controller did not fall to the floor"
            )
            time.sleep(0.5)
        assert "source floor" in cluster.get_pool("gpu_cli")["description"]
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        output, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, output[-3000:]
    assert "stopping the watermark controller" in output
    assert cluster.PASSWORD not in output


# -- failing open ------------------------------------------------------------------------------------------
FO_POOL, FO_DAG, FO_CAPACITY, FO_INTERVAL, FO_AFTER = "gpu_fo", "wm_failopen", 2, 2.0, 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return -1  # nothing listens


def _wait(what: str, check: Any, cluster: AirflowCluster, timeout: float = 180.0) -> float:
    """Poll ``check()`` until true; returns the time it first was. Fails with the scheduler's view."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pool = cluster.get_pool(FO_POOL)
            pytest.fail(f"timed out waiting for {what}; pool {pool}\n{cluster.log_tails(40)}")
        time.sleep(0.25)
    return time.time()


def _controller(cluster: AirflowCluster, config: Path, *extra: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [_airflow(), "gpu-dag", "watermark", "--config", str(config), *extra],
        env={**_cli_env(cluster), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


class _StatsdSink:
    """A UDP socket read by a thread as datagrams arrive.

    A socket read only at the end of the test fills its kernel buffer on a slow run, and the
    datagrams sent last (the SIGTERM release) are dropped.
    """

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="statsd-sink", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                self._lines += self._sock.recvfrom(65536)[0].decode().splitlines()
            except TimeoutError:
                if self._stop.is_set():
                    return

    def close(self) -> list[str]:
        """Stop once the socket has been quiet for a moment; return every line received."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._sock.close()
        return self._lines


def test_kill_9_while_the_pool_is_shut_fails_open_and_all_work_completes(
    cluster: AirflowCluster, client: AirflowRestClient, tmp_path: Path
) -> None:
    config = tmp_path / "watermark.yaml"
    config.write_text(
        f"interval: {FO_INTERVAL:g}s\nfail_open_after: {FO_AFTER}\n"
        f"lease: {{lock_file: {tmp_path / 'wm.lock'}, variable: null}}\n"
        f"pools:\n  {FO_POOL}:\n    source: {FO_CAPACITY}\n    backfill: false\n    lookahead: false\n"
    )
    statsd = _StatsdSink()
    metrics_env = {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
    }
    port, heartbeat = _free_port(), tmp_path / "heartbeat.json"
    cluster.wait_for_dag(FO_DAG)
    cluster.set_pool(FO_POOL, 1)  # "hold" takes the only slot; the rest waits for the controller
    release = tmp_path / "release-hold"  # "hold" keeps the pool's slot until the test touches it
    run_id = cluster.trigger(FO_DAG, {"release": str(release)})

    def states() -> dict[str, str | None]:
        return {ti["task_id"]: ti.get("state") for ti in cluster.task_instances(FO_DAG, run_id)}

    _wait("hold running, wide scheduled", lambda: states().get("wide") == "scheduled", cluster)
    assert states()["hold"] in ("running", "queued")
    daemon = _controller(
        cluster, config, "--health-port", str(port), "--heartbeat-file", str(heartbeat), **metrics_env
    )
    restarted: subprocess.Popen[str] | None = None
    try:
        shut = _wait(
            "the reservation to hold the pool at 0",
            lambda: (
                cluster.get_pool(FO_POOL)["slots"] == 0
                and "reserving 2 slots for wm_failopen/" in (cluster.get_pool(FO_POOL)["description"] or "")
            ),
            cluster,
        )
        _wait("GET /health 200", lambda: _health(port) == 200, cluster, timeout=60)
        probe = subprocess.run(
            [_airflow(), "gpu-dag", "watermark-health", "--heartbeat-file", str(heartbeat)],
            env=_cli_env(cluster),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert probe.returncode == 0, probe.stdout + probe.stderr[-2000:]
        # another controller group may not manage the same pool: a clear error, nothing written
        other = tmp_path / "other.yaml"
        other.write_text(
            f"lease: {{lock_file: null, variable: other_lease}}\npools:\n  {FO_POOL}:\n    source: 8\n"
        )
        before = cluster.get_pool(FO_POOL)
        refused = subprocess.run(
            [_airflow(), "gpu-dag", "watermark", "--config", str(other), "--once"],
            env=_cli_env(cluster),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert refused.returncode == 1, refused.stdout + refused.stderr[-2000:]
        assert (
            "managed by another watermark controller" in refused.stderr
            and "Nothing was written" in refused.stderr
        )
        assert cluster.api("GET", "/variables/other_lease", check=False).status_code == 404
        assert cluster.get_pool(FO_POOL)["slots"] == 0 and before["slots"] == 0

        claim = parse_pool_state(cluster.get_pool(FO_POOL)["description"])
        assert claim is not None and claim.expires is not None, claim
        os.killpg(daemon.pid, signal.SIGKILL)  # crash: no clean stop, the pool stays at 0 ...
        killed = time.time()
        daemon.communicate(timeout=60)
        # ... until the claim lapses (a read delayed past that on a loaded machine may see it open)
        after_kill = cluster.get_pool(FO_POOL)
        assert after_kill["slots"] == 0 or time.time() >= claim.expires, (after_kill, claim)
        opened = _wait(
            "the watchdog to open the pool", lambda: cluster.get_pool(FO_POOL)["slots"] == 2, cluster
        )
        description = cluster.get_pool(FO_POOL)["description"]
        bound = FO_AFTER * FO_INTERVAL + WATCHDOG_INTERVAL
        print(
            f"\npool {FO_POOL} shut (0 of {FO_CAPACITY}) for {opened - shut:.1f}s in all; "
            f"{opened - killed:.1f}s after kill -9 of the controller (bound: fail_open_after x interval "
            f"+ watchdog interval = {bound:g}s, plus scheduler latency)\n{description}"
        )
        assert "failed open by the scheduler's watchdog" in description
        assert opened - killed < bound + 60  # generous for a loaded CI box; the print has the real value
        assert _health(port) == -1
        beat = json.loads(heartbeat.read_text())
        time.sleep(max(0.0, beat["last_tick"] + 1.5 - time.time()))
        stale = subprocess.run(
            [_airflow(), "gpu-dag", "watermark-health", "--heartbeat-file", str(heartbeat), "--max-age", "1"],
            env=_cli_env(cluster),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert stale.returncode == 1 and "stale" in stale.stdout, stale.stdout + stale.stderr[-2000:]

        # a restarted controller holds the reservation again; SIGTERM writes the pool back at once
        restarted = _controller(cluster, config, **metrics_env)
        _wait(
            "the restarted controller to reserve",
            lambda: cluster.get_pool(FO_POOL)["slots"] < FO_CAPACITY or states().get("wide") != "scheduled",
            cluster,
        )
        os.killpg(restarted.pid, signal.SIGTERM)
        output, _ = restarted.communicate(timeout=120)
        assert restarted.returncode == 0, output[-3000:]
        pool = cluster.get_pool(FO_POOL)
        assert pool["slots"] == FO_CAPACITY and "released at" in pool["description"], pool
        assert '"expires"' not in pool["description"]
        release.touch()
        assert cluster.wait_for_run(FO_DAG, run_id, timeout=400) == "success"
        assert set(states().values()) == {"success"}, states()
    finally:
        release.touch()
        for proc in (daemon, restarted):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=60)
        lines = statsd.close()
    # the controller's metrics reached a real StatsD socket through Airflow's stats client
    assert f"airflow.gpu_dag.watermark.pool_size.{FO_POOL}:0|g" in lines, sorted(set(lines))[:40]
    assert f"airflow.gpu_dag.watermark.reserved_slots.{FO_POOL}:2|g" in lines
    assert any(line.startswith("airflow.gpu_dag.watermark.tick_duration.active:") for line in lines)
    assert f"airflow.gpu_dag.watermark.fail_open.{FO_POOL}:1|c" in lines  # the SIGTERM release
