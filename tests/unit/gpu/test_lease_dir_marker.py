"""Tests of ``airflow_gpu_dag.gpu.lease_dir_marker``."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings


def test_an_old_marker_of_another_lease_dir_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a worker reconfigured (or gone) long ago: only markers refreshed within twice the ttl count
    import json
    import logging
    import os
    import time

    markers = tmp_path / "markers"
    markers.mkdir()
    old = markers / "0123456789abcdef.json"
    old.write_text(json.dumps({"lease_dir": "/elsewhere", "pid": 1, "ttl_s": 60}))
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    settings = LeaseSettings(lease_dir=tmp_path / "leases", host_marker_dir=markers, ttl_s=60, poll_s=0.05)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        LeaseManager(settings, parse_inventory("1xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="a"))
    assert "another worker" not in caplog.text
    os.utime(old)  # refreshed now: the same marker is fresh
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.lease_dir_marker"):
        LeaseManager(settings, parse_inventory("2xa100")).acquire(GpuRequest(1), LeaseOwner(task_id="b"))
    assert "/elsewhere" in caplog.text


def test_workers_announce_their_lease_dir_in_a_well_known_place_of_the_host(tmp_path: Path) -> None:
    from airflow_gpu_dag.gpu.lease_dir_marker import default_marker_dir

    settings = LeaseSettings.from_config(lease_dir=tmp_path / "leases")
    assert settings.host_marker_dir == default_marker_dir()
    assert LeaseSettings(lease_dir=tmp_path).host_marker_dir is None  # a library user opts in
