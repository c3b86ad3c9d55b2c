"""HTML of the critical-path page, from a plan, predicted schedules and pools (pure: no web objects)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from string import Template

from airflow_gpu_dag.charts.gantt import GanttChart, bars_from_plan, bars_from_schedule, render_svg
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL
from airflow_gpu_dag.core.model.resources import format_duration
from airflow_gpu_dag.core.planning.plan import Plan
from airflow_gpu_dag.plugins.critical_path_page.data import PoolView, ScheduleView
from airflow_gpu_dag.plugins.critical_path_page.layout import graph_svg

__all__ = ["render_page"]

_TEMPLATE = Template((Path(__file__).parent / "templates" / "page.html").read_text(encoding="utf-8"))


def _cell(value: object) -> str:
    return f"<td>{html.escape('-' if value is None else str(value))}</td>"


def _task_cell(task_id: str, note: str) -> str:
    """The task id, with what the plan assumes about it (fallback rung, start window) below it."""
    if not note:
        return _cell(task_id)
    return f'<td>{html.escape(task_id)}<br><small class="note">{html.escape(note)}</small></td>'


def _estimate_of(task_id: str, estimates: Mapping[str, DurationEstimate]) -> DurationEstimate | None:
    """The estimate of a task, or of the mapped task an instance ``t[3]`` belongs to."""
    if task_id in estimates:
        return estimates[task_id]
    base, bracket, _ = task_id.rpartition("[")
    return estimates.get(base) if bracket and task_id.endswith("]") else None


def _duration_cells(
    task_id: str,
    duration: float,
    declared: bool,
    estimates: Mapping[str, DurationEstimate],
    factor: float,
    planned_source: str | None = None,
) -> tuple[str, str, str, bool]:
    """(duration, declared, learned, flagged) cells of one task row. ``planned_source``: where the
    plan's duration comes from (the graph's ``duration_source``; a task declaring 0 keeps its 0 even
    with a learned estimate), else the estimate's source."""
    estimate = _estimate_of(task_id, estimates)
    if estimate is None:
        return format_duration(duration) + ("" if declared else " (default)"), "-", "-", False
    marks = {"learned": " (learned)", "declared": "", "default": " (default)"}
    source = marks.get(planned_source or "", marks[estimate.source])
    learned = "-"
    if estimate.learned is not None:
        high = f", p {format_duration(estimate.high)}" if estimate.high is not None else ""
        learned = f"{format_duration(estimate.learned)} ({estimate.runs} runs{high})"
    elif estimate.runs:
        learned = f"({estimate.runs} runs: too few)"
    declared_text = format_duration(estimate.declared) if estimate.declared is not None else "none"
    flagged = estimate.off_by(factor)
    return format_duration(duration) + source, declared_text, learned, flagged


def _task_rows(
    plan: Plan, estimates: Mapping[str, DurationEstimate], factor: float, sources: Mapping[str, str]
) -> str:
    rows = []
    for t in plan.tasks:
        duration, declared, learned, flagged = _duration_cells(
            t.task_id, t.duration, t.duration_declared, estimates, factor, sources.get(t.task_id)
        )
        classes = " ".join(
            c for c in ("critical" if t.critical else "", "estimate-off" if flagged else "") if c
        )
        off_attr = ' data-estimate-off="true"' if flagged else ""
        rows.append(
            f'<tr class="{classes}" data-task-id="{html.escape(t.task_id)}"{off_attr}>'
            + _task_cell(t.task_id, t.note)
            + "".join(
                _cell(v)
                for v in (
                    "yes" if t.critical else "",
                    duration,
                    declared,
                    learned + (f" \u2014 declared off by >{factor:g}x" if flagged else ""),
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


def _too_large_attr(pool: PoolView) -> str:
    """A waiting task larger than the pool (the controller's finding): the row is marked and says so."""
    if not pool.too_large:
        return ""
    return f' class="too-large" title="too large: {html.escape(pool.too_large)}"'


def _pool_rows(pools: Sequence[PoolView] | None) -> str:
    if pools is None:
        return '<tr><td colspan="10" class="error">You may not read pools.</td></tr>'
    return "".join(
        f'<tr data-pool="{html.escape(p.name)}"{_too_large_attr(p)}>'
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


def _rule(result: object) -> str:
    """The priority rule a simulator result was predicted with (``downstream``, ``packing``, ...)."""
    return str(getattr(result, "priority_rule", "") or "-")


def _gantt(plan: Plan, schedules: ScheduleView) -> tuple[str, str]:
    critical = plan.critical_tasks
    if schedules.results:
        # which priority rule each prediction assumes (as `simulate` says): for a DAG on a stock weight
        # rule, the reservation chart is planned with ``packing``, not with the DAG's weights
        charts = [
            GanttChart(
                f"{label}: makespan {format_duration(result.makespan)}",
                bars_from_schedule(result.schedule, critical),
                subtitle=f"priority rule {_rule(result)}; lower bound {format_duration(result.lower_bound)}",
            )
            for label, result in schedules.results.items()
        ]
        capacity = ", ".join(f"{k}={v}" for k, v in sorted(schedules.capacity.items())) or "unlimited"
        parts = [
            f"{html.escape(label)} (priority rule {html.escape(_rule(r))}) {format_duration(r.makespan)}"
            for label, r in schedules.results.items()
        ]
        summary = (
            f'<p id="gantt-summary">Predicted on the live pools ({html.escape(capacity)}), this DAG alone: '
            + "; ".join(parts)
            + ". Critical tasks in red.</p>"
        )
        summary += "".join(
            f'<p class="unfit-rung">{html.escape(line)}.</p>' for line in schedules.unfit_rungs
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
    estimates: Mapping[str, DurationEstimate] | None = None,
    flag_factor: float = 1.5,
    history_note: str = "",
    sources: Mapping[str, str] | None = None,
    weight_rules: Sequence[str] = (),
) -> str:
    """The whole page. ``static_url``/``pools_url`` are relative to the page's own URL.

    ``estimates``: per task, declared vs learned durations (the Tasks table shows both and flags a
    declared estimate off by more than ``flag_factor``); ``history_note``: why there are none;
    ``sources``: per task, where the plan's duration comes from (``learned``/``declared``/``default``,
    the graph's ``duration_source``, as ``airflow gpu-dag plan`` marks it); ``weight_rules``: the
    DAGs, this one or those sharing its GPU pools, whose weights cannot be compared across DAGs
    (:func:`~airflow_gpu_dag.plugins.critical_path_page.data.weight_rule_notes`).
    """
    esc = html.escape
    summary = (
        f"{len(plan.tasks)} tasks, {len(plan.critical_tasks)} critical; makespan with unlimited GPUs "
        f"<b>{format_duration(plan.makespan)}</b>; total <b>{plan.total_gpu_hours:.2f}</b> GPU-hours. "
        f"Critical path: {esc(' → '.join(plan.critical_path))}"
    )
    estimates = estimates or {}
    learned = sum(1 for e in estimates.values() if e.learned is not None)
    off = sorted(e.task_id for e in estimates.values() if e.off_by(flag_factor))
    if learned or history_note:
        summary += (
            f'<br><span id="estimates-summary">Durations: {learned} of {len(estimates)} task(s) learned '
            "from past runs"
            + (f"; declared estimate off by more than {flag_factor:g}x: {esc(', '.join(off))}" if off else "")
            + (f" ({esc(history_note)}; declared estimates used)" if history_note else "")
            + ".</span>"
        )
    findings = ""
    if plan.findings:
        findings = (
            '<div class="findings"><b>Problems reading the DAG:</b><ul>'
            + "".join(f"<li>{esc(str(f))}</li>" for f in plan.findings)
            + "</ul></div>"
        )
    if weight_rules:
        findings += (
            '<div class="findings" id="incomparable-weight-rules"><b>Weight rules that cannot be compared '
            "across DAGs</b> (<code>incomparable-weight-rule</code>; fix: the DAG's "
            "<code>default_args={'weight_rule': CRITICAL_PATH_WEIGHT_RULE}</code>):<ul>"
            + "".join(f"<li>{esc(line)}</li>" for line in weight_rules)
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
        rows=_task_rows(plan, estimates, flag_factor, sources or {}),
    )
