"""Every ``airflow gpu-dag`` command takes ``-o table|json|yaml|plain``, as Airflow's own commands do:
``yaml`` is the ``json`` document, ``plain`` a header and one tab-separated row per item (for ``cut``
and ``awk``). ``simulate`` took only ``table|json`` and ``watermark-health`` no ``-o`` at all."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest
import yaml

from airflow_gpu_dag.cli.definition import get_parser
from airflow_gpu_dag.watermark.health import write_heartbeat_file
from tests.unit.test_cli import GOOD, PIPELINE, run_cli

FORMATS = ["table", "json", "yaml", "plain"]
COMMANDS = ["lint", "plan", "estimates", "simulate", "explain", "watermark", "watermark-health"]


@pytest.fixture(autouse=True)
def _no_configured_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_takes_every_output_format() -> None:
    commands = _subcommands(_subcommands(get_parser())["gpu-dag"])
    assert set(COMMANDS) <= set(commands), sorted(commands)
    for name in COMMANDS:
        output = next(a for a in commands[name]._actions if "--output" in a.option_strings)
        assert "-o" in output.option_strings, name
        assert list(output.choices) == FORMATS, name
        assert output.default == "table", name


_ONE_RUN = ("simulate", PIPELINE, "--file", str(GOOD), "--capacity", "gpu_default=4")
_SEVERAL_RUNS = (
    "simulate",
    "--file",
    str(GOOD),
    "--trigger",
    f"{PIPELINE}=0",
    "--trigger",
    f"{PIPELINE}=20m",
    "--capacity",
    "gpu_default=4",
    "--objective",
    "latency",
)


@pytest.mark.parametrize("argv", [_ONE_RUN, _SEVERAL_RUNS], ids=["one run", "several runs"])
def test_simulate_yaml_is_its_json(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert run_cli(*argv, "-o", "json") == 0
    as_json = json.loads(capsys.readouterr().out)
    assert run_cli(*argv, "-o", "yaml") == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


def test_simulate_plain_is_one_row_per_task_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(*_ONE_RUN, "-o", "plain") == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split("\t") == [
        "policy", "task_id", "critical", "start_s", "end_s", "wait_s", "slots", "pool", "priority"
    ]  # fmt: skip
    rows = [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]
    assert {r["policy"] for r in rows} == {"stock", "reservation"}
    assert len(rows) == 2 * 13  # the pipeline's 13 tasks under each policy
    train = next(r for r in rows if r["policy"] == "reservation" and r["task_id"] == "train")
    assert (train["critical"], train["slots"], train["pool"]) == ("True", "4", "gpu_default")
    assert float(train["end_s"]) > float(train["start_s"])


def test_simulate_several_runs_plain_is_one_row_per_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(*_SEVERAL_RUNS, "-o", "plain") == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split("\t")[:3] == ["run", "dag_id", "trigger_offset_s"]
    rows = [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]
    assert [(r["run"], r["trigger_offset_s"], r["objective"]) for r in rows] == [
        ("1", "0.0", "latency"),
        ("2", "1200.0", "latency"),
    ]


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


#: Rich's box-drawing characters (U+2500 to U+257F).
_BOX_DRAWING = {chr(c) for c in range(0x2500, 0x2580)}
_BROKEN = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "dags_broken"


@pytest.mark.parametrize(
    "argv",
    [
        ("lint", str(_BROKEN), "--pool", "gpu_default=8"),
        ("plan", PIPELINE, "--file", str(GOOD)),
        ("estimates", PIPELINE, "--file", str(GOOD)),
        _ONE_RUN,
        _SEVERAL_RUNS,
    ],
    ids=["lint", "plan", "estimates", "simulate", "simulate several runs"],
)
def test_tables_are_plain_text_in_a_pipe(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """docs/cli.md: "rich tables on a terminal, plain text in a pipe" (`lint | cat` printed the boxes):
    no box-drawing character, a line of dashes under each header, no trailing blanks."""
    run_cli(*argv)
    out = capsys.readouterr().out
    assert not _BOX_DRAWING & set(out), sorted(_BOX_DRAWING & set(out))
    assert any(line.startswith("---") and set(line) <= {"-", " "} for line in out.splitlines()), out
    assert all(line == line.rstrip() for line in out.splitlines())


def test_tables_keep_their_boxes_on_a_terminal() -> None:
    import io

    from rich.table import Table

    from airflow_gpu_dag.cli.display import console

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    table = Table(title="t")
    table.add_column("a")
    table.add_row("1")
    stream = Terminal()
    console(stream).print(table)
    assert _BOX_DRAWING & set(stream.getvalue())
