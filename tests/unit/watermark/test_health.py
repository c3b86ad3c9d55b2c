"""Liveness of the watermark controller: the heartbeat file, ``GET /health`` and
``airflow gpu-dag watermark-health``."""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.cli.definition import get_parser
from airflow_gpu_dag.watermark.health import (
    Heartbeat,
    check_heartbeat_file,
    heartbeat_status,
    read_heartbeat_file,
    write_heartbeat_file,
)


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _run_health(*argv: str) -> int:
    args = get_parser().parse_args(["gpu-dag", "watermark-health", *argv])
    try:
        args.func(args)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def test_heartbeat_file_is_written_after_each_tick_and_checked(tmp_path: Path) -> None:
    clock = {"t": 1000.0}
    path = tmp_path / "run" / "heartbeat.json"
    beat = Heartbeat(10.0, path, clock=lambda: clock["t"])
    assert check_heartbeat_file(path, now=1000.0) == (
        False,
        f"no heartbeat file {path}: the controller has not completed a tick",
    )
    beat.beat(active=True)
    data = json.loads(path.read_text())
    assert data["last_tick"] == 1000.0 and data["interval"] == 10.0 and data["active"] is True
    assert isinstance(data["pid"], int)
    assert check_heartbeat_file(path, now=1029.0)[0]  # younger than 3 x interval
    fresh, message = check_heartbeat_file(path, now=1030.0)
    assert not fresh and "stale: last tick 30.0s ago, limit 30s" in message
    assert check_heartbeat_file(path, max_age=60, now=1059.0)[0]
    assert not check_heartbeat_file(path, max_age=5, now=1006.0)[0]
    assert [p.name for p in path.parent.iterdir()] == ["heartbeat.json"]  # no temporary file left
    # a tick from the future (the controller's clock ahead) is not "ok" forever
    assert check_heartbeat_file(path, now=980.0)[0]  # within the limit: small skew is tolerated
    fresh, message = check_heartbeat_file(path, now=900.0)
    assert not fresh and "clock skew: last tick 100.0s in the future" in message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "unreadable"),
        ("[1]", "does not hold a JSON object"),
        ('{"interval": 10}', "'last_tick' is missing"),
        ('{"last_tick": NaN, "interval": 10}', "'last_tick' is missing or not a number"),
        ('{"last_tick": 1, "interval": "10"}', "'interval' is missing or not a number"),
    ],
)
def test_a_broken_heartbeat_file_is_not_fresh(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "hb.json"
    path.write_text(content)
    fresh, text = check_heartbeat_file(path, now=2.0)
    assert not fresh and message in text
    with pytest.raises(ValueError, match=message):
        read_heartbeat_file(path)


def test_write_is_atomic_for_a_concurrent_reader(tmp_path: Path) -> None:
    path = tmp_path / "hb.json"
    write_heartbeat_file(path, {"last_tick": 0.0, "interval": 1.0, "pid": 1, "active": False})
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                read_heartbeat_file(path)
            except ValueError as err:
                errors.append(str(err))

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(300):
        write_heartbeat_file(path, {"last_tick": float(i), "interval": 1.0, "pid": 1, "active": True})
    stop.set()
    thread.join(30)
    assert errors == []


def test_health_endpoint_answers_200_while_ticking_and_503_otherwise() -> None:
    clock = {"t": 1000.0}
    beat = Heartbeat(2.0, clock=lambda: clock["t"])
    server = beat.serve(0)
    try:
        host, port = server.address
        assert host == "127.0.0.1"
        url = f"http://127.0.0.1:{port}/health"
        code, body = _get(url)
        assert code == 503 and body["status"] == "starting"  # no tick completed yet
        beat.beat(active=False)
        clock["t"] += 5.9
        code, body = _get(url)
        assert code == 200 and body["status"] == "ok" and body["active"] is False and body["age"] == 5.9
        clock["t"] += 0.1  # 3 x interval
        code, body = _get(url)
        assert code == 503 and body["status"] == "stale" and body["max_age"] == 6.0
        assert _get(f"http://127.0.0.1:{port}/other")[0] == 404
    finally:
        server.stop()


def test_watermark_health_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import time

    path = tmp_path / "hb.json"
    assert _run_health("--heartbeat-file", str(path)) == 1
    assert "no heartbeat file" in capsys.readouterr().out
    write_heartbeat_file(path, {"last_tick": time.time(), "interval": 60, "pid": 7, "active": True})
    assert _run_health("--heartbeat-file", str(path)) == 0
    assert "ok: last tick" in capsys.readouterr().out
    write_heartbeat_file(path, {"last_tick": time.time() - 100, "interval": 60, "pid": 7, "active": True})
    assert _run_health("--heartbeat-file", str(path), "--max-age", "90") == 1
    assert "stale" in capsys.readouterr().out


def test_watermark_command_has_the_liveness_options() -> None:
    args = get_parser().parse_args(
        [
            "gpu-dag",
            "watermark",
            "--health-port",
            "8793",
            "--heartbeat-file",
            "/tmp/hb.json",
            "--once",
            "--dry-run",
            "-o",
            "json",
        ]
    )
    assert (args.health_port, args.health_host, args.heartbeat_file) == (8793, "127.0.0.1", "/tmp/hb.json")
    assert args.once and args.dry_run and args.output == "json"
    with pytest.raises(SystemExit):
        get_parser().parse_args(["gpu-dag", "watermark", "--health-port", "99999"])


def test_a_hung_loop_is_not_healthy_after_the_clock_steps_back(tmp_path: Path) -> None:
    """The last tick an hour "in the future" (NTP stepped the clock back, and the loop then stopped): the
    endpoint said ``ok`` with a negative age while the file check said clock skew."""
    clock = {"t": 1_800_000_000.0}
    path = tmp_path / "hb.json"
    beat = Heartbeat(60.0, path, clock=lambda: clock["t"])
    beat.beat(True)
    clock["t"] -= 3600 - 600
    healthy, body = beat.status()
    assert not healthy and body["status"] == "clock skew", body
    assert not check_heartbeat_file(path, now=clock["t"])[0]
    clock["t"] += 3600 - 600 + 10  # a healthy loop's next beat is fresh again
    assert beat.status()[0]


FIXED_NOW = 1_800_000_000.0


HUGE = "1" + "0" * 400  # a JSON integer too large for a float


def test_a_heartbeat_with_a_huge_tick_is_reported_not_raised(tmp_path: Path) -> None:
    """``"last_tick": 1000…0`` made ``watermark-health`` die with OverflowError instead of one line."""
    path = tmp_path / "beat.json"
    path.write_text(f'{{"last_tick": {HUGE}, "interval": 60}}')
    fresh, message = check_heartbeat_file(path, now=FIXED_NOW)
    assert not fresh and "last_tick" in message
    path.write_text(json.dumps({"last_tick": FIXED_NOW - 1, "interval": 60}))
    assert check_heartbeat_file(path, now=FIXED_NOW)[0]


# -- direct tests: reading, status fields, failed writes, the endpoint -------------------------------
def test_a_heartbeat_file_that_is_not_utf8_is_unreadable_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "hb.json"
    path.write_bytes(b'{"last_tick": 1, "interval": 10, "pid": "\xff\xfe"}')
    with pytest.raises(ValueError, match=f"heartbeat file {path} is unreadable"):
        read_heartbeat_file(path)
    assert check_heartbeat_file(path, now=2.0)[0] is False


def test_a_heartbeat_path_that_is_a_directory_is_unreadable(tmp_path: Path) -> None:
    fresh, message = check_heartbeat_file(tmp_path, now=2.0)
    assert not fresh and f"heartbeat file {tmp_path} is unreadable" in message


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ('{"last_tick": true, "interval": 10}', "last_tick"),
        ('{"last_tick": null, "interval": 10}', "last_tick"),
        ('{"last_tick": Infinity, "interval": 10}', "last_tick"),
        ('{"last_tick": 1, "interval": -Infinity}', "interval"),
        ('{"last_tick": [1], "interval": 10}', "last_tick"),
        ('{"last_tick": 1, "interval": {"s": 10}}', "interval"),
    ],
)
def test_a_heartbeat_field_that_is_not_a_finite_number_is_named(
    tmp_path: Path, content: str, key: str
) -> None:
    path = tmp_path / "hb.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"'{key}' is missing or not a number"):
        read_heartbeat_file(path)


def test_heartbeat_status_reports_every_field(tmp_path: Path) -> None:
    path = tmp_path / "hb.json"
    write_heartbeat_file(path, {"last_tick": 1000.0, "interval": 20, "pid": 812, "active": True})
    status = heartbeat_status(path, now=1012.34567)
    assert status == {
        "fresh": True,
        "status": "ok",
        "message": "ok: last tick 12.3s ago (limit 60s), active, pid 812",
        "heartbeat_file": str(path),
        "age_s": 12.346,
        "limit_s": 60.0,
        "active": True,
        "pid": 812,
    }


def test_heartbeat_status_of_a_missing_file_has_no_age_limit_or_pid(tmp_path: Path) -> None:
    status = heartbeat_status(tmp_path / "absent.json", max_age=30, now=1.0)
    assert (status["fresh"], status["status"]) == (False, "unreadable")
    assert status["age_s"] is status["limit_s"] is status["active"] is status["pid"] is None
    assert "has not completed a tick" in status["message"]


def test_a_standby_controller_is_said_to_be_standby(tmp_path: Path) -> None:
    path = tmp_path / "hb.json"
    write_heartbeat_file(path, {"last_tick": 100.0, "interval": 10, "pid": 5, "active": False})
    fresh, message = check_heartbeat_file(path, now=101.0)
    assert fresh and "standby, pid 5" in message
    status = heartbeat_status(path, now=500.0)
    assert (
        status["status"] == "stale" and status["active"] is False and "(standby, pid 5)" in status["message"]
    )


def test_the_age_limit_is_exclusive_and_the_skew_limit_inclusive(tmp_path: Path) -> None:
    """3 x interval old is stale; 3 x interval in the future is clock skew; just inside either is ok."""
    path = tmp_path / "hb.json"
    write_heartbeat_file(path, {"last_tick": 1000.0, "interval": 10.0, "pid": 1, "active": True})
    assert heartbeat_status(path, now=1000.0 + 3 * 10.0)["status"] == "stale"
    assert heartbeat_status(path, now=1000.0 + 29.5)["status"] == "ok"
    assert heartbeat_status(path, now=1000.0 - 3 * 10.0)["status"] == "clock_skew"
    assert heartbeat_status(path, now=1000.0 - 29.5)["status"] == "ok"
    assert heartbeat_status(path, max_age=5, now=1000.0 - 5)["status"] == "clock_skew"  # --max-age too


def test_a_heartbeat_without_a_pid_or_active_flag_is_still_checked(tmp_path: Path) -> None:
    path = tmp_path / "hb.json"
    path.write_text('{"last_tick": 1000, "interval": 10}')
    status = heartbeat_status(path, now=1001.0)
    assert status["fresh"] and status["pid"] is None and status["active"] is False
    assert status["message"] == "ok: last tick 1.0s ago (limit 30s), standby, pid None"


@pytest.mark.parametrize("interval", [0, -10, 1e308, 86401])
def test_a_heartbeat_with_a_non_positive_interval_is_refused_as_not_a_heartbeat(
    tmp_path: Path, interval: int
) -> None:
    """A controller never writes an interval <= 0 or over a day: the file is broken, and the check must
    say so (not send the operator to sync clocks with NTP, nor read a 1e308-s interval as fresh for ever)."""
    path = tmp_path / "hb.json"
    path.write_text(json.dumps({"last_tick": 1000.0, "interval": interval, "pid": 1, "active": True}))
    status = heartbeat_status(path, now=1000.0)
    assert status["status"] == "unreadable" and "'interval'" in status["message"], status["message"]


def test_write_heartbeat_file_keeps_the_old_file_when_the_data_cannot_be_written(tmp_path: Path) -> None:
    path = tmp_path / "hb.json"
    write_heartbeat_file(path, {"last_tick": 1.0, "interval": 10.0})
    with pytest.raises(TypeError):
        write_heartbeat_file(path, {"last_tick": object(), "interval": 10.0})
    assert read_heartbeat_file(path)["last_tick"] == 1.0  # the old heartbeat, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hb.json"]  # no temporary file left


def test_write_heartbeat_file_onto_a_directory_raises_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "hb.json"
    target.mkdir()
    with pytest.raises(OSError):
        write_heartbeat_file(target, {"last_tick": 1.0, "interval": 10.0})
    assert [p.name for p in tmp_path.iterdir()] == ["hb.json"]


def test_a_beat_that_cannot_write_its_file_is_logged_and_still_counts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The heartbeat's directory is a file: the tick is recorded (``/health`` stays right), the write
    failure is logged, and nothing is raised into the controller's loop."""
    blocker = tmp_path / "run"
    blocker.write_text("not a directory")
    beat = Heartbeat(10.0, blocker / "hb.json", clock=lambda: 1000.0)
    with caplog.at_level(logging.ERROR, logger="airflow_gpu_dag.watermark.health"):
        beat.beat(active=True)
    assert beat.status(now=1001.0)[0] is True
    assert any(
        f"cannot write the heartbeat file {blocker / 'hb.json'}" in r.getMessage() for r in caplog.records
    )


def test_before_the_first_tick_the_snapshot_has_no_tick_and_the_status_is_starting() -> None:
    beat = Heartbeat(5, clock=lambda: 1000.0)
    assert beat.snapshot()["last_tick"] is None and beat.snapshot()["active"] is False
    healthy, body = beat.status()
    assert not healthy and (body["status"], body["age"], body["max_age"]) == ("starting", None, 15.0)


def test_an_empty_heartbeat_path_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    beat = Heartbeat(10.0, "", clock=lambda: 1.0)
    beat.beat(active=False)
    assert beat.path is None and list(tmp_path.iterdir()) == []


def test_concurrent_beats_leave_one_whole_heartbeat_file(tmp_path: Path) -> None:
    path = tmp_path / "hb.json"
    ticks = iter(range(10_000))
    lock = threading.Lock()

    def clock() -> float:
        with lock:
            return float(next(ticks))

    beat = Heartbeat(10.0, path, clock=clock)
    threads = [threading.Thread(target=lambda: [beat.beat(active=True) for _ in range(50)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [p.name for p in tmp_path.iterdir()] == ["hb.json"]
    assert read_heartbeat_file(path)["active"] is True


def test_the_health_endpoint_ignores_a_query_string_and_says_clock_skew() -> None:
    clock = {"t": 1000.0}
    beat = Heartbeat(2.0, clock=lambda: clock["t"])
    beat.beat(active=True)
    server = beat.serve(0)
    try:
        url = f"http://127.0.0.1:{server.address[1]}/health"
        code, body = _get(url + "?verbose=1")
        assert code == 200 and body["status"] == "ok" and body["active"] is True
        clock["t"] -= 6.0  # the clock stepped back by the limit
        code, body = _get(url)
        assert code == 503 and body["status"] == "clock skew" and body["age"] == -6.0
        code, body = _get(url + "/")
        assert code == 404 and "GET /health" in body["error"]
    finally:
        server.stop()


def test_a_stopped_health_server_no_longer_answers() -> None:
    server = Heartbeat(2.0).serve(0, "127.0.0.1")
    port = server.address[1]
    server.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
