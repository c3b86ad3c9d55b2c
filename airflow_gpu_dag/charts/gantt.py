"""Gantt charts of predicted schedules as self-contained SVG (no JavaScript, no downloads).

Used by ``airflow gpu-dag simulate --gantt`` and by the critical-path page. Several charts (one per
admission policy) share one time axis so they can be compared at a glance; critical tasks are drawn
in red, the others in blue, and every bar has a tooltip with its times and slots.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_gpu_dag.core.model.pools import DEFAULT_POOL
from airflow_gpu_dag.core.model.resources import format_duration

__all__ = [
    "GanttBar",
    "GanttChart",
    "GanttWriteError",
    "bars_from_plan",
    "bars_from_schedule",
    "check_gantt_path",
    "render_html",
    "render_svg",
    "write_gantt",
]

ROW_HEIGHT = 14
LABEL_WIDTH = 230
CHART_WIDTH = 820
HEADER_HEIGHT = 40
AXIS_HEIGHT = 18
CRITICAL_COLOUR = "#d62728"
NORMAL_COLOUR = "#1f77b4"


@dataclass(frozen=True)
class GanttBar:
    """One task on the chart; times in seconds from the start of the run."""

    task_id: str
    start: float
    end: float
    slots: int = 0
    pool: str = ""
    critical: bool = False


@dataclass
class GanttChart:
    """A titled set of bars (one schedule)."""

    title: str
    bars: list[GanttBar] = field(default_factory=list)
    subtitle: str = ""

    @property
    def makespan(self) -> float:
        return max((b.end for b in self.bars), default=0.0)


def bars_from_schedule(schedule: Iterable[Any], critical: Iterable[str] = ()) -> list[GanttBar]:
    """Bars from a simulator schedule (objects with task_id/start/end/slots/pool)."""
    critical_set = set(critical)
    return [
        GanttBar(t.task_id, t.start, t.end, int(t.slots), str(t.pool), t.task_id in critical_set)
        for t in schedule
    ]


def bars_from_plan(plan: Any) -> list[GanttBar]:
    """Bars at each task's earliest start (the schedule with unlimited GPUs); a task without a pool of
    its own holds slots of Airflow's default pool (as the simulator counts it)."""
    return [
        GanttBar(t.task_id, t.earliest_start, t.earliest_finish, t.gpus, t.pool or DEFAULT_POOL, t.critical)
        for t in plan.tasks
    ]


def _tick_step(span: float) -> float:
    """A round tick step giving 5-10 ticks over ``span`` seconds."""
    if span <= 0:
        return 1.0
    # each step at most twice the one before, so the first with at most 10 ticks gives at least 5
    candidates = [1, 2, 3, 5, 10, 15, 20, 30, 60, 120, 180, 300, 600, 900, 1200, 1800, 3600, 7200, 10800]
    candidates += [14400, 21600, 43200, 86400]
    for step in candidates:
        if span / step <= 10:
            return float(step)
    return float(86400 * math.ceil(span / 86400 / 10))


def _chart_svg(chart: GanttChart, span: float, y0: int) -> tuple[list[str], int]:
    """SVG elements of one chart starting at ``y0``; returns them and the height used."""
    esc = html.escape
    scale = CHART_WIDTH / span if span > 0 else 0.0
    parts = [
        f'<g class="gantt-chart" data-title="{esc(chart.title)}">',
        f'<text x="4" y="{y0 + 16}" class="gantt-title">{esc(chart.title)}</text>',
        f'<text x="4" y="{y0 + 32}" class="gantt-sub">{esc(chart.subtitle)}</text>',
    ]
    axis_y = y0 + HEADER_HEIGHT
    step = _tick_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        x = LABEL_WIDTH + tick * scale
        grid_end = axis_y + AXIS_HEIGHT + len(chart.bars) * ROW_HEIGHT
        parts.append(
            f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{grid_end}"'
            ' class="gantt-grid"/>'
            f'<text x="{x + 2:.1f}" y="{axis_y + 12}" class="gantt-tick">{esc(format_duration(tick))}</text>'
        )
        tick += step
    bars = sorted(chart.bars, key=lambda b: (b.start, b.end, b.task_id))
    top = axis_y + AXIS_HEIGHT
    for row, bar in enumerate(bars):
        y = top + row * ROW_HEIGHT
        x = LABEL_WIDTH + bar.start * scale
        width = max(1.0, (bar.end - bar.start) * scale)
        colour = CRITICAL_COLOUR if bar.critical else NORMAL_COLOUR
        tip = (
            f"{bar.task_id}: {format_duration(bar.start)} - {format_duration(bar.end)}"
            f" ({format_duration(bar.end - bar.start)})"
            + (f", {bar.slots} slot(s) of {bar.pool}" if bar.slots else "")
            + (", critical" if bar.critical else "")
        )
        # cut in the middle: ids sharing a long prefix (mapped ``...[0]``, ``run:dag/...``) stay apart
        label = bar.task_id if len(bar.task_id) <= 34 else bar.task_id[:15] + "..." + bar.task_id[-16:]
        parts.append(
            f'<g class="gantt-bar{" critical" if bar.critical else ""}" data-task-id="{esc(bar.task_id)}">'
            f"<title>{esc(tip)}</title>"
            f'<text x="{LABEL_WIDTH - 6}" y="{y + ROW_HEIGHT - 3}" class="gantt-label">{esc(label)}</text>'
            f'<rect x="{x:.1f}" y="{y + 2}" width="{width:.1f}" height="{ROW_HEIGHT - 4}" fill="{colour}"/>'
            "</g>"
        )
    end_x = LABEL_WIDTH + chart.makespan * scale
    bottom = top + len(bars) * ROW_HEIGHT
    parts.append(
        f'<line x1="{end_x:.1f}" y1="{axis_y}" x2="{end_x:.1f}" y2="{bottom}" class="gantt-makespan"/>'
    )
    parts.append("</g>")
    return parts, bottom - y0 + 16


_STYLE = (
    "<style>"
    ".gantt-title{font:bold 14px sans-serif}.gantt-sub{font:12px sans-serif;fill:#555}"
    ".gantt-tick{font:10px sans-serif;fill:#666}.gantt-label{font:10px monospace;text-anchor:end}"
    ".gantt-grid{stroke:#e5e5e5}.gantt-makespan{stroke:#333;stroke-dasharray:4 3}"
    "</style>"
)


def render_svg(charts: Sequence[GanttChart]) -> str:
    """One SVG with the charts stacked on a shared time axis."""
    span = max((c.makespan for c in charts), default=0.0)
    body: list[str] = []
    y = 0
    for chart in charts:
        parts, height = _chart_svg(chart, span, y)
        body.extend(parts)
        y += height
    width = LABEL_WIDTH + CHART_WIDTH + 60
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="gantt" width="{width}" height="{max(y, 1)}" '
        f'viewBox="0 0 {width} {max(y, 1)}">{_STYLE}{"".join(body)}</svg>'
    )


def render_html(charts: Sequence[GanttChart], title: str, summary_rows: Sequence[Sequence[str]] = ()) -> str:
    """A self-contained HTML page with an optional summary table and the SVG chart."""
    esc = html.escape
    table = ""
    if summary_rows:
        head, *rows = summary_rows
        table = (
            "<table><thead><tr>"
            + "".join(f"<th>{esc(c)}</th>" for c in head)
            + "</tr></thead><tbody>"
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
            + "</tbody></table>"
        )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>body{{font-family:sans-serif;margin:16px}}"
        "table{border-collapse:collapse;margin-bottom:16px}td,th{border:1px solid #ccc;padding:4px 8px}"
        f"</style></head><body><h1>{esc(title)}</h1>{table}"
        "<p><span style='color:#d62728'>&#9632;</span> critical task "
        "<span style='color:#1f77b4'>&#9632;</span> task with slack; dashed line: makespan.</p>"
        f"{render_svg(charts)}</body></html>\n"
    )


class GanttWriteError(OSError, ValueError):
    """The chart's file cannot be written: an ``OSError`` (what failed), and a ``ValueError`` so the CLI
    prints it as its one-line ``error: --gantt PATH: cannot write (...)``."""


def _suffix_error(path: str | Path) -> ValueError:
    return ValueError(f"--gantt {str(path)!r}: use a file name ending in .html or .svg")


def _cannot_write(path: str | Path, reason: str) -> GanttWriteError:
    return GanttWriteError(f"--gantt {str(path)!r}: cannot write ({reason})")


def check_gantt_path(path: str | Path) -> Path:
    """Check, before any work, that :func:`write_gantt` can write ``path``: an ``.html``/``.htm``/``.svg``
    name, not a folder, in a folder that exists or can be made and that is writable. Nothing is
    created. Returns ``path`` as a ``Path``.

    :raises ValueError: another suffix.
    :raises GanttWriteError: why the file cannot be written.
    """
    target = Path(path)
    if target.suffix.lower() not in (".html", ".htm", ".svg"):
        raise _suffix_error(path)
    if target.is_dir():
        raise _cannot_write(path, "it is a directory")
    if target.exists():
        if not os.access(target, os.W_OK):
            raise _cannot_write(path, "permission denied")
        return target
    folder = target.absolute().parent
    while not folder.exists() and folder != folder.parent:  # the folders write_gantt would make
        folder = folder.parent
    if not folder.is_dir():
        raise _cannot_write(path, f"{str(folder)!r} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _cannot_write(path, f"permission denied in {str(folder)!r}")
    return target


def write_gantt(
    path: str | Path, charts: Sequence[GanttChart], title: str, summary_rows: Sequence[Sequence[str]] = ()
) -> Path:
    """Write ``path`` as HTML (``.html``/``.htm``) or SVG (``.svg``), making its folder if needed.

    :raises ValueError: another suffix.
    :raises GanttWriteError: the file cannot be written (the ``OSError``'s reason in the message).
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix in (".html", ".htm"):
        text = render_html(charts, title, summary_rows)
    elif suffix == ".svg":
        text = render_svg(charts)
    else:
        raise _suffix_error(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as err:
        raise _cannot_write(path, err.strerror or str(err)) from err
    return target
