"""Terminal output of the ``airflow gpu-dag`` commands: rich tables on a terminal, plain text in a
pipe, and ``--output json|yaml|plain`` for scripts (:func:`emit`, one helper for every command).

Airflow's ``AirflowConsole`` (``airflow.cli.simple_table``) is not used for these: its ``print_as``
writes JSON on one line through a syntax highlighter, YAML with sorted keys, ``plain`` as
space-aligned columns (``tabulate``) and "No data found" for an empty listing, where the commands
promise indented JSON in the result's order, tab-separated rows with a header always, and titled
tables with critical rows marked; its one fixed width in a pipe (200) is what :func:`console` uses."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import yaml
from rich.box import Box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from airflow_gpu_dag.charts.gantt import GanttChart, bars_from_schedule, write_gantt
from airflow_gpu_dag.core.analysis.validation import Finding
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL
from airflow_gpu_dag.core.model.resources import format_duration
from airflow_gpu_dag.core.planning.plan import Plan

__all__ = [
    "OUTPUT_FORMATS",
    "PIPE_BOX",
    "PLAN_COLUMNS",
    "PipeConsole",
    "PlainTable",
    "console",
    "emit",
    "error_console",
    "findings_table",
    "hours",
    "plan_rows",
    "plan_table",
    "pools_text",
    "print_json",
    "print_plain",
    "print_yaml",
    "simulation_summary_table",
    "simulation_table",
    "write_schedules_gantt",
]


#: How a table is drawn in a pipe or a file: plain text, a line of dashes under the header, no
#: box-drawing characters (which ``grep``, ``cut``, CI logs and e-mails do not want).
PIPE_BOX = Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)


class PipeConsole(Console):
    """The console of a stream that is not a terminal: tables in plain text (:data:`PIPE_BOX`), no
    colour, no trailing blanks."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        for table in objects:
            if isinstance(table, Table):
                table.box, table.show_edge, table.pad_edge = PIPE_BOX, False, False
        with self.capture() as captured:
            super().print(*objects, **kwargs)
        self.file.write("\n".join(line.rstrip() for line in captured.get().split("\n")))


def console(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (stdout): rich tables in colour on a terminal; plain text in a pipe
    (:class:`PipeConsole`: wide, uncoloured lines, tables without box drawing)."""
    stream = file or sys.stdout
    is_tty = hasattr(stream, "isatty") and stream.isatty()
    kind = Console if is_tty else PipeConsole
    return kind(
        file=stream, width=_width(stream, is_tty), no_color=not is_tty, highlight=False, soft_wrap=False
    )


def _width(stream: IO[str], is_tty: bool) -> int | None:
    """The console's width: None (rich reads ``COLUMNS`` or asks the terminal) unless ``COLUMNS`` is
    set but no width: rich takes ``COLUMNS=0`` as a width of 0 and prints nothing at all."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return None
    if not is_tty:
        return 200
    if not columns.isdigit():  # unset, or not a number (rich ignores it)
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):
        return 80


def error_console() -> Console:
    """A console on stderr for progress and messages (keeps stdout clean for ``--output json``)."""
    return console(sys.stderr)


def print_json(data: Any, file: IO[str] | None = None) -> None:
    """Print ``data`` as indented JSON."""
    (file or sys.stdout).write(json.dumps(data, indent=2, default=str) + "\n")


#: The ``-o/--output`` choices; ``table`` is the default (rich on a terminal, plain text in a pipe).
OUTPUT_FORMATS = ("table", "json", "yaml", "plain")


def print_yaml(data: Any, file: IO[str] | None = None) -> None:
    """Print ``data`` as YAML (the same content as the JSON output, keys in the same order)."""
    plain = json.loads(json.dumps(data, default=str))
    (file or sys.stdout).write(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, width=1000))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ",".join(_cell(v) for v in value)
    if isinstance(value, Mapping):
        return json.dumps(value, default=str, separators=(",", ":"))
    return " ".join(str(value).split())  # one line, no tabs


def print_plain(
    rows: Sequence[Mapping[str, Any]],
    file: IO[str] | None = None,
    columns: Sequence[str] | None = None,
) -> None:
    """Print ``rows`` for ``cut``/``awk``: a header line, then one tab-separated line per row.

    ``columns``: the header (default: the first row's keys); give it so that the header is printed
    also when there is no row (without it and without rows, nothing is printed).
    """
    out = file or sys.stdout
    if columns is None:
        if not rows:
            return
        columns = list(rows[0])
    out.write("\t".join(columns) + "\n")
    for row in rows:
        out.write("\t".join(_cell(row.get(c)) for c in columns) + "\n")


def emit(
    output: str,
    data: Any,
    *,
    rows: Sequence[Mapping[str, Any]] | Callable[[], Sequence[Mapping[str, Any]]] = (),
    table: Callable[[], None] | None = None,
    file: IO[str] | None = None,
    columns: Sequence[str] | None = None,
) -> None:
    """Print a command's result in the ``-o/--output`` format.

    :param output: one of :data:`OUTPUT_FORMATS`.
    :param data: the whole result for ``json`` and ``yaml`` (a dict/list of JSON-ready values).
    :param rows: the listing for ``plain`` (a row per item, same keys in every row), or a callable
        returning it.
    :param table: prints the human output for ``table`` (default: the ``plain`` rows).
    :param columns: the ``plain`` header, printed even when there is no row (default: the first row's
        keys, and no header without rows).
    """
    if output == "json":
        print_json(data, file)
    elif output == "yaml":
        print_yaml(data, file)
    elif output == "plain" or table is None:
        print_plain(rows() if callable(rows) else rows, file, columns)
    else:
        table()


def hours(seconds: float) -> str:
    """``1h05m`` style; ``0s`` for zero."""
    return format_duration(seconds)


def pools_text(capacity: Mapping[str, int], empty: str = "unlimited") -> str:
    """``gpu_a=4, gpu_b=8`` (sorted by pool); ``empty`` when there are none."""
    return ", ".join(f"{k}={v}" for k, v in sorted(capacity.items())) or empty


#: Longest listing drawn as a rich table; longer ones are printed as plain columns (fast).
RICH_ROWS = 200


class PlainTable:
    """A table that prints as a rich table when short and as fast fixed-width columns when long (a
    rich ``Table`` of 1,000 rows takes seconds to lay out). Rows with ``highlight`` are bold red on a
    terminal; ``*`` in the Crit column marks them everywhere."""

    def __init__(self, title: str, columns: Sequence[tuple[str, str]]) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows: list[tuple[list[str], bool]] = []

    def add_row(self, *cells: str, highlight: bool = False) -> None:
        self.rows.append(([str(c) for c in cells], highlight))

    def render(self, colour: bool = False) -> str:
        # widths on the screen (a CJK character takes two cells), so wide ids keep the columns aligned
        widths = [cell_len(name) for name, _ in self.columns]
        for cells, _ in self.rows:
            for i, cell in enumerate(cells):
                widths[i] = max(widths[i], cell_len(cell))

        def line(cells: Sequence[str]) -> str:
            parts = []
            for i, cell in enumerate(cells):
                pad = " " * (widths[i] - cell_len(cell))
                parts.append(pad + cell if self.columns[i][1] == "right" else cell + pad)
            return "  ".join(parts).rstrip()

        out = [self.title, line([name for name, _ in self.columns])]
        out.append("  ".join("-" * w for w in widths))
        for cells, highlight in self.rows:
            text = line(cells)
            out.append(f"\x1b[1;31m{text}\x1b[0m" if colour and highlight else text)
        return "\n".join(out) + "\n"

    def to_rich(self) -> Table:
        """The same table as a rich ``Table`` (boxed, critical rows in bold red)."""
        table = Table(title=self.title, title_justify="left")
        for name, justify in self.columns:
            # fold, not the default ellipsis: a cut id ("prepr…") makes two rows look the same
            table.add_column(name, justify="right" if justify == "right" else "left", overflow="fold")
        for cells, highlight in self.rows:
            # Text, not str: a cell is data, so "[gpu_dag]" in it is not rich markup.
            table.add_row(*(Text(cell) for cell in cells), style="bold red" if highlight else None)
        return table

    def print(self, file: IO[str] | None = None) -> None:
        """Print as a rich table up to :data:`RICH_ROWS` rows, as plain columns above that."""
        stream = file or sys.stdout
        if len(self.rows) <= RICH_ROWS:
            console(stream).print(self.to_rich())
        else:
            stream.write(self.render(colour=hasattr(stream, "isatty") and stream.isatty()))


def findings_table(findings: Sequence[Finding], title: str = "Findings") -> Table:
    """One row per finding: severity, code, DAG, task, message and fix."""
    table = Table(title=title, show_lines=False, title_justify="left")
    # fold, not the default ellipsis: a cut id ("prepr…") makes two findings look the same
    table.add_column("Severity", overflow="fold")
    table.add_column("Code", overflow="fold")
    table.add_column("DAG", overflow="fold")
    table.add_column("Task", overflow="fold")
    table.add_column("Problem", overflow="fold")
    table.add_column("Fix", overflow="fold")
    for finding in findings:
        style = "bold red" if finding.is_error else "yellow"
        table.add_row(
            Text(finding.severity.upper(), style=style),
            # Text, not str: messages name settings such as "[gpu_dag] pools", not rich markup.
            Text(finding.code),
            Text(finding.dag_id),
            Text(finding.task_id or "-"),
            Text(finding.message),
            Text(finding.fix),
        )
    return table


def plan_table(plan: Plan, critical_only: bool = False) -> PlainTable:
    """The per-task plan: ES/EF/LS/LF, slack, priority and GPU request, critical tasks marked."""
    total = len(plan.tasks)
    if critical_only:
        shown = sum(1 for task in plan.tasks if task.critical)
        counted = f"{shown} of {total} tasks, critical path only"
    else:
        counted = f"{total} tasks"
    table = PlainTable(
        f"Plan of DAG {plan.dag_id!r} ({counted})",
        [
            ("Task", "left"),
            ("Crit", "left"),
            ("Duration", "right"),
            ("ES", "right"),
            ("EF", "right"),
            ("LS", "right"),
            ("LF", "right"),
            ("Slack", "right"),
            ("Priority", "right"),
            ("GPU request", "left"),
            ("Pool", "left"),
            ("GPU-h", "right"),
        ],
    )
    for task in plan.tasks:
        if critical_only and not task.critical:
            continue
        table.add_row(
            task.task_id,
            "*" if task.critical else "",
            hours(task.duration) + ("" if task.duration_declared else "*"),
            hours(task.earliest_start),
            hours(task.earliest_finish),
            hours(task.latest_start),
            hours(task.latest_finish),
            hours(task.slack),
            str(task.priority),
            task.gpu,
            task.pool or DEFAULT_POOL,
            f"{task.gpu_hours:.2f}",
            highlight=task.critical,
        )
    return table


#: The keys of :func:`plan_rows`, in order: the header of ``plan -o plain``.
PLAN_COLUMNS = (
    "task_id",
    "critical",
    "duration_s",
    "duration_declared",
    "earliest_start_s",
    "earliest_finish_s",
    "latest_start_s",
    "latest_finish_s",
    "slack_s",
    "priority",
    "gpu",
    "pool",
    "pool_slots",
    "gpu_hours",
)


def plan_rows(plan: Plan, critical_only: bool = False) -> list[dict[str, Any]]:
    """The per-task plan as rows (``-o plain``): times in seconds."""
    return [
        {
            "task_id": t.task_id,
            "critical": t.critical,
            "duration_s": t.duration,
            "duration_declared": t.duration_declared,
            "earliest_start_s": t.earliest_start,
            "earliest_finish_s": t.earliest_finish,
            "latest_start_s": t.latest_start,
            "latest_finish_s": t.latest_finish,
            "slack_s": t.slack,
            "priority": t.priority,
            "gpu": t.gpu,
            "pool": t.pool or DEFAULT_POOL,
            "pool_slots": t.pool_slots,
            "gpu_hours": round(t.gpu_hours, 4),
        }
        for t in plan.tasks
        if t.critical or not critical_only
    ]


def simulation_summary_table(results: Mapping[str, Any], baseline: str = "stock") -> Table:
    """Makespan per policy, against the lower bound and the baseline."""
    table = Table(title="Predicted makespan", title_justify="left")
    for name in ("Admission", "Priority rule", "Makespan", "Lower bound", "vs bound", f"vs {baseline}"):
        table.add_column(name, justify="left" if name in ("Admission", "Priority rule") else "right")
    base = results.get(baseline)
    for label, result in results.items():
        change = "-"
        if base is not None and label != baseline and base.makespan > 0:
            change = f"{(result.makespan - base.makespan) / base.makespan * 100:+.1f}%"
        table.add_row(
            label,
            getattr(result, "priority_rule", "") or "-",
            hours(result.makespan),
            hours(result.lower_bound),
            f"{result.ratio:.2f}x",
            change,
        )
    return table


def simulation_table(results: Mapping[str, Any], critical: Iterable[str] = ()) -> PlainTable:
    """Per task: start and end under each policy, side by side (rows in the order of the last
    policy's start times), critical tasks marked."""
    critical_set = set(critical)
    labels = list(results)
    by_policy = {label: results[label].by_id() for label in labels}
    last = results[labels[-1]]
    order = [t.task_id for t in sorted(last.schedule, key=lambda t: (t.start, t.task_id))]
    table = PlainTable(
        "Predicted schedule (start - end)",
        [
            ("Task", "left"),
            ("Crit", "left"),
            ("Slots", "right"),
            *((label, "right") for label in labels),
            (f"Wait ({labels[-1]})", "right"),
        ],
    )
    for task_id in order:
        cells = []
        for label in labels:
            entry = by_policy[label].get(task_id)
            cells.append(f"{hours(entry.start)} - {hours(entry.end)}" if entry else "-")
        ours = by_policy[labels[-1]][task_id]
        table.add_row(
            task_id,
            "*" if task_id in critical_set else "",
            str(ours.slots),
            *cells,
            hours(ours.wait),
            highlight=task_id in critical_set,
        )
    return table


def write_schedules_gantt(
    path: str, title: str, results: Mapping[str, Any], critical: Sequence[str] = ()
) -> Path:
    """Write predicted schedules (label -> a simulation result) as one Gantt chart each, with a summary
    table, to ``path`` (``.html`` page or ``.svg`` image); tasks in ``critical`` are highlighted."""
    charts = [
        GanttChart(
            f"{label}: makespan {hours(r.makespan)}",
            bars_from_schedule(r.schedule, critical),
            subtitle=f"priority rule {getattr(r, 'priority_rule', '') or '-'}; "
            f"lower bound {hours(r.lower_bound)}",
        )
        for label, r in results.items()
    ]
    summary = [["Admission", "Makespan", "Lower bound", "vs bound"]] + [
        [label, hours(r.makespan), hours(r.lower_bound), f"{r.ratio:.2f}x"] for label, r in results.items()
    ]
    return write_gantt(path, charts, title, summary)
