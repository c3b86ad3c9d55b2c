"""Every ``airflow gpu-dag`` command takes ``-o table|json|yaml|plain``, as Airflow's own commands do:
``yaml`` is the ``json`` document, ``plain`` a header and one tab-separated row per item (for ``cut``
and ``awk``). ``simulate`` took only ``table|json`` and ``watermark-health`` no ``-o`` at all."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.definition import get_parser
from airflow_gpu_dag.cli.estimates import ESTIMATE_COLUMNS, estimates_report
from airflow_gpu_dag.cli.lint import LINT_COLUMNS
from airflow_gpu_dag.cli.watermark_command import OUTCOME_COLUMNS
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, EstimateSettings
from tests.unit.cli.conftest import (
    BROKEN,
    GOOD,
    ONE_RUN,
    PIPELINE,
    ROOT,
    SEVERAL_RUNS,
    ClosingRest,
    config,
    run_cli,
)

FORMATS = ["table", "json", "yaml", "plain"]


COMMANDS = ["lint", "plan", "estimates", "simulate", "explain", "watermark", "watermark-health"]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


#: Rich's box-drawing characters (U+2500 to U+257F).
_BOX_DRAWING = {chr(c) for c in range(0x2500, 0x2580)}


@pytest.mark.usefixtures("_no_configured_pools")
def test_every_command_takes_every_output_format() -> None:
    commands = _subcommands(_subcommands(get_parser())["gpu-dag"])
    assert set(COMMANDS) <= set(commands), sorted(commands)
    for name in COMMANDS:
        output = next(a for a in commands[name]._actions if "--output" in a.option_strings)
        assert "-o" in output.option_strings, name
        assert list(output.choices) == FORMATS, name
        assert output.default == "table", name


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(
    "argv",
    [
        ("lint", str(BROKEN), "--pool", "gpu_default=8"),
        ("plan", PIPELINE, "--file", str(GOOD)),
        ("estimates", PIPELINE, "--file", str(GOOD)),
        ONE_RUN,
        SEVERAL_RUNS,
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


@pytest.mark.usefixtures("_no_configured_pools")
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


# -- 4. watermark --once: pools created / missing in the table ----------------------------------------------


@pytest.mark.usefixtures("_no_configured_pools")
def test_print_plain_with_columns_and_no_rows() -> None:
    import io

    out = io.StringIO()
    display.emit("plain", {}, rows=[], columns=("a", "b"), file=out)
    assert out.getvalue() == "a\tb\n"
    out = io.StringIO()
    display.print_plain([{"a": 1, "b": [2, 3]}], out, columns=("b", "a"))
    assert out.getvalue() == "b\ta\n2,3\t1\n"


@pytest.mark.usefixtures("_no_configured_pools")
def test_plain_headers_are_the_keys_of_the_rows(
    rest_without_pool: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fixed headers match the rows each command prints (so they cannot drift apart)."""
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "-o", "plain") == 0
    assert capsys.readouterr().out.splitlines()[0].split("\t") == list(display.PLAN_COLUMNS)
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--dry-run", "-o", "json") == 0
    assert list(json.loads(capsys.readouterr().out)["pools"][0]) == list(OUTCOME_COLUMNS)
    estimate = DurationEstimate("t", declared=60.0, fallback=60.0)
    report = estimates_report("d", {"t": estimate}, EstimateSettings(), 1.5)
    assert list(report["tasks"][0]) == list(ESTIMATE_COLUMNS)
    assert run_cli("lint", str(ROOT / "tests" / "fixtures" / "dags_broken"), "-o", "plain") == 1
    assert capsys.readouterr().out.splitlines()[0].split("\t") == list(LINT_COLUMNS)


class _Terminal(io.StringIO):
    """A terminal whose size cannot be asked (a pseudo-terminal that reports none)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(
    ("columns", "tty", "width"), [("0", False, 200), ("0", True, 80), ("120", True, 120)]
)
def test_console_width_ignores_a_columns_of_zero(
    monkeypatch: pytest.MonkeyPatch, columns: str, tty: bool, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert display.console(_Terminal() if tty else io.StringIO()).width == width
