"""``airflow gpu-dag plan DAG_ID [--file PATH]``: the critical-path plan of one DAG."""

from __future__ import annotations

import argparse

from airflow_gpu_dag.cli import render
from airflow_gpu_dag.cli.common import quiet, status
from airflow_gpu_dag.cli.loading import find_dag
from airflow_gpu_dag.core.plan import Plan

__all__ = ["plan"]


def _print_plan(the_plan: Plan, critical_only: bool) -> None:
    out = render.console()
    render.plan_table(the_plan, critical_only=critical_only).print()
    out.print(
        f"Critical path ({render.hours(the_plan.makespan)}): " + " -> ".join(the_plan.critical_path),
        markup=False,
    )
    out.print(
        f"Makespan with unlimited GPUs: {render.hours(the_plan.makespan)}; "
        f"total GPU-hours: {the_plan.total_gpu_hours:.2f}; "
        f"critical tasks: {len(the_plan.critical_tasks)} of {len(the_plan.tasks)}.",
        markup=False,
    )
    notes = [(t.task_id, t.note) for t in the_plan.tasks if t.note]
    if notes:  # fallback rungs (expected durations, the assumed rung) and start windows
        out.print("Assumed by the plan:", markup=False)
        for task_id, note in notes:
            out.print(f"  {task_id}: {note}", markup=False)
    if any(not t.duration_declared for t in the_plan.tasks):
        out.print("* no duration estimate declared; the [gpu_dag] default_duration is assumed.", markup=False)
    if the_plan.policy:
        out.print(the_plan.policy, markup=False)
    if the_plan.findings:
        out.print(render.findings_table(the_plan.findings, title="Problems reading the DAG"))


@quiet
def plan(args: argparse.Namespace) -> None:
    """``airflow gpu-dag plan DAG_ID [--file PATH]``."""
    from dataclasses import replace

    from airflow_gpu_dag.airflow.graph import build_task_graph, plan_dag
    from airflow_gpu_dag.priority.weights import policy_text

    output = getattr(args, "output", "table") or "table"
    with status(render.error_console(), f"Loading DAG {args.dag_id!r}...", output != "table"):
        dag = find_dag(args.dag_id, args.file)
        the_plan = plan_dag(dag)
        the_plan = replace(the_plan, policy=policy_text(build_task_graph(dag)[0]))
    render.emit(
        output,
        the_plan.to_dict(),
        rows=lambda: render.plan_rows(the_plan, args.critical_only),
        table=lambda: _print_plan(the_plan, args.critical_only),
    )
