"""``airflow_gpu_dag.testing.faults`` on plain processes (the real-Airflow use is
tests/integration/test_chaos_real.py): kill -9 reaches the main process only, the children live on
until reaped, and a component that exited is reported."""

from __future__ import annotations

import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from airflow_gpu_dag.testing.errors import ClusterError
from airflow_gpu_dag.testing.faults import (
    HEALTH_KEYS,
    _healthy,
    component,
    dead_components,
    kill_component,
    reap_component,
    restart_component,
    start_component,
)
from airflow_gpu_dag.testing.processes import Components

#: A "component": a Python process that starts a child and waits for it.
PARENT = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
    "print(child.pid, flush=True); time.sleep(120)"
)


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    components = Components()
    fake = SimpleNamespace(_components=components)
    fake.pids = components.pids
    comp = components.spawn(
        "scheduler", [sys.executable, "-c", PARENT], {}, tmp_path, tmp_path / "scheduler.log"
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "scheduler.log").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert comp.proc is not None
    yield fake
    components.stop(grace=5)


def _child(tmp_path: Path) -> psutil.Process:
    return psutil.Process(int((tmp_path / "scheduler.log").read_text().split()[0]))


def test_kill_reaches_the_main_process_only_and_reap_takes_the_rest(cluster: Any, tmp_path: Path) -> None:
    child = _child(tmp_path)
    assert dead_components(cluster) == {}
    pid = kill_component(cluster, "scheduler")
    assert pid == component(cluster, "scheduler").proc.pid  # type: ignore[union-attr]
    assert dead_components(cluster) == {"scheduler": -signal.SIGKILL}
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE  # orphaned, alive
    assert reap_component(cluster, "scheduler") == 1
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_unknown_component_is_a_clear_error(cluster: Any) -> None:
    with pytest.raises(ClusterError, match="no component 'triggerer'"):
        kill_component(cluster, "triggerer")


# -- a fake cluster that can restart a component ---------------------------------------------------------
class _FakeCluster:
    """What ``faults`` uses of an ``AirflowCluster``: its components, ``_restart``, ``health`` (a
    callable set per test), ``log_tails`` and ``_warm_up_execution_api``."""

    def __init__(self, tmp_path: Path, health: Any = None) -> None:
        self._components = Components()
        self.tmp_path = tmp_path
        self.health_answer = health
        self.warmed = 0
        self.restarts = 0

    @property
    def pids(self) -> dict[str, int]:
        return self._components.pids

    def spawn(self, name: str, code: str) -> Any:
        log = self.tmp_path / f"{name}.log"
        return self._components.spawn(name, [sys.executable, "-c", code], {}, self.tmp_path, log)

    def _restart(self, name: str) -> Any:
        self.restarts += 1
        old = self._components.latest()[name]
        return self._components.spawn(name, old.argv, {}, self.tmp_path, old.log_path)

    def health(self) -> dict[str, object]:
        if isinstance(self.health_answer, Exception):
            raise self.health_answer
        return self.health_answer() if callable(self.health_answer) else self.health_answer

    def log_tails(self, lines: int = 40) -> str:
        return "----- LOG TAILS -----"

    def _warm_up_execution_api(self) -> None:
        self.warmed += 1


def _future_beat() -> str:
    """A heartbeat an hour from now, written as Airflow does (UTC, ``Z``)."""
    return (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _healthy_scheduler() -> dict[str, object]:
    return {"scheduler": {"status": "healthy", "latest_scheduler_heartbeat": _future_beat()}}


def _wait_for_log(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture
def fake(tmp_path: Path) -> Any:
    cluster = _FakeCluster(tmp_path, health=_healthy_scheduler)
    yield cluster
    cluster._components.stop(grace=5)


def test_a_bad_leftovers_value_is_refused_before_anything_is_killed(fake: Any) -> None:
    comp = fake.spawn("scheduler", "import time; time.sleep(120)")
    with pytest.raises(ValueError, match="leftovers must be 'kill' or 'keep', not 'KILL'"):
        restart_component(fake, "scheduler", leftovers="KILL")
    assert comp.proc.poll() is None
    assert fake.restarts == 0


def test_start_component_refuses_a_component_that_still_runs(fake: Any) -> None:
    comp = fake.spawn("scheduler", "import time; time.sleep(120)")
    with pytest.raises(
        ClusterError, match=rf"scheduler \(pid {comp.proc.pid}\) is still running; kill it first"
    ):
        start_component(fake, "scheduler")
    assert fake.restarts == 0


def test_start_component_of_an_unknown_component_names_the_ones_there_are(fake: Any) -> None:
    fake.spawn("scheduler", "import time; time.sleep(120)")
    with pytest.raises(ClusterError, match=r"no component 'triggerer'; it has \['scheduler'\]"):
        start_component(fake, "triggerer")


def test_a_restarted_component_that_exits_is_reported_with_its_status_and_the_logs(fake: Any) -> None:
    comp = fake.spawn("scheduler", "import sys; sys.exit(3)")
    comp.proc.wait(timeout=60)

    def restart_and_wait(name: str) -> Any:
        new = _FakeCluster._restart(fake, name)
        new.proc.wait(timeout=60)
        return new

    fake._restart = restart_and_wait
    with pytest.raises(ClusterError, match="scheduler exited with status 3 after the restart") as err:
        start_component(fake, "scheduler")
    assert "LOG TAILS" in str(err.value)


def test_start_component_returns_once_a_heartbeat_is_newer_than_the_call(fake: Any) -> None:
    comp = fake.spawn("scheduler", "import time; time.sleep(120)")
    comp.proc.kill()
    comp.proc.wait(timeout=60)
    took = start_component(fake, "scheduler")
    assert took >= 0
    assert fake.restarts == 1
    assert component(fake, "scheduler").proc.poll() is None  # the new process
    assert component(fake, "scheduler") is not comp
    assert fake.warmed == 0


def test_a_restarted_api_server_gets_its_execution_api_warmed_up(fake: Any) -> None:
    comp = fake.spawn("api-server", "import time; time.sleep(120)")
    comp.proc.kill()
    comp.proc.wait(timeout=60)
    fake.health_answer = {}  # it answered: that is healthy enough for an api-server
    start_component(fake, "api-server")
    assert fake.warmed == 1


def test_a_component_never_healthy_times_out_with_the_last_health_and_the_logs(fake: Any) -> None:
    comp = fake.spawn("scheduler", "import time; time.sleep(120)")
    comp.proc.kill()
    comp.proc.wait(timeout=60)
    fake.health_answer = {"scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": None}}
    with pytest.raises(ClusterError, match="scheduler not healthy 0s after the restart") as err:
        start_component(fake, "scheduler", timeout=0.1)
    assert "'status': 'unhealthy'" in str(err.value) and "LOG TAILS" in str(err.value)


def test_a_health_endpoint_that_fails_is_retried_and_named_when_it_times_out(fake: Any) -> None:
    comp = fake.spawn("scheduler", "import time; time.sleep(120)")
    comp.proc.kill()
    comp.proc.wait(timeout=60)
    fake.health_answer = ClusterError("connection refused")
    with pytest.raises(ClusterError, match="last health: connection refused"):
        start_component(fake, "scheduler", timeout=0.1)


@pytest.mark.parametrize("leftovers", ["kill", "keep"])
def test_restart_reaps_the_old_tree_unless_asked_to_keep_it(
    fake: Any, tmp_path: Path, leftovers: str
) -> None:
    fake.spawn("scheduler", PARENT)
    _wait_for_log(tmp_path / "scheduler.log")
    child = _child(tmp_path)
    took = restart_component(fake, "scheduler", leftovers=leftovers)
    assert took >= 0
    assert fake.restarts == 1
    child_alive = child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    assert child_alive is (leftovers == "keep")
    assert dead_components(fake) == {}  # the new process runs


def test_a_group_kill_takes_the_children_too_and_waits_for_them(fake: Any, tmp_path: Path) -> None:
    fake.spawn("scheduler", PARENT)
    _wait_for_log(tmp_path / "scheduler.log")
    child = _child(tmp_path)
    pid = kill_component(fake, "scheduler", signal.SIGTERM, group=True, grace=30)
    assert pid == component(fake, "scheduler").proc.pid
    assert dead_components(fake) == {"scheduler": -signal.SIGTERM}
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_a_component_that_exits_on_its_own_is_reported_with_its_status(fake: Any) -> None:
    comp = fake.spawn("triggerer", "import sys; sys.exit(7)")
    fake.spawn("scheduler", "import time; time.sleep(120)")
    comp.proc.wait(timeout=60)
    assert dead_components(fake) == {"triggerer": 7}


def test_reap_of_a_component_with_nothing_left_kills_nothing(fake: Any) -> None:
    comp = fake.spawn("scheduler", "import time; time.sleep(120)")
    kill_component(fake, "scheduler")
    assert comp.proc.poll() is not None
    assert reap_component(fake, "scheduler") == 0


# -- when a component counts as healthy -------------------------------------------------------------------
_SINCE = datetime(2025, 1, 1, 12, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("name", "health", "expected"),
    [
        ("api-server", {}, True),
        (
            "scheduler",
            {"scheduler": {"status": "healthy", "latest_scheduler_heartbeat": "2025-01-01T12:00:01Z"}},
            True,
        ),
        (
            "scheduler",
            {"scheduler": {"status": "healthy", "latest_scheduler_heartbeat": "2025-01-01T11:59:59+00:00"}},
            False,
        ),
        (
            "scheduler",
            {"scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": "2025-01-01T13:00:00Z"}},
            False,
        ),
        ("scheduler", {"scheduler": {"status": "healthy", "latest_scheduler_heartbeat": None}}, False),
        ("scheduler", {}, False),
        ("scheduler", {"scheduler": "healthy"}, False),
        (
            "dag-processor",
            {
                "dag_processor": {
                    "status": "healthy",
                    "latest_dag_processor_heartbeat": "2025-01-01T12:00:01Z",
                }
            },
            True,
        ),
        (
            "dag-processor",
            {
                "dag-processor": {
                    "status": "healthy",
                    "latest_dag_processor_heartbeat": "2025-01-01T12:00:01Z",
                }
            },
            False,
        ),
        (
            "triggerer",
            {"triggerer": {"status": "healthy", "latest_triggerer_heartbeat": "2025-01-01T14:00:00+02:00"}},
            False,
        ),
        ("metadatabase", {"metadatabase": {"status": "healthy"}}, True),
    ],
)
def test_a_component_is_healthy_only_with_a_heartbeat_after_the_restart(
    name: str, health: dict[str, object], expected: bool
) -> None:
    """The dead process's last heartbeat stays "healthy" for a while: only a newer one counts."""
    assert _healthy(name, health, _SINCE) is expected


def test_health_keys_name_the_fields_airflow_reports() -> None:
    assert HEALTH_KEYS["dag-processor"] == ("dag_processor", "latest_dag_processor_heartbeat")
    assert set(HEALTH_KEYS) == {"scheduler", "dag-processor", "triggerer"}
