"""``airflow gpu-dag simulate DAG_ID DAG_ID ... [--folder PATH] [--trigger DAG_ID=OFFSET ...]``:
several DAGs on shared pools, each run triggered at its offset, under stock Airflow and under the
cross-DAG policy: every run's completion time (trigger -> last task ends) side by side, their mean and
p95, and the makespan (table or ``-o json``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rich.table import Table

from airflow_gpu_dag.airflow.dag_reader import windows_from
from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.common import check_objective_setting, parse_pool_args, simulation_capacity, status
from airflow_gpu_dag.cli.inputs import history_note_line, input_json, input_notes, planning_graph
from airflow_gpu_dag.cli.loading import find_dag, load_dags
from airflow_gpu_dag.core.model.graph import task_pool
from airflow_gpu_dag.core.model.resources import (
    MAX_ESTIMATE_S,
    EstimateError,
    format_duration,
    parse_duration,
)
from airflow_gpu_dag.core.planning.planner import planned_remaining
from airflow_gpu_dag.core.policy.objective import (
    get_objective,
    stage_length_problem,
    stage_misfit,
)
from airflow_gpu_dag.core.simulation import cross_dag
from airflow_gpu_dag.settings import objective as configured_objective
from airflow_gpu_dag.settings import objective_name
from airflow_gpu_dag.settings import stage_length as configured_stage_length

if TYPE_CHECKING:
    from rich.console import Console

    from airflow_gpu_dag.airflow.history import LearnedGraph
    from airflow_gpu_dag.core.model.graph import TaskGraph
    from airflow_gpu_dag.core.policy.objective import Objective
    from airflow_gpu_dag.core.simulation.simulator import SimulationResult

__all__ = ["RunSpec", "parse_triggers", "simulate_runs", "wants_several_runs"]


@dataclass(frozen=True)
class RunSpec:
    """One DAG run to simulate: its DAG and its trigger offset (seconds from the simulation's start)."""

    dag_id: str
    offset: float


def wants_several_runs(args: argparse.Namespace) -> bool:
    """Several DAG ids, a folder, trigger offsets, an ``--objective`` or a ``--stage-length`` (the
    cross-DAG policy's: one DAG with either is one run of that policy): the multi-run simulation."""
    return len(args.dag_ids or ()) > 1 or bool(
        getattr(args, "folder", None)
        or getattr(args, "triggers", None)
        or getattr(args, "objective", None)
        or getattr(args, "stage_length", None)
    )


def parse_stage_length(value: str | None) -> float | None:
    """``--stage-length`` in seconds (None when not given).

    :raises ValueError: not a duration, not > 0, or a stage an objective refuses (over 30 h: ``fair``'s
        24 stages of lead would exceed 30 days), with the option named.
    """
    if not value:
        return None
    try:
        seconds = parse_duration(value)
    except EstimateError as err:
        raise ValueError(f"--stage-length {value!r}: {err}") from None
    if problem := stage_length_problem(seconds):
        raise ValueError(f"--stage-length {value!r}: {problem}")
    return seconds


def parse_triggers(values: Sequence[str] | None) -> list[RunSpec]:
    """``["eval=15m", "train=0"]`` -> runs; a DAG may be named several times (several runs).

    :raises ValueError: a value is not ``DAG_ID=OFFSET`` with a duration OFFSET from 0 to 366 days
        (:data:`~airflow_gpu_dag.core.model.resources.MAX_ESTIMATE_S`; a larger one is a typo, and past
        year 9999 it is no date to measure start windows from).
    """
    runs = []
    for value in values or ():
        dag_id, sep, offset = value.partition("=")
        try:
            seconds = parse_duration(offset.strip()) if sep and dag_id.strip() else -1.0
        except EstimateError:
            seconds = -1.0
        if not 0 <= seconds <= MAX_ESTIMATE_S:
            raise ValueError(
                f"--trigger {value!r}: expected DAG_ID=OFFSET with OFFSET a duration >= 0 and at most "
                "366 days, e.g. "
                "--trigger nightly_eval=15m (seconds, 30m, 1h30m)"
            )
        runs.append(RunSpec(dag_id.strip(), seconds))
    return runs


def _runs(args: argparse.Namespace) -> tuple[list[RunSpec], dict[str, Any]]:
    """The runs to simulate and the DAG objects by id."""
    triggered = parse_triggers(getattr(args, "triggers", None))
    dags: dict[str, Any] = {}
    folder = getattr(args, "folder", None)
    if folder:
        loaded = load_dags([folder])
        if loaded.import_errors:  # a run left out would change every other run's prediction
            failed = ", ".join(sorted(loaded.import_errors)[:5])
            raise ValueError(
                f"{len(loaded.import_errors)} file(s) in {folder!r} failed to import ({failed}): their DAGs "
                "cannot be simulated with the others; run `airflow gpu-dag lint` on the folder and fix them."
            )
        dags.update(loaded.dags)
        if not dags:
            raise ValueError(f"no DAG in {folder!r}; point --folder at a folder of DAG files.")
    in_folder = sorted(dags)
    ids = list(args.dag_ids or ())
    if looks_like := next((d for d in ids if "=" in d), None):
        raise ValueError(
            f"{looks_like!r} looks like DAG_ID=OFFSET: --trigger takes one each, so repeat it "
            f"(--trigger A=0 --trigger {looks_like})."
        )
    twice = sorted({d for d in ids if ids.count(d) > 1})
    if twice:
        raise ValueError(
            f"DAG id {twice[0]!r} given twice; a DAG id gives one run at 0. For several runs of one DAG, "
            f"use --trigger {twice[0]}=0 --trigger {twice[0]}=<offset>."
        )
    named = list(dict.fromkeys([*ids, *(r.dag_id for r in triggered)]))
    for dag_id in named:
        if dag_id not in dags:
            dags[dag_id] = find_dag(dag_id, args.file or folder)
    with_trigger = {r.dag_id for r in triggered}
    # every DAG of the folder and every DAG id gets one run at 0, unless --trigger gives its runs
    at_zero = dict.fromkeys([*in_folder, *(args.dag_ids or ())])
    runs = triggered + [RunSpec(d, 0.0) for d in at_zero if d not in with_trigger]
    if not runs:  # e.g. only --objective: empty tables and exit 0 before
        raise ValueError("give a DAG id (or several, or --folder PATH, or --trigger DAG_ID=OFFSET)")
    return sorted(runs, key=lambda r: r.offset), dags


def _graphs(runs: Sequence[RunSpec], dags: dict[str, Any], declared_only: bool) -> dict[str, LearnedGraph]:
    """Each DAG's graph as plans see it (:func:`~airflow_gpu_dag.cli.inputs.planning_graph`)."""
    graphs: dict[str, LearnedGraph] = {}
    problems = []
    for dag_id in dict.fromkeys(r.dag_id for r in runs):
        learned = planning_graph(dags[dag_id], declared_only=declared_only)
        problems += [str(f) for f in learned.findings if f.is_error]
        graphs[dag_id] = learned
    if problems:
        raise SystemExit("error: cannot simulate:\n" + "\n".join(problems))
    return graphs


def _capacity(graphs: dict[str, TaskGraph], given: dict[str, int]) -> dict[str, int]:
    """``[gpu_dag] pools`` for the pools the DAGs use, overridden by ``--capacity``; checked."""
    used: set[str] = set()
    gpu_pools: dict[str, str] = {}
    for graph in graphs.values():
        for node in graph.nodes.values():
            used.add(task_pool(node))
            if node.gpu is not None:
                gpu_pools.setdefault(task_pool(node), f"{graph.dag_id}.{node.task_id}")
    return simulation_capacity(gpu_pools, used, given, "the simulated DAGs")


def _predict(
    runs: Sequence[RunSpec],
    graphs: dict[str, TaskGraph],
    capacity: dict[str, int],
    objective: Objective,
    interval: float,
    dags: dict[str, Any],
) -> dict[str, SimulationResult]:
    remaining = {
        dag_id: planned_remaining(graph, capacity)
        for dag_id, graph in graphs.items()
        if graph.priority_rule == "packing" and capacity
    }
    now = datetime.now(UTC)  # each run's start windows from its own trigger, not from now
    ordered = [
        windows_from(dags[r.dag_id], graphs[r.dag_id], now + timedelta(seconds=r.offset)) for r in runs
    ]
    offsets = [r.offset for r in runs]
    return {
        "stock": cross_dag.predict_runs(ordered, offsets, capacity, None),
        objective.name: cross_dag.predict_runs(
            ordered, offsets, capacity, objective, interval, remaining=remaining
        ),
    }


@dataclass(frozen=True)
class _Outcome:
    """What was simulated and what came out: the runs, the pools, the predictions by label (``stock``
    and the objective's name), the objective, and each DAG's graph as simulated."""

    runs: Sequence[RunSpec]
    capacity: dict[str, int]
    results: dict[str, Any]
    objective: Any
    graphs: dict[str, LearnedGraph]


def _json(outcome: _Outcome) -> dict:
    runs, capacity, results, objective = outcome.runs, outcome.capacity, outcome.results, outcome.objective
    return {
        "capacity": capacity,
        "dags": {dag_id: input_json(learned, capacity) for dag_id, learned in outcome.graphs.items()},
        "objective": {
            "name": objective.name,
            "stretch": objective.stretch,
            "gap_s": objective.gap,
            "overdue_s": objective.overdue,
            "chain": objective.chain,
            "descendant_unit_s": objective.descendant_unit,
            "descendant_cap": objective.descendant_cap,
            "reservation_overdue_s": objective.gate_overdue,
            "stage_length_s": objective.stage_length,
            "stage_note": stage_note(objective.stage_length, {d: g.graph for d, g in outcome.graphs.items()}),
        },
        "runs": [
            {
                "dag_id": run.dag_id,
                "trigger_offset_s": run.offset,
                **{f"{label}_completion_s": r.runs[i].completion for label, r in results.items()},
            }
            for i, run in enumerate(runs)
        ],
        "summary": {
            label: {
                "mean_completion_s": r.mean_completion,
                "p95_completion_s": r.completion_quantile(0.95),
                "makespan_s": max((x.end for x in r.runs), default=0.0),
            }
            for label, r in results.items()
        },
    }


#: The header of several runs' ``simulate -o plain``: one row per run, completion times in seconds.
RUNS_COLUMNS = (
    "run",
    "dag_id",
    "trigger_offset_s",
    "stock_completion_s",
    "objective",
    "objective_completion_s",
)


def _rows(outcome: _Outcome) -> list[dict[str, Any]]:
    name = outcome.objective.name
    stock, ours = outcome.results["stock"], outcome.results[name]
    return [
        {
            "run": i + 1,
            "dag_id": run.dag_id,
            "trigger_offset_s": run.offset,
            "stock_completion_s": stock.runs[i].completion,
            "objective": name,
            "objective_completion_s": ours.runs[i].completion,
        }
        for i, run in enumerate(outcome.runs)
    ]


def stage_note(length: float, graphs: Mapping[str, TaskGraph]) -> str | None:
    """A note when stages of ``length`` seconds do not fit the longest GPU task of ``graphs``
    (:func:`~airflow_gpu_dag.core.policy.objective.stage_misfit`, what lint's
    ``stage-length-mismatch`` says): the prediction is then of the objective at another time scale."""
    misfit = stage_misfit(graphs, length)
    if misfit is None:
        return None
    return (
        f"Note: the longest GPU task, {misfit.task_id!r} of {misfit.dag_id!r}, takes "
        f"{format_duration(misfit.duration)}, {misfit.problem}; try --stage-length "
        f"{format_duration(misfit.advised)} (and set [gpu_dag] stage_length to what fits)."
    )


def _print(outcome: _Outcome) -> None:
    runs, capacity, results, objective = outcome.runs, outcome.capacity, outcome.results, outcome.objective

    out = display.console()
    stock, ours = results["stock"], results[objective.name]
    table = Table(title="Predicted completion per run (trigger -> last task ends)", title_justify="left")
    for name in ("Run", "DAG", "Trigger", "Stock", objective.name, "Change"):
        # fold, not the default ellipsis: two DAG ids cut to one prefix ("nightly_…") look the same
        table.add_column(name, justify="left" if name in ("DAG",) else "right", overflow="fold")
    for i, run in enumerate(runs):
        before, after = stock.runs[i].completion, ours.runs[i].completion
        change = f"{(after - before) / before * 100:+.0f}%" if before > 0 else "-"
        table.add_row(
            str(i + 1),
            run.dag_id,
            "+" + format_duration(run.offset),
            display.hours(before),
            display.hours(after),
            change,
        )
    out.print(table)
    summary = Table(title="All runs", title_justify="left")
    for name in ("", "Stock", objective.name, "Ratio"):
        summary.add_column(name, justify="left" if not name else "right")
    for label, pick in (
        ("mean completion", lambda r: r.mean_completion),
        ("p95 completion", lambda r: r.completion_quantile(0.95)),
        ("makespan", lambda r: max((x.end for x in r.runs), default=0.0)),
    ):
        a, b = pick(stock), pick(ours)
        summary.add_row(label, display.hours(a), display.hours(b), f"{b / a:.2f}" if a > 0 else "-")
    out.print(summary)
    capacity_text = display.pools_text(capacity)
    out.print(
        f"Capacity: {capacity_text}. Ours: objective {objective.name} (stretch {objective.stretch:g}, "
        f"reservation gap {format_duration(objective.gap)}, overdue {format_duration(objective.overdue)}"
        + (
            f", {format_duration(objective.descendant_unit)} earlier per descendant task up to "
            f"{objective.descendant_cap}, reservation overdue {format_duration(objective.gate_overdue)}"
            if objective.head_start > 0
            else ""
        )
        + f"; stages of {format_duration(objective.stage_length)}); "
        "stock: Airflow's downstream weights, pools at capacity.",
        markup=False,
    )
    if note := stage_note(objective.stage_length, {d: g.graph for d, g in outcome.graphs.items()}):
        out.print(note, markup=False)
    for dag_id, g in outcome.graphs.items():
        notes = input_notes(
            g.graph, g.estimates, "", verb="simulated", label=f"{dag_id}: ", capacity=capacity
        )
        for line in notes:
            out.print(line, markup=False)
    for note in dict.fromkeys(g.note for g in outcome.graphs.values() if g.note):  # once, not per DAG
        out.print(history_note_line(note), markup=False)


def simulate_runs(args: argparse.Namespace, err: Console) -> None:
    """The multi-run simulation (see the module docstring)."""
    json_output = args.output != "table"  # any output for scripts: no spinner
    if getattr(args, "policy", "reservation") != "reservation":
        raise ValueError(
            f"--policy {args.policy} compares the admission of one DAG; several runs are predicted with the "
            "cross-DAG policy and the reservation controller: choose its objective with --objective"
        )
    stage = parse_stage_length(getattr(args, "stage_length", None))  # replaces [gpu_dag] stage_length
    chosen = getattr(args, "objective", None)
    if chosen and get_objective(chosen).name != objective_name():
        # another objective than the pool's: as shipped, at the pool's stage length (the single times
        # set in [gpu_dag], reservation_gap and the like, were set for the pool's objective)
        stage = configured_stage_length() if stage is None else stage
        objective = get_objective(chosen).for_stage(stage)
    else:  # the pool's own objective, with every time set for it
        check_objective_setting()
        objective = configured_objective(stage)
    given = parse_pool_args(args.capacity, option="--capacity")
    with status(err, "Loading DAGs...", json_output):
        runs, dags = _runs(args)
        learned = _graphs(runs, dags, bool(getattr(args, "declared_only", False)))
    graphs = {dag_id: g.graph for dag_id, g in learned.items()}
    capacity = _capacity(graphs, given)
    with status(err, f"Simulating {len(runs)} runs...", json_output):
        results = _predict(runs, graphs, capacity, objective, args.controller_interval, dags)
    outcome = _Outcome(runs, capacity, results, objective, learned)
    gantt = None
    if getattr(args, "gantt", None):
        pools = display.pools_text(capacity, "")
        title = f"{len(runs)} runs of {len(graphs)} DAG(s): predicted schedules ({pools})"
        gantt = display.write_schedules_gantt(args.gantt, title, results)
    if json_output:
        data = {**_json(outcome), "gantt": str(gantt) if gantt else None}
        display.emit(args.output, data, rows=lambda: _rows(outcome), columns=RUNS_COLUMNS)
        return
    _print(outcome)
    if gantt:
        display.console().print(f"Gantt chart written to {gantt}", markup=False)
