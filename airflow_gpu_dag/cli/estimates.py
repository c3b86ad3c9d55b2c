"""``airflow gpu-dag estimates DAG_ID``: declared vs learned durations per task, off ones flagged."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from airflow_gpu_dag.airflow.history import learned_task_graph
from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.common import quiet, status
from airflow_gpu_dag.cli.inputs import history_note
from airflow_gpu_dag.cli.loading import find_dag
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, EstimateSettings
from airflow_gpu_dag.settings import estimate_settings

__all__ = ["ESTIMATE_COLUMNS", "estimates", "estimates_report", "estimates_table"]

#: The keys of a task in :func:`estimates_report` (``DurationEstimate.to_dict`` and ``flagged``): the
#: header of ``estimates -o plain``, printed also for a DAG with no task.
ESTIMATE_COLUMNS = (
    "task_id",
    "declared",
    "fallback",
    "learned",
    "high",
    "duration",
    "source",
    "runs",
    "dropped",
    "ratio",
    "note",
    "flagged",
)


def _hours(value: float | None) -> str:
    return "-" if value is None else display.hours(value)


def estimates_report(
    dag_id: str,
    estimates: Mapping[str, DurationEstimate],
    settings: EstimateSettings,
    factor: float,
    note: str = "",
) -> dict[str, Any]:
    """The JSON form: settings, per task the estimate and whether it is flagged."""
    tasks = [{**e.to_dict(), "flagged": e.off_by(factor)} for e in estimates.values()]
    return {
        "dag_id": dag_id,
        "settings": {
            "enabled": settings.enabled,
            "window": settings.window,
            "quantile": settings.quantile,
            "min_runs": settings.min_runs,
            "flag_factor": factor,
        },
        "note": note,
        "flagged": [t["task_id"] for t in tasks if t["flagged"]],
        "tasks": tasks,
    }


def estimates_table(
    dag_id: str, estimates: Mapping[str, DurationEstimate], settings: EstimateSettings, factor: float
) -> display.PlainTable:
    """One row per task: declared, learned, the high quantile, tries used/dropped, ratio, flag."""
    table = display.PlainTable(
        f"Durations of DAG {dag_id!r}: declared vs learned from the last {settings.window} successful tries",
        [
            ("Task", "left"),
            ("Declared", "right"),
            ("Learned", "right"),
            (f"p{settings.quantile * 100:g}", "right"),  # 0.995: p99.5, not p100 (the maximum)
            ("Runs", "right"),
            ("Dropped", "left"),
            ("Learned/declared", "right"),
            ("Plan uses", "left"),
            ("Flag", "left"),
        ],
    )
    for estimate in estimates.values():
        flagged = estimate.off_by(factor)
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(estimate.dropped.items())) or "-"
        ratio = estimate.ratio
        table.add_row(
            estimate.task_id,
            _hours(estimate.declared) if estimate.declared is not None else "(none)",
            _hours(estimate.learned),
            _hours(estimate.high),
            str(estimate.runs),
            dropped,
            "-" if ratio is None else f"{ratio:.2f}x",
            f"{estimate.source} {display.hours(estimate.duration)}",
            (f"OFF >{factor:g}x" if estimate.declared is not None else "UNDECLARED") if flagged else "",
            highlight=flagged,
        )
    return table


@quiet
def estimates(args: argparse.Namespace) -> None:
    """``airflow gpu-dag estimates DAG_ID [--file PATH] [--factor F] [-o table|json|yaml|plain]``."""
    settings = estimate_settings()
    if args.factor is not None:
        try:  # EstimateSettings checks a flag factor (finite, > 1) for the option as for the setting
            settings = replace(settings, flag_factor=float(args.factor))
        except ValueError:
            raise ValueError(
                f"--factor {args.factor:g}: must be a finite number greater than 1 (e.g. --factor 1.5)"
            ) from None
    factor = settings.flag_factor
    output = getattr(args, "output", "table") or "table"
    reading = f"Reading DAG {args.dag_id!r} and its past runs..."
    with status(display.error_console(), reading, output != "table"):
        dag = find_dag(args.dag_id, args.file)
        learned = learned_task_graph(dag, expand_mapped=False, settings=settings)
    learned.note = history_note(learned.note)
    report = estimates_report(args.dag_id, learned.estimates, settings, factor, learned.note)

    def table() -> None:
        estimates_table(args.dag_id, learned.estimates, settings, factor).print()
        out = display.console()
        if not settings.enabled:
            out.print(
                "Learning is off ([gpu_dag] learned_durations = false): plans use the declared estimates.",
                markup=False,
            )
        elif learned.note:
            out.print(f"Note: {learned.note}; plans use the declared estimates.", markup=False)
        out.print(
            f"{len(report['flagged'])} of {len(learned.estimates)} task(s) flagged: declared estimate off by "
            f"more than {factor:g}x from what the task really took (or none declared). A task needs "
            f"{settings.min_runs} successful tries before its history is used.",
            markup=False,
        )

    display.emit(output, report, rows=report["tasks"], columns=ESTIMATE_COLUMNS, table=table)
