"""HTML of the critical-path page, from a plan, predicted schedules and pools (pure: no web objects)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from string import Template

from airflow_gpu_dag.core.plan import Plan
from airflow_gpu_dag.core.pools import DEFAULT_POOL
from airflow_gpu_dag.core.resources import format_duration
from airflow_gpu_dag.plugins.critical_path_page.data import PoolView, ScheduleView
from airflow_gpu_dag.plugins.critical_path_page.layout import graph_svg
from airflow_gpu_dag.rendering.gantt import GanttChart, bars_from_plan, bars_from_schedule, render_svg

__all__ = ["render_page"]

_TEMPLATE = Template((Path(__file__).parent / "templates" / "page.html").read_text(encoding="utf-8"))


def _cell(value: object) -> str:
    return f"<td>{html.escape('-' if value is None else str(value))}</td>"


def _task_cell(task_id: str, note: str) -> str:
    """The task id, with what the plan assumes about it (fallback rung, start window) below it."""
    if not note:
        return _cell(task_id)
    return f'<td>{html.escape(task_id)}<br><small class="note">{html.escape(note)}</small></td>'


def _task_rows(plan: Plan) -> str:
    rows = []
    for t in plan.tasks:
        rows.append(
            f'<tr class="{"critical" if t.critical else ""}" data-task-id="{html.escape(t.task_id)}">'
            + _task_cell(t.task_id, t.note)
            + "".join(
                _cell(v)
                for v in (
                    "yes" if t.critical else "",
                    format_duration(t.duration) + ("" if t.duration_declared else " (default)"),
                    format_duration(t.earliest_start),
                    format_duration(t.earliest_finish),
                    format_duration(t.latest_start),
                    format_duration(t.latest_finish),
                    format_duration(t.slack),
                    t.priority,
                    t.gpu,
                    t.pool or DEFAULT_POOL,
                    f"{t.gpu_hours:.2f}",
                )
            )
            + "</tr>"
        )
    return "".join(rows)


def _pool_rows(pools: Sequence[PoolView] | None) -> str:
    if pools is None:
        return '<tr><td colspan="10" class="error">You may not read pools.</td></tr>'
    return "".join(
        f'<tr data-pool="{html.escape(p.name)}">'
        + "".join(
            _cell(v)
            for v in (
                p.name,
                "unlimited" if p.slots < 0 else p.slots,
                p.capacity,
                p.used,
                p.running,
                p.queued,
                "unlimited" if p.open < 0 else p.open,
                p.reserved,
                p.reserved_for,
                p.description,
            )
        )
        + "</tr>"
        for p in pools
    )


def _gantt(plan: Plan, schedules: ScheduleView) -> tuple[str, str]:
    critical = plan.critical_tasks
    if schedules.results:
        charts = [
            GanttChart(
                f"{label}: makespan {format_duration(result.makespan)}",
                bars_from_schedule(result.schedule, critical),
                subtitle=f"lower bound {format_duration(result.lower_bound)}",
            )
            for label, result in schedules.results.items()
        ]
        capacity = ", ".join(f"{k}={v}" for k, v in sorted(schedules.capacity.items())) or "unlimited"
        parts = [
            f"{html.escape(label)} {format_duration(r.makespan)}" for label, r in schedules.results.items()
        ]
        summary = (
            f'<p id="gantt-summary">Predicted on the live pools ({html.escape(capacity)}), this DAG alone: '
            + "; ".join(parts)
            + ". Critical tasks in red.</p>"
        )
    else:
        charts = [GanttChart("unlimited GPUs (earliest starts)", bars_from_plan(plan))]
        summary = f'<p id="gantt-summary">{html.escape(schedules.note or "No pools to simulate on.")} '
        summary += "Showing the earliest-start schedule with unlimited GPUs.</p>"
    if plan.policy:
        summary += f'<p id="policy">{html.escape(plan.policy)}</p>'
    return summary, render_svg(charts)


def render_page(
    plan: Plan,
    schedules: ScheduleView,
    pools: Sequence[PoolView] | None,
    static_url: str,
    pools_url: str,
) -> str:
    """The whole page. ``static_url``/``pools_url`` are relative to the page's own URL."""
    esc = html.escape
    summary = (
        f"{len(plan.tasks)} tasks, {len(plan.critical_tasks)} critical; makespan with unlimited GPUs "
        f"<b>{format_duration(plan.makespan)}</b>; total <b>{plan.total_gpu_hours:.2f}</b> GPU-hours. "
        f"Critical path: {esc(' → '.join(plan.critical_path))}"
    )
    findings = ""
    if plan.findings:
        findings = (
            '<div class="findings"><b>Problems reading the DAG:</b><ul>'
            + "".join(f"<li>{esc(str(f))}</li>" for f in plan.findings)
            + "</ul></div>"
        )
    gantt_summary, gantt = _gantt(plan, schedules)
    return _TEMPLATE.substitute(
        dag_id=esc(plan.dag_id),
        static=esc(static_url),
        pools_url=esc(pools_url),
        summary=summary,
        findings=findings,
        graph=graph_svg(plan),
        gantt_summary=gantt_summary,
        gantt=gantt,
        pools=_pool_rows(pools),
        rows=_task_rows(plan),
    )
