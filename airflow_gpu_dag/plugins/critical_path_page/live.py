"""The Critical path page's per-run live view: the plan's Gantt chart with what really happened drawn over
it, and every waiting GPU task with its reason and predicted start, refreshed while the run is live.

The data is the report of ``airflow gpu-dag explain``
(:func:`airflow_gpu_dag.cli.explain_report.build_report`), read from the api-server's own REST API with
the viewer's token, so the view shows exactly what that user may read. This module only draws it
(pure: a report in, HTML out).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_gpu_dag.core.model.resources import format_duration
from airflow_gpu_dag.pool_claim.state import iso_time

__all__ = ["LIVE_STATES", "REFRESH_S", "gantt_svg", "render_live"]

#: Run states during which the view reloads itself.
LIVE_STATES = frozenset({"queued", "running"})
#: Seconds between reloads of a live run's view.
REFRESH_S = 10

_ROW = 22
_LEFT = 260
_WIDTH = 760
_TOP = 24


def _esc(value: object) -> str:
    return html.escape("-" if value is None else str(value))


def _span(task: Mapping[str, Any], now: float) -> tuple[float | None, float | None, str]:
    """What happened or will happen to a task: (from, to, kind): ``actual`` (ran, or runs until now),
    ``predicted`` (waiting: the simulator's start and end), or nothing known."""
    start, end = task.get("start"), task.get("end")
    if start is not None:
        return start, end if end is not None else max(now, start), "actual"
    if task.get("predicted_start") is not None:
        return task["predicted_start"], task.get("predicted_end"), "predicted"
    return None, None, ""


def gantt_svg(tasks: Sequence[Mapping[str, Any]], origin: float, now: float) -> str:
    """One row per task: the plan's bar (``planned``, outlined), and over it the actual bar (``actual``:
    what ran, up to now for a running task) or the predicted one (``predicted``, dashed) of a waiting
    task; a vertical line at ``now``. Times are seconds from ``origin`` (the run's start)."""
    times = [origin, now]
    for task in tasks:
        times += [t for t in (task.get("planned_start"), task.get("planned_end")) if t is not None]
        start, end, _kind = _span(task, now)
        times += [t for t in (start, end) if t is not None]
    horizon = max(1.0, max(times) - origin)
    scale = _WIDTH / horizon

    def x(t: float) -> float:
        return _LEFT + (t - origin) * scale

    rows = []
    for index, task in enumerate(tasks):
        y = _TOP + index * _ROW
        mapped = task.get("map_index")
        suffix = f"[{mapped}]" if isinstance(mapped, int) and mapped >= 0 else ""
        label = f"{task.get('task_id')}{suffix}"
        rows.append(
            f'<text class="label" x="{_LEFT - 8}" y="{y + 14}" text-anchor="end">{_esc(label)}</text>'
        )
        planned = (task.get("planned_start"), task.get("planned_end"))
        if planned[0] is not None and planned[1] is not None:
            width = max(1.0, (planned[1] - planned[0]) * scale)
            rows.append(
                f'<rect class="planned" data-task="{_esc(task["task"])}" x="{x(planned[0]):.1f}" y="{y + 2}" '
                f'width="{width:.1f}" height="{_ROW - 4}"><title>planned {_esc(iso_time(planned[0]))} to '
                f"{_esc(iso_time(planned[1]))}</title></rect>"
            )
        start, end, kind = _span(task, now)
        if start is not None and end is not None:
            width = max(1.0, (end - start) * scale)
            what = f"{kind} {iso_time(start)} to {iso_time(end)}"
            rows.append(
                f'<rect class="{kind} {_esc(task.get("state"))}" data-task="{_esc(task["task"])}" '
                f'x="{x(start):.1f}" y="{y + 6}" width="{width:.1f}" height="{_ROW - 12}">'
                f"<title>{_esc(what)}</title></rect>"
            )
    height = _TOP + len(tasks) * _ROW + 10
    now_x = x(now)
    axis = (
        f'<line class="now" x1="{now_x:.1f}" y1="{_TOP - 6}" x2="{now_x:.1f}" y2="{height}"/>'
        f'<text class="axis" x="{_LEFT}" y="14">+0s</text>'
        f'<text class="axis" x="{_LEFT + _WIDTH}" y="14" text-anchor="end">+{format_duration(horizon)}</text>'
    )
    return (
        f'<svg class="live-gantt" xmlns="http://www.w3.org/2000/svg" width="{_LEFT + _WIDTH + 20}" '
        f'height="{height}">{axis}{"".join(rows)}</svg>'
    )


def _when(epoch: float | None, now: float) -> str:
    if epoch is None:
        return "-"
    return f"{iso_time(epoch)} ({epoch - now:+.0f}s)"


_STYLE = """
body{font-family:system-ui,sans-serif;margin:12px;color:#222}
.live-gantt .planned{fill:none;stroke:#888;stroke-width:1.5}
.live-gantt .actual{fill:#2b7bb9;opacity:.8}.live-gantt .actual.failed{fill:#c62828}
.live-gantt .predicted{fill:#f0a020;opacity:.6;stroke:#b06000;stroke-dasharray:4 2}
.live-gantt .now{stroke:#c62828;stroke-width:1}.live-gantt text{font-size:12px}
table{border-collapse:collapse;margin-top:12px}td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px}
.warning{color:#b00020}.legend span{margin-right:14px}
"""


def render_live(report: Mapping[str, Any], refresh_s: int = REFRESH_S) -> str:
    """The live view of one run (``report``: :func:`~airflow_gpu_dag.cli.explain_report.build_report`'s).
    It reloads itself every ``refresh_s`` seconds while the run is live (queued or running)."""
    now = float(report["now"])
    tasks = list(report.get("tasks", []))
    starts = [t.get("start") or t.get("planned_start") for t in tasks]
    origin = min([s for s in starts if s is not None] or [now])
    live = report.get("run_state") in LIVE_STATES
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if live else ""
    pools = "".join(
        f"<li>pool {_esc(name)}: capacity {_esc(p.get('capacity'))}, controller {_esc(p.get('status'))}"
        + (f", latest decision {_esc(p['decision']['code'])}" if p.get("decision") else "")
        + "</li>"
        for name, p in report.get("controller", {}).items()
    )
    warnings = "".join(f'<p class="warning">{_esc(w)}</p>' for w in report.get("warnings", []))
    waiting = [t for t in tasks if t.get("state") not in ("running", "queued") and "start_error_s" not in t]
    rows = "".join(
        "<tr>"
        f"<td>{_esc(t['task'])}</td><td>{_esc(t.get('state'))}</td><td>{_esc(t.get('rank'))}</td>"
        f'<td class="reason" data-code="{_esc((t.get("reason") or {}).get("code"))}">'
        f"{_esc((t.get('reason') or {}).get('text'))}</td>"
        f'<td class="predicted-start">{_esc(_when(t.get("predicted_start"), now))}</td>'
        "</tr>"
        for t in waiting
    )
    table = (
        '<table id="waiting"><tr><th>task</th><th>state</th><th>rank</th><th>why it waits</th>'
        f"<th>predicted start</th></tr>{rows}</table>"
        if waiting
        else '<p id="waiting">No GPU task of this run is waiting.</p>'
    )
    error = report.get("plan_error")
    summary = ""
    if error and error.get("tasks"):
        start, end = error["start_error_s"], error["end_error_s"]
        summary = (
            f'<p id="plan-error">Plan against what happened, over {error["tasks"]} GPU task(s): start error '
            f"median {start['median']:.0f}s, p90 {start['p90']:.0f}s; end error median {end['median']:.0f}s, "
            f"p90 {end['p90']:.0f}s.</p>"
        )
    return (
        '<!doctype html><html><head><meta charset="utf-8">'
        f"{refresh}<title>{_esc(report['dag_id'])} {_esc(report['run_id'])}: live</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h2>{_esc(report['dag_id'])}, run {_esc(report['run_id'])} ({_esc(report.get('run_state'))})</h2>"
        f"<p>As of {_esc(iso_time(now))}"
        + (f"; refreshed every {int(refresh_s)} s" if live else "")
        + ".</p>"
        f'<ul id="pools">{pools}</ul>{warnings}'
        '<p class="legend"><span>outlined: the plan</span><span>blue: what ran</span>'
        "<span>orange, dashed: predicted</span><span>red line: now</span></p>"
        f"{gantt_svg(tasks, origin, now)}{table}{summary}</body></html>"
    )
