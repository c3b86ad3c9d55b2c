"""``airflow_gpu_dag.testing.faults`` on plain processes (the real-Airflow use is
tests/integration/test_chaos_real.py): kill -9 reaches the main process only, the children live on
until reaped, and a component that exited is reported."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from airflow_gpu_dag.testing.errors import ClusterError
from airflow_gpu_dag.testing.faults import component, dead_components, kill_component, reap_component
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
