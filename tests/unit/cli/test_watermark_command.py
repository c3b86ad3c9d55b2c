"""``airflow gpu-dag watermark`` in-process against an in-memory REST API: ``--once``, ``--dry-run``,
``-o json|yaml|plain``, start-up errors; and ``-o yaml|plain`` of lint and plan."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from airflow_gpu_dag.cli.definition import get_parser
from airflow_gpu_dag.cli.watermark_command import OUTCOME_COLUMNS, _run_forever, outcome_row
from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook
from airflow_gpu_dag.watermark.health import write_heartbeat_file
from tests.unit.cli.conftest import (
    ClosingRest,
    config,
    run_cli,
)


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
    # --interval is checked like the file's interval: a 300 s interval with a 180 s lease lets a second
    # controller take the lapsed lease between ticks, and both act.
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
    # The connection's timeout bounds the whole call: httpx's timeout applies to each read, so against
    # a server that answers one byte at a time `watermark --once` with timeout=3 could run for 45 s.
    import time

    from tests.unit.hooks.conftest import TrickleServer

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


# -- Every ``airflow gpu-dag`` command takes ``-o table|json|yaml|plain``, as Airflow's own commands do:


@pytest.mark.usefixtures("_no_configured_pools")
def test_watermark_health_in_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "heartbeat.json"
    write_heartbeat_file(path, {"last_tick": time.time(), "interval": 60, "pid": 7, "active": True})
    base = ("watermark-health", "--heartbeat-file", str(path))
    assert run_cli(*base) == 0
    assert capsys.readouterr().out.startswith("ok: last tick ")
    assert run_cli(*base, "-o", "json") == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["fresh"], data["status"], data["limit_s"], data["active"], data["pid"]) == (
        True,
        "ok",
        180.0,
        True,
        7,
    )
    assert run_cli(*base, "-o", "yaml") == 0
    assert yaml.safe_load(capsys.readouterr().out)["status"] == "ok"
    assert run_cli(*base, "--max-age", "1e-9", "-o", "plain") == 1  # stale: exit 1 in every format
    header, row = capsys.readouterr().out.splitlines()
    cells = dict(zip(header.split("\t"), row.split("\t"), strict=True))
    assert (cells["fresh"], cells["status"]) == ("False", "stale")
    assert run_cli("watermark-health", "--heartbeat-file", str(tmp_path / "none.json"), "-o", "json") == 1
    assert json.loads(capsys.readouterr().out)["status"] == "unreadable"


# -- 2. watermark --once: a failed tick is exit code 1 ----------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize("dry_run", [True, False])
def test_watermark_once_exits_1_when_its_tick_failed(
    rest: ClosingRest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    dry_run: bool,
) -> None:
    rest.ti_error = RuntimeError("api-server unreachable")
    argv = ["watermark", "--config", config(tmp_path), "--once", "-o", "json"]
    assert run_cli(*argv, *(["--dry-run"] if dry_run else [])) == 1
    captured = capsys.readouterr()
    (pool,) = json.loads(captured.out)["pools"]  # the output still says what happened to every pool
    assert pool["action"] == "error" and "api-server unreachable" in pool["error"]
    assert "the tick failed for 1 pool(s): gpu (task instances: api-server unreachable)" in captured.err


@pytest.mark.usefixtures("_no_configured_pools")
def test_watermark_once_exits_0_when_its_tick_worked(
    rest: ClosingRest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--dry-run", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["pools"][0]["error"] is None


# -- 4. watermark --heartbeat-file that can never be written ----------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_watermark_refuses_a_heartbeat_file_it_cannot_write(
    rest: ClosingRest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    if where == "folder":
        heartbeat = tmp_path / "beats"
        heartbeat.mkdir()
    else:
        (tmp_path / "a_file").write_text("x")
        heartbeat = tmp_path / "a_file" / "heartbeat.json"
    argv = ["watermark", "--config", config(tmp_path), "--once", "--heartbeat-file", str(heartbeat)]
    assert run_cli(*argv) == 1
    err = capsys.readouterr().err
    assert f"--heartbeat-file {str(heartbeat)!r}: cannot write" in err
    assert rest.writes == [] and rest.pools == {}  # refused before the start-up check made any pool


@pytest.mark.usefixtures("_no_configured_pools")
def test_watermark_makes_the_heartbeat_files_folder(
    rest: ClosingRest,
    tmp_path: Path,
) -> None:
    heartbeat = tmp_path / "run" / "gpu-dag" / "heartbeat.json"
    argv = ["watermark", "--config", config(tmp_path), "--once", "--heartbeat-file", str(heartbeat)]
    assert run_cli(*argv) == 0
    assert json.loads(heartbeat.read_text())["last_tick"] is not None


# -- 4. watermark --once: pools created / missing in the table ----------------------------------------------


@pytest.mark.usefixtures("_no_configured_pools")
def test_watermark_once_table_names_the_missing_pool_in_a_dry_run(
    rest_without_pool: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--dry-run") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "pool gpu does not exist (dry run: would be created)"
    assert rest_without_pool.pools == {}


@pytest.mark.usefixtures("_no_configured_pools")
def test_watermark_once_table_names_the_created_pool(
    rest_without_pool: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "created pool gpu (size 0 until the first tick)"
    assert "does not exist" not in "\n".join(lines)


# -- 2. watermark --health-port on a port in use --------------------------------------------------------
@pytest.fixture
def rest_without_pools(monkeypatch: pytest.MonkeyPatch) -> ClosingRest:
    """An in-memory REST API with no pool: what the start-up check creates shows in ``pools``."""
    api = ClosingRest()
    monkeypatch.setattr(AirflowApiHook, "get_client", lambda self: api)
    monkeypatch.setattr("airflow_gpu_dag.metrics.configure", lambda force=False: None)
    return api


@pytest.mark.usefixtures("_no_configured_pools")
def test_watermark_health_port_in_use_is_one_line_before_touching_pools(
    rest_without_pools: ClosingRest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--health-port`` on a port another process holds: an OSError traceback after the start-up check
    had created the pools at size 0; now one line, and no pool created."""

    def run_forever(*args: Any) -> None:
        raise AssertionError("the controller started although its health port is taken")

    monkeypatch.setattr("airflow_gpu_dag.cli.watermark_command._run_forever", run_forever)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = run_cli("watermark", "--config", config(tmp_path), "--health-port", str(port))
    assert code == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"airflow gpu-dag watermark: --health-port {port}: cannot serve /health on ")
    assert f"127.0.0.1:{port}" in last and "Traceback" not in err
    assert rest_without_pools.pools == {} and rest_without_pools.writes == []
    assert rest_without_pools.closed


# -- direct tests of the command's options, rows and loop -----------------------------------------------
def _parse_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What argparse says (on stderr) when it refuses ``airflow gpu-dag <argv>``."""
    with pytest.raises(SystemExit) as stop:
        get_parser().parse_args(["gpu-dag", *argv])
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e400", "soon", ""])
def test_an_interval_that_is_no_finite_positive_number_is_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    err = _parse_error(capsys, "watermark", "--interval", value)
    assert f"expected seconds > 0, got {value!r}" in err


@pytest.mark.parametrize("value", ["nan", "-0", "inf"])
def test_a_max_age_that_is_no_finite_positive_number_is_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    err = _parse_error(capsys, "watermark-health", "--heartbeat-file", "hb.json", "--max-age", value)
    assert f"expected seconds > 0, got {value!r}" in err


@pytest.mark.parametrize("value", ["-1", "65536", "80.0", "http", "99999999999999999999"])
def test_a_health_port_outside_0_to_65535_is_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    err = _parse_error(capsys, "watermark", "--health-port", value)
    assert f"expected a TCP port 0-65535, got {value!r}" in err


@pytest.mark.parametrize("value", ["0", "65535"])
def test_the_ends_of_the_port_range_are_accepted(value: str) -> None:
    args = get_parser().parse_args(["gpu-dag", "watermark", "--health-port", value])
    assert args.health_port == int(value)


def test_watermark_health_needs_the_heartbeat_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--heartbeat-file" in _parse_error(capsys, "watermark-health")


def _outcome(
    error: str | None = None,
    written: bool = False,
    would_write: bool = False,
    size: int | None = 2,
    decision: Any = None,
) -> Any:
    capacity = SimpleNamespace(gpus=4, status="ok", detail="static 4", failures=0)
    return SimpleNamespace(
        pool="gpu",
        capacity=capacity,
        previous=4,
        size=size,
        error=error,
        written=written,
        would_write=would_write,
        decision=decision,
    )


@pytest.mark.parametrize(
    ("outcome", "action"),
    [
        (_outcome(error="boom", written=True), "error"),  # an error wins over what was written
        (_outcome(written=True), "written"),
        (_outcome(would_write=True), "would write"),
        (_outcome(), "no change"),
        (_outcome(size=None), "unchanged"),
    ],
)
def test_an_outcomes_action_says_what_happened_to_the_pool(outcome: Any, action: str) -> None:
    assert outcome_row(outcome)["action"] == action


def test_an_outcome_row_has_the_plain_columns_in_order_and_no_reservation_without_a_decision() -> None:
    row = outcome_row(_outcome())
    assert tuple(row) == OUTCOME_COLUMNS
    assert (row["reserved_for"], row["reserved_slots"], row["backfill_slots"]) == (None, 0, 0)
    assert (row["shadow_time"], row["lookahead"], row["reason"]) == (None, False, None)


def test_slots_are_only_reported_while_a_task_is_reserved_for() -> None:
    """A decision that reserves for nobody shows 0 reserved and 0 backfill slots, whatever it holds."""
    idle = SimpleNamespace(
        reserved_for=None, reserved_slots=3, backfill_slots=1, shadow_time=None, lookahead=None, reason="idle"
    )
    row = outcome_row(_outcome(decision=idle))
    assert (row["reserved_slots"], row["backfill_slots"], row["lookahead"], row["reason"]) == (
        0,
        0,
        False,
        "idle",
    )
    busy = SimpleNamespace(
        reserved_for="d/r/t/-1", reserved_slots=3, backfill_slots=1, shadow_time=5.0, lookahead=1, reason="r"
    )
    row = outcome_row(_outcome(decision=busy))
    assert (row["reserved_for"], row["reserved_slots"], row["backfill_slots"]) == ("d/r/t/-1", 3, 1)
    assert row["shadow_time"] == 5.0 and row["lookahead"] is True


def _held_by_another(rest: ClosingRest, tmp_path: Path) -> str:
    """A config whose lease Variable another live controller holds: this one stands by."""
    rest.variables["wm_lease"] = json.dumps({"holder": "other-host:1:abc", "expires": time.time() + 3600})
    rest.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool", "include_deferred": False}
    return config(tmp_path, lease={"lock_file": None, "variable": "wm_lease"})


@pytest.mark.usefixtures("_no_configured_pools")
def test_once_standing_by_says_so_in_every_format_and_writes_nothing(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _held_by_another(rest, tmp_path)
    writes = list(rest.writes)
    assert run_cli("watermark", "--config", path, "--once") == 0
    assert "standing by: another watermark controller holds the lease" in capsys.readouterr().out
    assert run_cli("watermark", "--config", path, "--once", "-o", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["standing_by"], out["pools"], out["released"]) == (True, [], [])
    assert run_cli("watermark", "--config", path, "--once", "-o", "plain") == 0
    assert capsys.readouterr().out.splitlines() == ["\t".join(OUTCOME_COLUMNS)]  # the header, no row
    assert rest.writes == writes and json.loads(rest.variables["wm_lease"])["holder"] == "other-host:1:abc"


@pytest.mark.usefixtures("_no_configured_pools")
def test_a_dry_run_writes_no_heartbeat_file(rest: ClosingRest, tmp_path: Path) -> None:
    """``--dry-run`` writes nothing: a heartbeat would tell a probe a controller ticks when none does."""
    heartbeat = tmp_path / "hb.json"
    argv = [
        "watermark",
        "--config",
        config(tmp_path),
        "--once",
        "--dry-run",
        "--heartbeat-file",
        str(heartbeat),
    ]
    assert run_cli(*argv) == 0
    assert not heartbeat.exists() and rest.writes == []


@pytest.mark.usefixtures("_no_configured_pools")
def test_the_interval_option_wins_over_the_files_in_the_heartbeat(rest: ClosingRest, tmp_path: Path) -> None:
    heartbeat = tmp_path / "hb.json"
    argv = [
        "watermark",
        "--config",
        config(tmp_path),
        "--once",
        "--interval",
        "7",
        "--heartbeat-file",
        str(heartbeat),
    ]
    assert run_cli(*argv) == 0
    beat = json.loads(heartbeat.read_text())
    assert (beat["interval"], beat["active"]) == (7.0, True) and beat["last_tick"] <= time.time()


@pytest.mark.usefixtures("_no_configured_pools")
def test_an_interval_option_over_a_day_is_one_line_naming_the_option(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--interval", "100000") == 1
    err = capsys.readouterr().err
    assert "airflow gpu-dag watermark: --interval 100000: interval: at most 1 day" in err
    assert "Traceback" not in err and rest.writes == []


@pytest.mark.usefixtures("_no_configured_pools")
def test_a_bad_gpu_dag_option_stops_the_controller_before_any_pool_is_touched(
    rest: ClosingRest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "fastest")
    assert run_cli("watermark", "--config", config(tmp_path), "--once") == 1
    err = capsys.readouterr().err
    assert "[gpu_dag] objective 'fastest' is not one of" in err
    assert "Fix or unset it (docs/configuration.md" in err and "Traceback" not in err
    assert rest.writes == [] and rest.pools == {}


@pytest.mark.usefixtures("_no_configured_pools")
def test_a_config_file_that_does_not_exist_is_one_line_naming_it(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert run_cli("watermark", "--config", str(missing), "--once") == 1
    err = capsys.readouterr().err
    assert f"watermark config {missing}: no such file; check the --config path" in err
    assert "Traceback" not in err and rest.writes == []


@pytest.mark.usefixtures("_no_configured_pools")
def test_the_client_is_closed_after_a_tick_and_after_a_refused_start(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once") == 0
    assert rest.closed
    rest.closed = False
    rest.ti_error = RuntimeError("api-server unreachable")
    assert run_cli("watermark", "--config", config(tmp_path), "--once") == 1
    assert rest.closed


@pytest.mark.usefixtures("_no_configured_pools")
def test_an_empty_heartbeat_file_is_refused_naming_the_option(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--heartbeat-file "$HEARTBEAT"`` with the variable unset: the controller runs with no heartbeat,
    and the probe (``watermark-health --heartbeat-file ...``) then restarts a healthy controller."""
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--heartbeat-file", "") == 1
    assert "--heartbeat-file" in capsys.readouterr().err
    assert rest.writes == []


class _LoopController:
    """What ``_run_forever`` drives: ``run(stop, on_tick)`` ticks twice, then stops by SIGTERM."""

    holder, group, active = "h:1:x", "host:h", True

    def __init__(self) -> None:
        self.stopped_by_signal = False

    def run(self, stop: threading.Event, on_tick: Any) -> None:
        on_tick([])
        on_tick([])
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)
        self.stopped_by_signal = stop.is_set()


def test_the_loop_stops_on_sigterm_beats_every_tick_and_gives_the_handlers_back(tmp_path: Path) -> None:
    from airflow_gpu_dag.watermark.config import parse_config
    from airflow_gpu_dag.watermark.health import Heartbeat

    cfg = parse_config({"pools": {"gpu": {"source": 2}}, "lease": {"lock_file": None, "variable": None}})
    heartbeat = Heartbeat(30.0, tmp_path / "hb.json")
    beats: list[bool] = []
    real_beat = heartbeat.beat
    heartbeat.beat = lambda active: (beats.append(active), real_beat(active))  # type: ignore[method-assign]

    def before(signum: int, frame: object) -> None:
        raise AssertionError("not restored yet")

    previous = {sig: signal.signal(sig, before) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        controller = _LoopController()
        _run_forever(controller, cfg, heartbeat)
        assert controller.stopped_by_signal and beats == [True, True]
        assert signal.getsignal(signal.SIGTERM) is before and signal.getsignal(signal.SIGINT) is before
        assert json.loads((tmp_path / "hb.json").read_text())["active"] is True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(
    ("content", "status"),
    [
        ("{not json", "unreadable"),
        ('{"last_tick": NaN, "interval": 60}', "unreadable"),
        ('{"last_tick": "yesterday", "interval": 60}', "unreadable"),
        ("[1, 2]", "unreadable"),
    ],
)
def test_a_heartbeat_file_that_is_not_a_heartbeat_is_exit_1_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, status: str
) -> None:
    path = tmp_path / "hb.json"
    path.write_text(content)
    assert run_cli("watermark-health", "--heartbeat-file", str(path), "-o", "json") == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["fresh"], out["status"]) == (False, status) and str(path) in out["message"]


@pytest.mark.usefixtures("_no_configured_pools")
def test_a_tick_in_the_future_is_clock_skew_not_fresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hb.json"
    write_heartbeat_file(path, {"last_tick": time.time() + 3600, "interval": 60, "pid": 7, "active": True})
    assert run_cli("watermark-health", "--heartbeat-file", str(path)) == 1
    assert capsys.readouterr().out.startswith("clock skew: last tick ")
