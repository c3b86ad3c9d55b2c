"""The watermark controller against a real Airflow api-server: faults, restart, two controllers, CLI.

Capacity comes from fakes that fail on demand (or a ``file`` source for the CLI subprocess); pools,
descriptions and the lease Variable are real and read back over REST.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.testing import AirflowCluster
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController, build_controller, parse_state
from airflow_gpu_dag.watermark.sources import CapacityReading, SourceError

pytestmark = pytest.mark.airflow_real

AIRFLOW_DAGS = "watermark"
AIRFLOW_POOLS = {"gpu_wm": 2}


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
    return parse_config({"interval": 1, "pools": {pool: settings}, "lease": lease})


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
    lease = {"lock_file": None, "variable": "gpu_dag_watermark_lease_test", "ttl": 3}
    config = _config(pool, lease=lease)
    one = build_controller(config, client, "controller-one", {pool: FakeSource(4)})
    two = build_controller(config, client, "controller-two", {pool: FakeSource(2)})
    for _ in range(3):
        assert one.tick() and not two.tick()
        assert cluster.get_pool(pool)["slots"] == 4
    variable = cluster.api("GET", "/variables/gpu_dag_watermark_lease_test").json()
    assert json.loads(variable["value"])["holder"] == "controller-one"
    time.sleep(3.5)  # "one" crashed: its lease expires
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
