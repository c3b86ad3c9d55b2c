"""Audit of the watermark controller (second pass): each test failed before its fix."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import airflow_gpu_dag.settings as settings
from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.pool_claim.state import PoolState, with_state
from airflow_gpu_dag.watermark.config import ConfigError, PoolSpec, SourceSpec, load_config, parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from airflow_gpu_dag.watermark.lifecycle import CREATED_DESCRIPTION, PreflightError, preflight
from tests.unit.test_too_large import FailingRest
from tests.unit.test_watermark_controller import NOW, FakeRest, Source, ti


def _dry_controller(rest: FailingRest, monkeypatch: pytest.MonkeyPatch) -> WatermarkController:
    monkeypatch.setattr(settings, "too_large_policy", lambda: (1, "fail"))
    monkeypatch.setattr(settings, "max_gpus_per_host", lambda: None)
    config = parse_config({"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}})
    return WatermarkController(
        config,
        rest,  # type: ignore[arg-type]
        {"gpu": Source(4)},  # type: ignore[dict-item]
        default_duration=60.0,
        clock=lambda: NOW,
        dry_run=True,
    )


def test_a_dry_run_fails_no_task_instance(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``--once --dry-run`` promises to write nothing; with ``[gpu_dag] too_large_intervals = 1`` its one
    tick set a waiting 8-GPU task of a 4-GPU pool to ``failed`` over REST."""
    rest = FailingRest()
    rest.tis = [ti("huge", "scheduled", slots=8)]
    ctl = _dry_controller(rest, monkeypatch)
    with caplog.at_level(logging.WARNING):
        [outcome] = ctl.tick()
    assert rest.failed == [] and rest.writes == []
    assert outcome.would_write and rest.tis[0]["state"] == "scheduled"
    assert "dry run: would fail gpu-dag watermark: d.huge (run r) needs 8 slots" in caplog.text


def test_an_nvml_device_listed_twice_is_an_error_naming_the_key() -> None:
    """``devices: [0, 0]`` loaded silently: the source counts GPU 0 once, while ``floor: 2`` passed the
    check against the list's length and kept 2 slots for one GPU once the source failed."""
    raw = {"pools": {"gpu": {"source": {"type": "nvml", "devices": [0, 1, 0]}, "floor": 2}}}
    with pytest.raises(ConfigError, match=r"pools\.gpu\.source\.devices: GPU index 0 is listed twice"):
        parse_config(raw)


class _RacingRest(FakeRest):
    """Another controller creates each pool between this one's read and its create (HTTP 409)."""

    def __init__(self, description: str) -> None:
        super().__init__()
        self.rival_description = description
        self.deleted: list[str] = []

    def set_pool(
        self, name: str, slots: int, description: str, include_deferred: bool = False
    ) -> dict[str, Any]:
        if name not in self.pools:
            self.pools[name] = {"name": name, "slots": 0, "description": self.rival_description}
            raise RestError(f"POST /api/v2/pools: HTTP 409 pool {name} already exists", 409)
        return super().set_pool(name, slots, description, include_deferred)

    def request(self, method: str, path: str, **kwargs: Any) -> None:
        self.deleted.append(path)


def _specs(*names: str) -> dict[str, PoolSpec]:
    return {n: PoolSpec(n, SourceSpec("static", {"gpus": 4})) for n in names}


def test_a_pool_created_meanwhile_by_a_replica_of_the_same_group_is_not_an_error() -> None:
    """Two replicas of one controller (one lease Variable) started together: both read the pool as
    missing, one created it, the other's create got HTTP 409 and it refused to start ("cannot be
    created ... let the controller's API user create pools"), deleting the pools it had created."""
    rival = with_state(CREATED_DESCRIPTION, PoolState(lease="variable:L", holder="B", expires=NOW + 180))
    rest = _RacingRest(rival)
    report = preflight(rest, _specs("gpu_a", "gpu_b"), "variable:L", NOW, holder="A", claim_for=180)  # type: ignore[arg-type]
    assert report.created == [] and rest.deleted == []
    assert set(rest.pools) == {"gpu_a", "gpu_b"}


def test_a_pool_created_meanwhile_by_another_group_names_that_group() -> None:
    rival = with_state(CREATED_DESCRIPTION, PoolState(lease="variable:other", holder="B", expires=NOW + 180))
    rest = _RacingRest(rival)
    with pytest.raises(PreflightError, match=r"variable:other.*managed by another watermark"):
        preflight(rest, _specs("gpu_a"), "variable:L", NOW, holder="A", claim_for=180)  # type: ignore[arg-type]


def test_a_lease_shorter_than_a_tick_with_its_sources_is_reported() -> None:
    """``interval: 10`` warned that 3 x 10 s of claim is too short for a tick with a 30-s source and said
    to raise fail_open_after to 6; done, nothing was reported, yet the default lease (3 x 10 s) still
    ran out during such a tick: the tick wrote no pool and a standby took the lease over."""
    raw: dict[str, Any] = {"interval": 10, "fail_open_after": 6, "pools": {"gpu": {"source": 4}}}
    risk = parse_config(raw).fail_open_risk()
    assert risk is not None and "lease.ttl (30 s)" in risk and "(40 s)" in risk
    assert "fail_open_after" not in risk and "set lease.ttl to 50s" in risk
    assert parse_config({**raw, "lease": {"ttl": "50s"}}).fail_open_risk() is None
    no_variable = {**raw, "lease": {"variable": None}}  # a host lock file does not expire
    assert parse_config(no_variable).fail_open_risk() is None
    both = parse_config({**raw, "fail_open_after": 3}).fail_open_risk()
    assert both is not None and "fail_open_after to 6" in both and "lease.ttl (30 s)" in both


def test_a_config_file_of_comments_only_is_reported_as_empty(tmp_path: Path) -> None:
    """A YAML file holding only comments (or a bare ``---``) said ``expected a mapping at the top level,
    got NoneType``: no fix, and not what the docs promise for an empty file."""
    path = tmp_path / "watermark.yaml"
    for text in ("# pools: come later\n", "---\n", "--- # nothing yet\n...\n"):
        path.write_text(text)
        with pytest.raises(ConfigError, match=r"watermark\.yaml: the file is empty; it needs"):
            load_config(path)
    json_path = tmp_path / "watermark.json"  # unchanged: empty, and broken JSON
    json_path.write_text(" \n")
    with pytest.raises(ConfigError, match="the file is empty"):
        load_config(json_path)
    json_path.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON/YAML"):
        load_config(json_path)
