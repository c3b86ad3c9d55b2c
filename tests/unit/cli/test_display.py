"""Every ``airflow gpu-dag`` command takes ``-o table|json|yaml|plain``, as Airflow's own commands do:
``yaml`` is the ``json`` document, ``plain`` a header and one tab-separated row per item (for ``cut``
and ``awk``). ``simulate`` took only ``table|json`` and ``watermark-health`` no ``-o`` at all."""

from __future__ import annotations

import argparse
import io
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.cells import cell_len

from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.definition import get_parser
from airflow_gpu_dag.cli.estimates import ESTIMATE_COLUMNS, estimates_report
from airflow_gpu_dag.cli.lint import LINT_COLUMNS
from airflow_gpu_dag.cli.watermark_command import OUTCOME_COLUMNS
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, EstimateSettings
from airflow_gpu_dag.core.analysis.validation import Finding
from airflow_gpu_dag.core.planning.plan import Plan, TaskPlan
from airflow_gpu_dag.core.simulation.simulator import ScheduledTask, SimulationResult
from tests.unit.cli.conftest import (
    BROKEN,
    GOOD,
    LONG_IDS,
    ONE_RUN,
    PIPELINE,
    ROOT,
    SEVERAL_RUNS,
    ClosingRest,
    config,
    run_cli,
    table_column,
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


# -- the -o/--output formats ------------------------------------------------------------------------------
#: A result as the commands build it: nested, ordered (not alphabetical), with None, booleans and unicode.
_RESULT = {
    "dag_id": "训练_pipeline",
    "ok": False,
    "tasks": [{"task_id": "train", "slots": 4, "note": None}, {"task_id": "eval", "slots": 1, "note": "é"}],
    "makespan": 3600.5,
    "alpha": [],
}


def test_output_formats_are_the_documented_choices() -> None:
    assert display.OUTPUT_FORMATS == ("table", "json", "yaml", "plain")


def test_json_output_is_indented_and_parses_back_to_the_same_data() -> None:
    """docs/cli.md: one JSON document, keys in the result's order (not sorted), readable (indented)."""
    out = io.StringIO()
    display.print_json(_RESULT, out)
    text = out.getvalue()
    assert json.loads(text) == _RESULT
    assert list(json.loads(text)) == ["dag_id", "ok", "tasks", "makespan", "alpha"]
    assert text.endswith("}\n")
    assert text.splitlines()[:2] == ["{", '  "dag_id": "\\u8bad\\u7ec3_pipeline",']


def test_json_output_writes_values_json_cannot_hold_as_their_text() -> None:
    """A time with a zone keeps its offset, a path its text, a tuple becomes a list (no TypeError)."""
    when = datetime(2026, 12, 6, 10, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    out = io.StringIO()
    display.print_json({"now": when, "file": Path("dags/a.py"), "edge": ("a", "b")}, out)
    assert json.loads(out.getvalue()) == {
        "now": "2026-12-06 10:00:05+02:00",
        "file": "dags/a.py",
        "edge": ["a", "b"],
    }


#: Strings a YAML reader would take for something else if they were written unquoted.
_TRICKY = [
    "yes",
    "no",
    "on",
    "null",
    "~",
    "",
    "1.0",
    "010",
    "0x10",
    "2026-12-06",
    "2026-12-06T10:00:00+02:00",
    "a: b",
    "#comment",
    "- item",
    " lead",
    "trail ",
    "two\nlines",
    "训练 🚀",
]


def test_yaml_output_parses_back_to_the_json_document() -> None:
    """docs/cli.md: `yaml` is "the same document as YAML": same keys in the same order, and strings that
    look like booleans, numbers, dates or YAML syntax stay strings."""
    data = {
        **_RESULT,
        "strings": _TRICKY,
        "numbers": [0, -1, 1.5, 10**20, True],
        "now": datetime(2026, 1, 1, tzinfo=UTC),
    }
    yaml_out, json_out = io.StringIO(), io.StringIO()
    display.print_yaml(data, yaml_out)
    display.print_json(data, json_out)
    parsed = yaml.safe_load(yaml_out.getvalue())
    assert parsed == json.loads(json_out.getvalue())
    assert parsed["strings"] == _TRICKY
    assert parsed["now"] == "2026-01-01 00:00:00+00:00"
    assert list(parsed) == ["dag_id", "ok", "tasks", "makespan", "alpha", "strings", "numbers", "now"]


def test_yaml_output_writes_unicode_and_long_values_as_they_are() -> None:
    """Unicode is written as text (not ``\\u`` escapes) and a long message stays on one line."""
    long_message = "word " * 150
    out = io.StringIO()
    display.print_yaml({"dag_id": "训练", "message": long_message.strip()}, out)
    assert out.getvalue() == f"dag_id: 训练\nmessage: {long_message.strip()}\n"


def test_plain_output_is_a_header_then_one_tab_separated_line_per_row() -> None:
    """docs/cli.md: "a header line ..., then one tab-separated line per row"; the header is the first
    row's keys when no columns are given."""
    out = io.StringIO()
    display.print_plain([{"task_id": "train", "slots": 4}, {"task_id": "eval", "slots": 1}], out)
    assert out.getvalue() == "task_id\tslots\ntrain\t4\neval\t1\n"


def test_plain_cells_are_one_line_each_whatever_the_value() -> None:
    """A cell never breaks the row: None is empty, lists are joined with commas, mappings are compact JSON,
    tabs and newlines become one blank; numbers, booleans and unicode are printed as they are."""
    row = {
        "none": None,
        "list": ["a", ["b", "c"], None],
        "mapping": {"wait_s": 30, "pool": "gpu"},
        "text": "line one\n\tline  two ",
        "number": 1200.0,
        "flag": True,
        "unicode": "训练",
    }
    out = io.StringIO()
    display.print_plain([row], out)
    header, line = out.getvalue().splitlines()
    assert header.split("\t") == list(row)
    assert line.split("\t") == [
        "",
        "a,b,c,",
        '{"wait_s":30,"pool":"gpu"}',
        "line one line two",
        "1200.0",
        "True",
        "训练",
    ]


def test_plain_output_prints_nothing_without_rows_or_columns() -> None:
    out = io.StringIO()
    display.print_plain([], out)
    assert out.getvalue() == ""


def test_plain_output_follows_the_columns_given() -> None:
    """A row lacking a column gets an empty cell there; keys not among the columns are left out."""
    out = io.StringIO()
    display.print_plain([{"a": 1, "extra": "x"}, {"b": 2}], out, columns=("a", "b"))
    assert out.getvalue() == "a\tb\n1\t\n\t2\n"


@pytest.mark.parametrize("output", ["json", "yaml", "plain"])
def test_emit_prints_each_format_as_its_helper_does(output: str) -> None:
    rows = [{"task_id": "train", "slots": 4}]
    expected = io.StringIO()
    {"json": display.print_json, "yaml": display.print_yaml}.get(output, display.print_plain)(
        _RESULT if output != "plain" else rows, expected
    )
    out = io.StringIO()
    display.emit(output, _RESULT, rows=rows, table=lambda: pytest.fail("table printed"), file=out)
    assert out.getvalue() == expected.getvalue()


@pytest.mark.parametrize(("output", "builds"), [("json", 0), ("yaml", 0), ("table", 0), ("plain", 1)])
def test_emit_builds_the_plain_rows_only_for_plain(output: str, builds: int) -> None:
    """`rows` may be a callable: a listing only `plain` prints is not built for the other formats."""
    calls: list[int] = []
    printed: list[int] = []

    def rows() -> list[dict[str, int]]:
        calls.append(1)
        return [{"a": 1}]

    display.emit(output, {"a": 1}, rows=rows, table=lambda: printed.append(1), file=io.StringIO())
    assert len(calls) == builds
    assert len(printed) == (output == "table")


def test_emit_table_without_a_table_printer_prints_the_plain_rows() -> None:
    out = io.StringIO()
    display.emit("table", {}, rows=[{"a": 1, "b": "x"}], file=out)
    assert out.getvalue() == "a\tb\n1\tx\n"


# -- durations and pools ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.4, "0s"),
        (45, "45s"),
        (59.7, "1m"),
        (60, "1m"),
        (90, "1m30s"),
        (750, "12m30s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (3900, "1h05m"),
        (86400, "24h00m"),
        (90060, "25h01m"),
    ],
)
def test_hours_prints_a_duration_as_the_tables_show_it(seconds: float, text: str) -> None:
    """Seconds up to a minute, minutes and seconds up to an hour, then hours and minutes (never days)."""
    assert display.hours(seconds) == text


def test_pools_text_lists_pools_sorted_or_says_there_are_none() -> None:
    assert display.pools_text({"gpu_b": 8, "gpu_a": 4}) == "gpu_a=4, gpu_b=8"
    assert display.pools_text({}) == "unlimited"
    assert display.pools_text({}, "not checked") == "not checked"


# -- consoles ---------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_console_is_uncoloured_plain_text_in_a_pipe_and_rich_on_a_terminal() -> None:
    piped, terminal = display.console(io.StringIO()), display.console(_Terminal())
    assert isinstance(piped, display.PipeConsole) and piped.no_color
    assert not isinstance(terminal, display.PipeConsole) and not terminal.no_color


@pytest.mark.parametrize(("columns", "width"), [(None, 200), ("wide", 200), ("150", 150)])
def test_console_in_a_pipe_is_200_wide_unless_columns_says(
    monkeypatch: pytest.MonkeyPatch, columns: str | None, width: int
) -> None:
    """Airflow's width in a pipe (200); a COLUMNS that is a width wins, one that is not is ignored."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert display.console(io.StringIO()).width == width


@pytest.mark.usefixtures("_no_configured_pools")
def test_error_console_writes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """Messages stay off stdout, so `-o json | jq` reads only the result."""
    display.error_console().print("loading DAGs")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "loading DAGs\n")


@pytest.mark.usefixtures("_no_configured_pools")
def test_pipe_console_drops_trailing_blanks_and_keeps_each_newline() -> None:
    out = io.StringIO()
    pipe = display.console(out)
    pipe.print("first   ")
    pipe.print("second")
    assert out.getvalue() == "first\nsecond\n"


# -- tables -----------------------------------------------------------------------------------------------
def _table(rows: int = 2) -> display.PlainTable:
    table = display.PlainTable("Title", [("Task", "left"), ("Slots", "right")])
    for i in range(rows):
        table.add_row(f"task_{i}" if i else "t", str(10**i), highlight=i == 1)
    return table


def _pipe_rows(out: str) -> list[list[str]]:
    """The cells of the table printed in ``out`` in a pipe: the line of dashes under its header gives
    each column's span."""
    lines = out.splitlines()
    dashes = next(n for n, line in enumerate(lines) if line.startswith("-") and set(line) <= {"-", " "})
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[dashes])]
    bounds = [(start, None if i == len(spans) - 1 else end) for i, (start, end) in enumerate(spans)]
    return [[line[s:e].strip() for s, e in bounds] for line in lines[dashes + 1 :] if line.strip()]


def test_plain_table_render_aligns_columns_by_their_justification() -> None:
    assert _table().render() == "Title\nTask    Slots\n------  -----\nt           1\ntask_1     10\n"


def test_plain_table_render_of_no_rows_is_its_title_and_header() -> None:
    assert _table(0).render() == "Title\nTask  Slots\n----  -----\n"


def test_plain_table_render_colours_only_the_highlighted_rows_and_only_when_asked() -> None:
    coloured = _table().render(colour=True).splitlines()
    assert coloured[3] == "t           1"
    assert coloured[4] == "\x1b[1;31mtask_1     10\x1b[0m"
    assert "\x1b" not in _table().render(colour=False)


@pytest.mark.usefixtures("_no_configured_pools")
def test_plain_table_prints_as_rich_up_to_rich_rows_then_as_plain_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/cli.md: "Listings over 200 rows are printed as plain aligned columns" (coloured on a terminal)."""
    assert display.RICH_ROWS == 200
    monkeypatch.setattr(display, "RICH_ROWS", 2)
    short, long = _Terminal(), _Terminal()
    _table(2).print(short)
    _table(3).print(long)
    assert _BOX_DRAWING & set(short.getvalue())
    assert long.getvalue() == _table(3).render(colour=True)
    piped = io.StringIO()
    _table(3).print(piped)
    assert piped.getvalue() == _table(3).render()


@pytest.mark.usefixtures("_no_configured_pools")
def test_table_cells_are_data_not_rich_markup() -> None:
    """ "[gpu_dag] pools" in a cell is printed as it is, not taken as a style."""
    table = display.PlainTable("T", [("Problem", "left")])
    table.add_row("set [gpu_dag] pools or [bold]x[/bold]")
    out = io.StringIO()
    table.print(out)
    assert _pipe_rows(out.getvalue()) == [["set [gpu_dag] pools or [bold]x[/bold]"]]


@pytest.mark.usefixtures("_no_configured_pools")
def test_table_cells_too_long_for_the_line_fold_instead_of_being_cut() -> None:
    """A cut id ("prepr…") would make two rows look the same: the whole id is printed over several lines."""
    table = display.PlainTable("T", [("Task", "left"), ("Slots", "right")])
    table.add_row(LONG_IDS[0] * 4, "1")
    out = io.StringIO()
    table.print(out)
    assert "…" not in out.getvalue()
    assert len(out.getvalue().splitlines()) > 4
    assert table_column(out.getvalue(), 0) == LONG_IDS[0] * 4


def _starts(lines: list[str], text: str) -> set[int]:
    """The screen column (wide characters count 2) where ``text`` starts on each line holding it."""
    return {cell_len(line[: line.index(text)]) for line in lines if text in line}


@pytest.mark.usefixtures("_no_configured_pools")
def test_wide_unicode_cells_keep_the_columns_aligned_in_rich_tables() -> None:
    table = display.PlainTable("T", [("Task", "left"), ("Pool", "left")])
    table.add_row("训练", "gpu_a")
    table.add_row("ab", "gpu_b")
    out = io.StringIO()
    table.print(out)
    lines = out.getvalue().splitlines()
    assert _starts(lines, "gpu_a") == _starts(lines, "gpu_b")


def test_wide_unicode_cells_keep_the_columns_aligned_in_plain_columns() -> None:
    table = display.PlainTable("T", [("Task", "left"), ("Pool", "left")])
    table.add_row("训练", "gpu_a")
    table.add_row("ab", "gpu_b")
    lines = table.render().splitlines()
    assert _starts(lines, "gpu_a") == _starts(lines, "gpu_b")


def _finding(severity: str, task_id: str | None, message: str) -> Finding:
    return Finding(severity, "unknown-pool", "dag_a", task_id, message, "use a known pool")


@pytest.mark.usefixtures("_no_configured_pools")
def test_findings_table_prints_a_row_per_finding_with_its_fix() -> None:
    findings = [
        _finding("error", "train", "pool 'gpu_h100' is not in [gpu_dag] pools"),
        _finding("warning", None, "no task"),
    ]
    table = display.findings_table(findings, title="Problems")
    assert [str(c) for c in table.columns[0].cells] == ["ERROR", "WARNING"]
    assert [c.style for c in table.columns[0].cells] == ["bold red", "yellow"]
    out = io.StringIO()
    display.console(out).print(table)
    title, header = out.getvalue().splitlines()[:2]
    assert (title, header.split()) == ("Problems", ["Severity", "Code", "DAG", "Task", "Problem", "Fix"])
    assert _pipe_rows(out.getvalue()) == [
        [
            "ERROR",
            "unknown-pool",
            "dag_a",
            "train",
            "pool 'gpu_h100' is not in [gpu_dag] pools",
            "use a known pool",
        ],
        ["WARNING", "unknown-pool", "dag_a", "-", "no task", "use a known pool"],
    ]


@pytest.mark.usefixtures("_no_configured_pools")
def test_findings_table_of_no_finding_is_its_header_alone() -> None:
    out = io.StringIO()
    display.console(out).print(display.findings_table([]))
    assert out.getvalue().splitlines()[0] == "Findings"
    assert out.getvalue().splitlines()[1].split() == ["Severity", "Code", "DAG", "Task", "Problem", "Fix"]
    assert _pipe_rows(out.getvalue()) == []


# -- plans and simulations --------------------------------------------------------------------------------
def _plan() -> Plan:
    def task(task_id: str, critical: bool, **extra: Any) -> TaskPlan:
        fields: dict[str, Any] = {
            "task_id": task_id,
            "duration": 1800.0,
            "earliest_start": 0.0,
            "earliest_finish": 1800.0,
            "latest_start": 0.0,
            "latest_finish": 1800.0,
            "slack": 0.0,
            "priority": 10,
            "critical": critical,
            "gpus": 0,
            "gpu": "-",
            "pool": None,
            "pool_slots": 1,
            "gpu_hours": 0.0,
            "duration_declared": True,
            "layer": 0,
        }
        return TaskPlan(**{**fields, **extra})

    tasks = [
        task("load", True),
        task(
            "sweep",
            False,
            duration=600.0,
            earliest_finish=600.0,
            latest_start=1200.0,
            slack=1200.0,
            priority=3,
            duration_declared=False,
        ),
        task(
            "train",
            True,
            duration=3900.0,
            earliest_start=1800.0,
            earliest_finish=5700.0,
            latest_start=1800.0,
            latest_finish=5700.0,
            priority=5,
            gpus=4,
            gpu="4x a100",
            pool="gpu_a100",
            pool_slots=4,
            gpu_hours=4.333333,
        ),
    ]
    return Plan("pipe", tasks, [("load", "train")], 5700.0, ["load", "train"], 4.333333)


def test_plan_table_lists_every_task_with_its_times_and_marks_the_critical_ones() -> None:
    """Durations not declared carry a ``*``; a task without a pool is in Airflow's default pool."""
    table = display.plan_table(_plan())
    assert table.title == "Plan of DAG 'pipe' (3 tasks)"
    assert [name for name, _ in table.columns][:3] == ["Task", "Crit", "Duration"]
    assert table.rows == [
        (["load", "*", "30m", "0s", "30m", "0s", "30m", "0s", "10", "-", "default_pool", "0.00"], True),
        (["sweep", "", "10m*", "0s", "10m", "20m", "30m", "20m", "3", "-", "default_pool", "0.00"], False),
        (
            ["train", "*", "1h05m", "30m", "1h35m", "30m", "1h35m", "0s", "5", "4x a100", "gpu_a100", "4.33"],
            True,
        ),
    ]


def test_plan_table_critical_only_counts_the_tasks_it_shows() -> None:
    table = display.plan_table(_plan(), critical_only=True)
    assert table.title == "Plan of DAG 'pipe' (2 of 3 tasks, critical path only)"
    assert [cells[0] for cells, _ in table.rows] == ["load", "train"]


def test_plan_rows_are_the_plan_columns_in_seconds() -> None:
    rows = display.plan_rows(_plan())
    assert [list(row) for row in rows] == [list(display.PLAN_COLUMNS)] * 3
    assert rows[2] == {
        "task_id": "train",
        "critical": True,
        "duration_s": 3900.0,
        "duration_declared": True,
        "earliest_start_s": 1800.0,
        "earliest_finish_s": 5700.0,
        "latest_start_s": 1800.0,
        "latest_finish_s": 5700.0,
        "slack_s": 0.0,
        "priority": 5,
        "gpu": "4x a100",
        "pool": "gpu_a100",
        "pool_slots": 4,
        "gpu_hours": 4.3333,
    }
    assert rows[0]["pool"] == "default_pool"
    assert [row["task_id"] for row in display.plan_rows(_plan(), critical_only=True)] == ["load", "train"]


def _result(
    policy: str, makespan: float, lower_bound: float, schedule: Any = (), rule: str = ""
) -> SimulationResult:
    tasks = [ScheduledTask(t, start, end, slots, "gpu", 1, ready) for t, start, end, slots, ready in schedule]
    return SimulationResult(policy, makespan, tasks, lower_bound, priority_rule=rule)


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulation_summary_compares_each_policy_with_the_bound_and_the_baseline() -> None:
    results = {
        "stock": _result("stock", 3600.0, 3000.0, rule="downstream"),
        "reservation": _result("reservation", 3240.0, 3000.0, rule="critical_path"),
        "critical_path": _result("critical_path", 3960.0, 0.0),
    }
    out = io.StringIO()
    display.console(out).print(display.simulation_summary_table(results))
    assert out.getvalue().splitlines()[0] == "Predicted makespan"
    assert _pipe_rows(out.getvalue()) == [
        ["stock", "downstream", "1h00m", "50m", "1.20x", "-"],
        ["reservation", "critical_path", "54m", "50m", "1.08x", "-10.0%"],
        ["critical_path", "-", "1h06m", "0s", "1.00x", "+10.0%"],
    ]


@pytest.mark.parametrize(
    ("results", "baseline"),
    [({"ours": (60.0, 60.0)}, "stock"), ({"stock": (0.0, 0.0), "ours": (60.0, 60.0)}, "stock")],
    ids=["no baseline", "baseline of zero length"],
)
def test_simulation_summary_without_a_usable_baseline_shows_no_change(
    results: dict[str, tuple[float, float]], baseline: str
) -> None:
    table = display.simulation_summary_table({k: _result(k, *v) for k, v in results.items()}, baseline)
    assert table.columns[-1].header == f"vs {baseline}"
    assert [str(c) for c in table.columns[-1].cells] == ["-"] * len(results)


def test_simulation_table_puts_policies_side_by_side_in_the_last_ones_order() -> None:
    """Rows follow the last policy's start times; a task a policy did not run shows ``-``; the wait is the
    last policy's."""
    stock = _result("stock", 600.0, 600.0, [("a", 0.0, 300.0, 1, 0.0), ("b", 300.0, 600.0, 2, 0.0)])
    ours = _result(
        "reservation",
        600.0,
        600.0,
        [("b", 0.0, 300.0, 2, 0.0), ("a", 300.0, 600.0, 1, 0.0), ("c", 300.0, 400.0, 1, 60.0)],
    )
    table = display.simulation_table({"stock": stock, "reservation": ours}, critical=["b"])
    assert [name for name, _ in table.columns] == [
        "Task",
        "Crit",
        "Slots",
        "stock",
        "reservation",
        "Wait (reservation)",
    ]
    assert table.rows == [
        (["b", "*", "2", "5m - 10m", "0s - 5m", "0s"], True),
        (["a", "", "1", "0s - 5m", "5m - 10m", "5m"], False),
        (["c", "", "1", "-", "5m - 6m40s", "4m"], False),
    ]


def test_write_schedules_gantt_writes_one_chart_per_policy(tmp_path: Path) -> None:
    results = {
        "stock": _result("stock", 3600.0, 3000.0, [("a", 0.0, 3600.0, 1, 0.0)], rule="downstream"),
        "reservation": _result("reservation", 3000.0, 3000.0, [("a", 0.0, 3000.0, 1, 0.0)]),
    }
    page = display.write_schedules_gantt(str(tmp_path / "out" / "chart.html"), "DAG d", results, ["a"])
    assert page == tmp_path / "out" / "chart.html"
    html = page.read_text(encoding="utf-8")
    for text in (
        "DAG d",
        "stock: makespan 1h00m",
        "reservation: makespan 50m",
        "priority rule downstream",
        "1.20x",
    ):
        assert text in html, text
    image = display.write_schedules_gantt(str(tmp_path / "chart.svg"), "DAG d", results)
    assert image.read_text(encoding="utf-8").startswith("<svg ")


def test_write_schedules_gantt_refuses_a_file_that_is_neither_html_nor_svg(tmp_path: Path) -> None:
    path = str(tmp_path / "chart.png")
    with pytest.raises(ValueError, match=r"use a file name ending in \.html or \.svg") as err:
        display.write_schedules_gantt(path, "DAG d", {"stock": _result("stock", 1.0, 1.0)})
    assert str(err.value).startswith(f"--gantt {path!r}")
    assert not (tmp_path / "chart.png").exists()
