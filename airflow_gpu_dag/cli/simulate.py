"""``airflow gpu-dag simulate DAG_ID --capacity POOL=N ... [--gantt out.html]``: the predicted
schedule and makespan under stock Airflow admission and under ours, side by side. With several DAG ids,
``--folder`` or ``--trigger``, several runs on shared pools (:mod:`.simulate_runs`)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_gpu_dag.charts import gantt
from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.common import parse_pool_args, quiet, simulation_capacity, status
from airflow_gpu_dag.cli.inputs import input_json, input_notes, planning_graph
from airflow_gpu_dag.cli.loading import find_dag
from airflow_gpu_dag.cli.simulate_runs import simulate_runs, wants_several_runs
from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.graph import task_pool
from airflow_gpu_dag.core.planning import planner

if TYPE_CHECKING:
    from rich.console import Console

    from airflow_gpu_dag.airflow.history import LearnedGraph
    from airflow_gpu_dag.core.model.graph import TaskGraph

__all__ = ["SIMULATE_COLUMNS", "simulate"]

#: The header of ``simulate -o plain``: one row per task and policy (``stock``, then ours), times in s.
SIMULATE_COLUMNS = (
    "policy",
    "task_id",
    "critical",
    "start_s",
    "end_s",
    "wait_s",
    "slots",
    "pool",
    "priority",
)


# -- load and capacity -----------------------------------------------------------------------------
def _capacity(graph: TaskGraph, given: Mapping[str, int]) -> dict[str, int]:
    """The capacities to simulate ``graph`` on: ``[gpu_dag] pools`` overridden by ``--capacity``
    (:func:`~airflow_gpu_dag.cli.common.simulation_capacity`); every GPU pool needs one, and every
    pool named must be used by the DAG.

    :raises ValueError: naming the pool, the task and the fix.
    """
    used: set[str] = set()
    gpu_pools: dict[str, str] = {}
    for node in graph.nodes.values():
        pool = task_pool(node)
        used.add(pool)
        if node.gpu is not None:
            gpu_pools.setdefault(pool, node.task_id)
    return simulation_capacity(gpu_pools, used, dict(given), f"DAG {graph.dag_id!r}")


def _load_graph(args: argparse.Namespace, err: Console, json_output: bool) -> LearnedGraph:
    """The DAG's task graph as plans see it (learned durations, mapped tasks expanded:
    :func:`~airflow_gpu_dag.cli.inputs.planning_graph`); exits with the errors found while reading it."""
    with status(err, f"Loading DAG {args.dag_id!r}...", json_output):
        dag = find_dag(args.dag_id, args.file)
        learned = planning_graph(dag, declared_only=bool(getattr(args, "declared_only", False)))
    bad = [f for f in learned.findings if f.is_error]
    if bad:
        raise SystemExit("error: cannot simulate:\n" + "\n".join(str(f) for f in bad))
    return learned


# -- run -------------------------------------------------------------------------------------------
def _run(
    graph: TaskGraph, capacity: dict[str, int], args: argparse.Namespace, err: Console, json_output: bool
) -> dict[str, Any]:
    """Predictions by label: ``stock`` and ``args.policy``."""
    results: dict[str, Any] = {}
    with status(err, "Simulating...", json_output):
        results["stock"] = planner.predict(graph, capacity, policy="stock")
        results[args.policy] = planner.predict(
            graph, capacity, policy=args.policy, controller_interval=args.controller_interval
        )
    return results


# -- render ----------------------------------------------------------------------------------------
def _json_result(
    graph: TaskGraph,
    capacity: dict[str, int],
    critical: list[str],
    gantt_path: Path | None,
    results: dict[str, Any],
) -> dict[str, Any]:
    return {
        "dag_id": graph.dag_id,
        "capacity": capacity,
        "critical_tasks": critical,
        "gantt": str(gantt_path) if gantt_path else None,
        "results": {label: r.to_dict() for label, r in results.items()},
    }


def _rows(results: dict[str, Any], critical: list[str]) -> list[dict[str, Any]]:
    """``-o plain``: every policy's schedule, a row per task, in start order."""
    marked = set(critical)
    return [
        {
            "policy": label,
            "task_id": t.task_id,
            "critical": t.task_id in marked,
            "start_s": t.start,
            "end_s": t.end,
            "wait_s": t.wait,
            "slots": t.slots,
            "pool": t.pool,
            "priority": t.priority,
        }
        for label, result in results.items()
        for t in sorted(result.schedule, key=lambda t: (t.start, t.task_id))
    ]


def _print_tables(
    results: dict[str, Any],
    critical: list[str],
    capacity: dict[str, int],
    policy: str,
    gantt_path: Path | None,
) -> None:
    out = display.console()
    display.simulation_table(results, critical).print()
    out.print(display.simulation_summary_table(results))
    stock, ours = results["stock"], results[policy]
    capacity_text = display.pools_text(capacity)
    saved = stock.makespan - ours.makespan
    if saved > 0:
        verdict = "saves " + display.hours(saved)
    elif saved == 0:
        verdict = "no gain"
    else:
        verdict = "slower by " + display.hours(-saved)
    out.print(
        f"Capacity: {capacity_text}. {policy} finishes in {display.hours(ours.makespan)} vs "
        f"{display.hours(stock.makespan)} with stock admission ({verdict}).",
        markup=False,
    )
    if gantt_path:
        out.print(f"Gantt chart written to {gantt_path}", markup=False)


@quiet
def simulate(args: argparse.Namespace) -> None:
    """``airflow gpu-dag simulate DAG_ID --capacity POOL=N ... [--gantt out.html] [-o FORMAT]``."""
    json_output = args.output != "table"  # any output for scripts: no spinner
    err = display.error_console()
    interval = args.controller_interval
    if not 0 <= interval < math.inf:  # also NaN
        raise ValueError(
            f"--controller-interval {interval:g}: expected finite seconds >= 0 (0: at every event)"
        )
    if args.gantt:  # before the work: an unwritable chart must not cost the simulation's output
        gantt.check_gantt_path(args.gantt)
    if wants_several_runs(args):
        simulate_runs(args, err)
        return
    if not args.dag_ids:
        raise ValueError("give a DAG id (or several, or --folder PATH); e.g. airflow gpu-dag simulate my_dag")
    args.dag_id = args.dag_ids[0]
    given = parse_pool_args(args.capacity, option="--capacity")
    learned = _load_graph(args, err, json_output)
    graph = learned.graph
    capacity = _capacity(graph, given)
    critical = analyze(graph).critical_tasks
    results = _run(graph, capacity, args, err, json_output)
    title = f"DAG {graph.dag_id}: predicted schedules ({display.pools_text(capacity, '')})"
    gantt_path = display.write_schedules_gantt(args.gantt, title, results, critical) if args.gantt else None
    if json_output:
        data = {
            **_json_result(graph, capacity, critical, gantt_path, results),
            **input_json(learned, capacity),
        }
        display.emit(args.output, data, rows=lambda: _rows(results, critical), columns=SIMULATE_COLUMNS)
        return
    _print_tables(results, critical, capacity, args.policy, gantt_path)
    out = display.console()
    for line in input_notes(graph, learned.estimates, learned.note, verb="simulated", capacity=capacity):
        out.print(line, markup=False)
