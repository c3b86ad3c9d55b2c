"""``airflow gpu-dag plan DAG_ID [--file PATH]``: the critical-path plan of one DAG.

Durations are those learned from the DAG's past runs where there are enough of them (the declared
estimates otherwise, or with ``--declared-only``), and mapped tasks are shown as their instances
(``task[0]`` ...) when their number is known.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.common import check_objective_setting, quiet, status
from airflow_gpu_dag.cli.inputs import input_notes, planning_graph
from airflow_gpu_dag.cli.loading import find_dag
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.plan import Plan, build_plan
from airflow_gpu_dag.priority.weights import policy_text

__all__ = ["plan"]

_SOURCE_MARK = {"learned": "~", "declared": "", "default": "*"}


def _plan_table(the_plan: Plan, graph: TaskGraph, critical_only: bool) -> display.PlainTable:
    """The plan table with the Duration column marked by source and a Declared column."""
    table = display.plan_table(the_plan, critical_only=critical_only)
    table.columns.insert(3, ("Declared", "right"))
    by_id = {t.task_id: t for t in the_plan.tasks}
    for cells, _ in table.rows:
        node = graph.nodes[cells[0]]
        source = str(node.attrs.get("duration_source", "declared" if node.duration_declared else "default"))
        cells[2] = display.hours(by_id[cells[0]].duration) + _SOURCE_MARK.get(source, "")
        declared = node.attrs.get("declared_duration", node.duration)
        cells.insert(3, display.hours(float(declared)) if node.duration_declared else "-")  # type: ignore[arg-type]
    return table


def _print_plan(
    the_plan: Plan,
    graph: TaskGraph,
    critical_only: bool,
    estimates: Mapping[str, DurationEstimate],
    note: str,
) -> None:
    out = display.console()
    _plan_table(the_plan, graph, critical_only).print()
    out.print(
        f"Critical path ({display.hours(the_plan.makespan)}): " + " -> ".join(the_plan.critical_path),
        markup=False,
    )
    out.print(
        f"Makespan with unlimited GPUs: {display.hours(the_plan.makespan)}; "
        f"total GPU-hours: {the_plan.total_gpu_hours:.2f}; "
        f"critical tasks: {len(the_plan.critical_tasks)} of {len(the_plan.tasks)}.",
        markup=False,
    )
    notes = [(t.task_id, t.note) for t in the_plan.tasks if t.note]
    if notes:  # fallback rungs (expected durations, the assumed rung) and start windows
        out.print("Assumed by the plan:", markup=False)
        for task_id, task_note in notes:
            out.print(f"  {task_id}: {task_note}", markup=False)
    for line in input_notes(graph, estimates, note):
        out.print(line, markup=False)
    if any(not t.duration_declared for t in the_plan.tasks):
        out.print(
            "* no duration estimate declared; assumed: the DAG's gpu_dag_default_duration, else "
            "[gpu_dag] default_duration (0 for a teardown).",
            markup=False,
        )
    if the_plan.policy:
        out.print(the_plan.policy, markup=False)
    if the_plan.findings:
        out.print(display.findings_table(the_plan.findings, title="Problems reading the DAG"))


def _json(
    the_plan: Plan,
    graph: TaskGraph,
    estimates: Mapping[str, DurationEstimate],
    note: str,
    critical_only: bool = False,
) -> Any:
    data = the_plan.to_dict(graph)
    if critical_only:  # as in the table: only the critical tasks
        data["tasks"] = [task for task in data["tasks"] if task["critical"]]
    data["estimates"] = {task_id: e.to_dict() for task_id, e in estimates.items()}
    data["history_note"] = note
    return data


@quiet
def plan(args: argparse.Namespace) -> None:
    """``airflow gpu-dag plan DAG_ID [--file PATH] [--declared-only]``."""
    check_objective_setting()
    output = getattr(args, "output", "table") or "table"
    declared_only = bool(getattr(args, "declared_only", False))
    with status(display.error_console(), f"Loading DAG {args.dag_id!r}...", output != "table"):
        dag = find_dag(args.dag_id, args.file)
        learned = planning_graph(dag, declared_only=declared_only)
        the_plan = replace(build_plan(learned.graph, learned.findings), policy=policy_text(learned.graph))
    estimates = {} if declared_only else learned.estimates
    display.emit(
        output,
        _json(the_plan, learned.graph, estimates, learned.note, bool(args.critical_only)),
        rows=lambda: display.plan_rows(the_plan, args.critical_only),
        columns=display.PLAN_COLUMNS,
        table=lambda: _print_plan(the_plan, learned.graph, args.critical_only, estimates, learned.note),
    )
