"""``airflow gpu-dag watermark`` in-process against an in-memory REST API: ``--once``, ``--dry-run``,
``-o json|yaml|plain``, start-up errors; and ``-o yaml|plain`` of lint and plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook
from tests.unit.test_cli import GOOD, PIPELINE, run_cli
from tests.unit.test_watermark_controller import NOW, FakeRest, ti


class ClosingRest(FakeRest):
    def close(self) -> None:
        self.closed = True


@pytest.fixture
def rest(monkeypatch: pytest.MonkeyPatch) -> ClosingRest:
    api = ClosingRest()
    monkeypatch.setattr(AirflowApiHook, "get_client", lambda self: api)
    monkeypatch.setattr("airflow_gpu_dag.metrics.configure", lambda force=False: None)
    api.tis = [
        ti("hold", "running", started=NOW - 10, duration=100),
        ti("wide", "scheduled", slots=4, priority=10),
    ]
    return api


def config(tmp_path: Path, **extra: Any) -> str:
    path = tmp_path / "watermark.yaml"
    body = {
        "interval": "30s",
        "lease": {"lock_file": None, "variable": None},
        "pools": {"gpu": {"source": 4, "backfill": False, "lookahead": False}},
        **extra,
    }
    path.write_text(yaml.safe_dump(body))
    return str(path)


def test_once_dry_run_json_decides_and_writes_nothing(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--dry-run", "-o", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] is True and out["missing"] == ["gpu"] and out["released"] == []
    (pool,) = out["pools"]
    assert pool["pool"] == "gpu" and pool["capacity"] == 4 and pool["size"] == 0
    assert pool["action"] == "would write" and pool["reserved_for"] == "d/r/wide/-1"
    assert pool["reserved_slots"] == 4 and pool["source_status"] == "ok"
    assert rest.writes == [] and rest.pools == {} and rest.variables == {}


def test_once_writes_then_fails_open_at_its_end(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once") == 0
    out = capsys.readouterr().out
    assert "gpu: size 0 capacity 4 (source ok: static 4) written | reserving 4 slots for d/r/wide/-1" in out
    assert "gpu: written back to its capacity (the controller stops: fail open)" in out
    # created (size 0), the reservation, then back to capacity
    assert rest.writes == [("gpu", 0), ("gpu", 0), ("gpu", 4)]
    assert '"expires"' not in rest.pools["gpu"]["description"]


@pytest.mark.parametrize("fmt", ["yaml", "plain"])
def test_once_yaml_and_plain(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--dry-run", "-o", fmt) == 0
    out = capsys.readouterr().out
    if fmt == "yaml":
        data = yaml.safe_load(out)
        assert data["pools"][0]["size"] == 0 and data["dry_run"] is True
    else:
        header, row = out.splitlines()
        cells = dict(zip(header.split("\t"), row.split("\t"), strict=True))
        assert cells["pool"] == "gpu" and cells["size"] == "0" and cells["action"] == "would write"


def test_dry_run_needs_once(rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--dry-run") == 1
    assert "--dry-run needs --once" in capsys.readouterr().err


def test_start_refuses_a_pool_of_another_controller(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = config(tmp_path, lease={"lock_file": None, "variable": "lease_a"})
    (tmp_path / "a.yaml").write_text(Path(first).read_text())
    # the other controller holds its pool at 0 and keeps renewing (simulated: its claim is fresh)
    from airflow_gpu_dag.watermark.config import load_config
    from airflow_gpu_dag.watermark.controller import WatermarkController

    other = WatermarkController(load_config(tmp_path / "a.yaml"), rest, default_duration=60.0, holder="a:1")  # type: ignore[arg-type]
    other.tick()
    writes = list(rest.writes)
    second = config(tmp_path, lease={"lock_file": None, "variable": "lease_b"})
    assert run_cli("watermark", "--config", second, "--once") == 1
    err = capsys.readouterr().err
    assert "pool(s) 'gpu' (managed by variable:lease_a" in err and "this one is variable:lease_b" in err
    assert rest.writes == writes and rest.variables == {}


def test_bad_config_is_one_line(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = config(tmp_path, interval="soon")
    assert run_cli("watermark", "--config", bad, "--once") == 1
    err = capsys.readouterr().err
    assert "interval: expected seconds > 0 or a duration" in err and "Traceback" not in err


def test_interval_option_is_checked_like_the_files_interval(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: --interval replaced the file's interval unchecked; a 300 s interval with a 180 s lease
    # let a second controller take the lapsed lease between ticks, and both acted.
    path = config(tmp_path, lease={"lock_file": None, "variable": None, "ttl": "3m"})
    assert run_cli("watermark", "--config", path, "--once", "--interval", "300") == 1
    err = capsys.readouterr().err
    assert "--interval 300: lease.ttl: 180 s must be longer than the interval (300 s" in err
    assert "Traceback" not in err and rest.writes == []


def test_bad_source_options_are_a_config_error(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "wm.yaml"
    path.write_text("pools:\n  gpu:\n    source: {type: file, path: /x, colour: blue}\n")
    assert run_cli("watermark", "--config", str(path), "--once") == 1
    err = capsys.readouterr().err
    assert "pools.gpu.source: unknown options ['colour'] for a file source" in err
    path.write_text("pools:\n  gpu:\n    source: {type: nvml, colour: blue}\n")
    assert run_cli("watermark", "--config", str(path), "--once") == 1
    err = capsys.readouterr().err
    assert "pools.gpu.source: source type 'nvml': bad options ['colour']" in err and "Traceback" not in err
    assert rest.writes == []


# -- lint and plan: yaml and plain --------------------------------------------------------------------------
def test_plan_yaml_and_plain(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "-o", "yaml") == 0
    plan = yaml.safe_load(capsys.readouterr().out)
    assert plan["critical_path"] == ["load", "preprocess", "train", "checkpoint", "evaluate"]
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "-o", "plain", "--critical-only") == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]
    assert header[:3] == ["task_id", "critical", "duration_s"]
    assert [r["task_id"] for r in rows] == ["load", "preprocess", "train", "checkpoint", "evaluate"]
    assert {r["critical"] for r in rows} == {"True"}


def test_lint_yaml_and_plain(capsys: pytest.CaptureFixture[str]) -> None:
    broken = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "dags_broken"
    assert run_cli("lint", str(broken / "unknown_pool_dag.py"), "--pool", "gpu_default=8", "-o", "yaml") == 1
    report = yaml.safe_load(capsys.readouterr().out)
    assert report["ok"] is False and report["findings"][0]["code"] == "unknown-pool"
    assert run_cli("lint", str(broken), "--pool", "gpu_default=8", "-o", "plain") == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["severity", "code", "dag_id", "task_id", "message", "fix"]
    codes = {line.split("\t")[1] for line in lines[1:]}
    assert {"import-error", "cycle", "unknown-pool"} <= codes
    assert all(len(line.split("\t")) == 6 for line in lines)


def test_a_missing_connection_says_how_to_create_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_API", raising=False)
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--conn-id", "no_such_api") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "connection 'no_such_api'" in err and "is not defined" in err
    assert "airflow connections add no_such_api --conn-type gpu_dag_api" in err
    assert "AIRFLOW_CONN_NO_SUCH_API" in err


def test_a_dry_run_without_a_connection_reads_no_airflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checking a watermark.yaml needs no api-server and no gpu_dag_api connection: the sources are read
    by the controller itself; without a connection every pool reads as missing, no task waits, so each
    pool's size is its capacity, and the output says so. A run that writes still needs the connection."""
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_API", raising=False)
    argv = ("watermark", "--config", config(tmp_path), "--once", "--dry-run", "--conn-id", "no_such_api")
    assert run_cli(*argv, "-o", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["offline"] == "no Airflow connection 'no_such_api': pools and queues not read"
    assert out["missing"] == ["gpu"] and out["released"] == []
    (pool,) = out["pools"]
    assert (pool["capacity"], pool["size"], pool["action"], pool["error"]) == (4, 4, "would write", None)
    assert run_cli(*argv) == 0
    assert capsys.readouterr().out.startswith("offline dry run (no Airflow connection 'no_such_api'")
    assert run_cli(*argv[:-3], "--conn-id", "no_such_api") == 1  # --once without --dry-run
    assert "is not defined" in capsys.readouterr().err


def test_a_connection_without_a_host_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_HOSTLESS_API", '{"conn_type": "gpu_dag_api"}')
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--conn-id", "hostless_api") == 1
    err = capsys.readouterr().err
    assert "connection 'hostless_api'" in err and "no host" in err and "docs/connections.md" in err


def test_once_against_a_trickling_api_server_fails_by_the_connections_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: `watermark --once` still ran after 45 s with timeout=3 against a server that answers one
    # byte at a time (httpx's timeout applies to each read, and each read got its byte in time).
    import time

    from tests.unit.test_rest_deadline import TrickleServer

    monkeypatch.setattr("airflow_gpu_dag.metrics.configure", lambda force=False: None)
    with TrickleServer() as server:
        conn = {"conn_type": "gpu_dag_api", "host": server.url, "extra": {"token": "t", "timeout": 1}}
        monkeypatch.setenv("AIRFLOW_CONN_TRICKLE_API", json.dumps(conn))
        started = time.monotonic()
        code = run_cli("watermark", "--config", config(tmp_path), "--once", "--conn-id", "trickle_api")
        took = time.monotonic() - started
        assert server.wait_closed()
    err = capsys.readouterr().err
    assert code == 1 and took < 1 + 3.0, f"exit {code} after {took:.1f}s"
    assert "cannot read pool 'gpu' over the REST API" in err and "ReadTimeout" in err
    assert "Traceback" not in err
