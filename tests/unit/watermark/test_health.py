"""Liveness of the watermark controller: the heartbeat file, ``GET /health`` and
``airflow gpu-dag watermark-health``."""

from __future__ import annotations

import json
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
