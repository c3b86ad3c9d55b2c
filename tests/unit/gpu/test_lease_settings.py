"""Tests of ``airflow_gpu_dag.gpu.lease_settings``."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_gpu_dag.gpu.lease import LeaseSettings
from airflow_gpu_dag.gpu.lease_dir_marker import default_marker_dir
from airflow_gpu_dag.gpu.lease_settings import (
    LeaseOwner,
    configured_lease_dir,
    configured_usage_ledger,
    default_lease_dir,
    owner_of,
)

#: Every test takes the deferring path (a deployment with a triggerer) and reads no budget Variable.
pytestmark = pytest.mark.usefixtures("_deferring", "_no_variables")


def test_without_the_option_leases_stay_in_the_lease_directory(tmp_path: Path) -> None:
    settings = LeaseSettings(lease_dir=tmp_path)
    assert settings.usage_file == tmp_path / "usage.jsonl"


# -- paths ------------------------------------------------------------------------------------------
@pytest.fixture
def _no_lease_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``[gpu_dag]`` lease option from the environment: what a test reads is what it sets."""
    for option in (
        "LEASE_DIR",
        "LEASE_TTL",
        "LEASE_HEARTBEAT",
        "LEASE_POLL_INTERVAL",
        "LEASE_WAIT_TIMEOUT",
        "USAGE_LEDGER",
    ):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)


def test_the_default_lease_directory_is_under_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert default_lease_dir() == tmp_path / "airflow-gpu-dag" / "leases"
    assert LeaseSettings().lease_dir == tmp_path / "airflow-gpu-dag" / "leases"


@pytest.mark.usefixtures("_no_lease_options")
def test_the_configured_lease_directory_else_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert configured_lease_dir() == default_lease_dir()
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", "")
    assert configured_lease_dir() == default_lease_dir()
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "leases"))
    assert configured_lease_dir() == tmp_path / "leases"


@pytest.mark.usefixtures("_no_lease_options")
def test_the_configured_usage_ledger_else_the_one_in_the_lease_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "leases"))
    assert configured_usage_ledger() == tmp_path / "leases" / "usage.jsonl"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", "   ")  # blank: not set
    assert configured_usage_ledger() == tmp_path / "leases" / "usage.jsonl"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", f"  {tmp_path / 'shared' / 'usage.jsonl'} ")
    assert configured_usage_ledger() == tmp_path / "shared" / "usage.jsonl"


def test_paths_given_as_strings_become_paths_and_a_usage_ledger_is_where_usage_goes(tmp_path: Path) -> None:
    settings = LeaseSettings(
        lease_dir=str(tmp_path / "leases"),  # type: ignore[arg-type]
        usage_ledger=str(tmp_path / "usage.jsonl"),  # type: ignore[arg-type]
        host_marker_dir=str(tmp_path / "markers"),  # type: ignore[arg-type]
    )
    assert (settings.lease_dir, settings.usage_ledger, settings.host_marker_dir) == (
        tmp_path / "leases",
        tmp_path / "usage.jsonl",
        tmp_path / "markers",
    )
    assert settings.usage_file == tmp_path / "usage.jsonl"


# -- validation -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ttl_s": 0}, "lease setting ttl_s=0 must be > 0"),
        ({"heartbeat_s": 0}, "lease setting heartbeat_s=0 must be > 0"),
        ({"poll_s": -1}, "lease setting poll_s=-1 must be > 0"),
        ({"reclaim_grace_s": -0.5}, "lease setting reclaim_grace_s=-0.5 must be >= 0"),
        ({"wait_timeout_s": -1}, "lease setting wait_timeout_s=-1 must be >= 0"),
        ({"ttl_s": 30, "heartbeat_s": 15.5}, "lower [gpu_dag] lease_heartbeat or raise lease_ttl"),
    ],
)
def test_settings_that_would_break_leases_are_refused(
    tmp_path: Path, values: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError) as err:
        LeaseSettings(lease_dir=tmp_path, **values)
    assert message in str(err.value)


def test_the_limits_themselves_are_accepted(tmp_path: Path) -> None:
    """A heartbeat of exactly half the ttl, no grace before SIGKILL, no wait for devices."""
    settings = LeaseSettings(
        lease_dir=tmp_path, ttl_s=20, heartbeat_s=10, reclaim_grace_s=0, wait_timeout_s=0
    )
    assert (settings.ttl_s, settings.heartbeat_s, settings.reclaim_grace_s, settings.wait_timeout_s) == (
        20,
        10,
        0,
        0,
    )


@pytest.mark.parametrize("ttl", [math.nan, math.inf])
def test_a_ttl_that_is_not_a_finite_number_is_refused(tmp_path: Path, ttl: float) -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        LeaseSettings(lease_dir=tmp_path, ttl_s=ttl)


# -- from_config ------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_lease_options")
def test_from_config_reads_every_lease_option_and_the_hosts_marker_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for option, value in {
        "LEASE_DIR": str(tmp_path / "leases"),
        "LEASE_TTL": "5m",
        "LEASE_HEARTBEAT": "30s",
        "LEASE_POLL_INTERVAL": "0.5",
        "LEASE_WAIT_TIMEOUT": "2h",
        "USAGE_LEDGER": str(tmp_path / "usage.jsonl"),
    }.items():
        monkeypatch.setenv(f"AIRFLOW__GPU_DAG__{option}", value)
    assert LeaseSettings.from_config() == LeaseSettings(
        lease_dir=tmp_path / "leases",
        ttl_s=300.0,
        heartbeat_s=30.0,
        poll_s=0.5,
        wait_timeout_s=7200.0,
        usage_ledger=tmp_path / "usage.jsonl",
        host_marker_dir=default_marker_dir(),
    )


@pytest.mark.usefixtures("_no_lease_options")
def test_from_config_without_options_is_the_defaults_and_overrides_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_TTL", "  ")  # blank: the default
    assert LeaseSettings.from_config() == LeaseSettings(host_marker_dir=default_marker_dir())
    overridden = LeaseSettings.from_config(lease_dir=tmp_path, kill_orphans=False, host_marker_dir=None)
    assert (overridden.lease_dir, overridden.kill_orphans, overridden.host_marker_dir) == (
        tmp_path,
        False,
        None,
    )
    assert overridden.usage_file == tmp_path / "usage.jsonl"


@pytest.mark.usefixtures("_no_lease_options")
@pytest.mark.parametrize("option", ["lease_heartbeat", "lease_poll_interval", "lease_wait_timeout"])
def test_a_duration_option_that_cannot_be_parsed_names_the_option(
    monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    monkeypatch.setenv(f"AIRFLOW__GPU_DAG__{option.upper()}", "soon")
    with pytest.raises(ValueError, match=rf"^\[gpu_dag\] {option}: duration 'soon' cannot be parsed"):
        LeaseSettings.from_config()


# -- the owner of a lease ---------------------------------------------------------------------------
def test_the_owner_of_a_record_keeps_the_fields_of_the_right_type_only() -> None:
    """A damaged or newer table must not fail the reader: a field of the wrong type is left out."""
    raw = {
        "dag_id": "d",
        "run_id": "r",
        "task_id": "t",
        "map_index": 2,
        "try_number": 3,
        "pool": "gpu",
        "x": 1,
    }
    assert owner_of({"owner": raw}) == LeaseOwner("d", "r", "t", map_index=2, try_number=3, pool="gpu")
    damaged = {
        "dag_id": 5,
        "run_id": None,
        "task_id": ["t"],
        "map_index": True,
        "try_number": "3",
        "pool": 1.5,
    }
    assert owner_of({"owner": damaged}) == LeaseOwner()
    assert owner_of({"owner": ["d", "t"]}) == owner_of({}) == LeaseOwner()


def test_the_owner_from_an_airflow_context() -> None:
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=4, try_number=2)
    assert LeaseOwner.from_context({"ti": ti}, pool="gpu") == LeaseOwner("d", "r", "t", 4, 2, "gpu")
    assert LeaseOwner.from_context({"task_instance": ti}) == LeaseOwner("d", "r", "t", 4, 2, None)
    unmapped = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=None, try_number=1)
    assert LeaseOwner.from_context({"ti": unmapped}).map_index == -1
    assert LeaseOwner.from_context({}, pool="gpu") == LeaseOwner(pool="gpu")  # outside Airflow


@pytest.mark.parametrize(
    ("owner", "text"),
    [
        (LeaseOwner("d", "r", "t", try_number=1), "d.t (run r, try 1)"),
        (LeaseOwner("d", "r", "t", map_index=0, try_number=2), "d.t[0] (run r, try 2)"),
        (LeaseOwner(dag_id="d", run_id="r"), "an unnamed holder"),
    ],
)
def test_an_owner_describes_its_task_instance(owner: LeaseOwner, text: str) -> None:
    assert owner.describe() == text
