"""The ``airflow gpu-dag`` commands: ``lint``, ``plan``, ``simulate`` (``watermark`` lives in
``watermark_command``). Each takes the parsed ``argparse`` namespace; see ``definition.py``."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow_gpu_dag.cli import render
from airflow_gpu_dag.cli.loading import DagLoadError, LoadedDags, find_dag, load_dags
from airflow_gpu_dag.core.graph import CycleError
from airflow_gpu_dag.core.validation import ERROR, Finding, ValidationPolicy, validate_graph

__all__ = [
    "LintReport",
    "lint",
    "lint_dags",
    "parse_pool_args",
    "plan",
    "simulate",
    "watermark_unavailable",
]

F = TypeVar("F", bound=Callable[..., Any])


def _quiet(func: F) -> F:
    """Silence Airflow's parse logs and warnings unless ``--verbose``; turn load errors into a
    one-line message and exit code 1."""

    def run(args: argparse.Namespace) -> Any:
        try:
            return func(args)
        except (DagLoadError, CycleError, ValueError) as err:
            raise SystemExit(f"error: {err}") from None

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> Any:
        if getattr(args, "verbose", False):
            return run(args)
        try:
            from airflow.utils.cli import suppress_logs_and_warning
        except ImportError:  # pragma: no cover
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                logging.disable(logging.CRITICAL)
                try:
                    return run(args)
                finally:
                    logging.disable(logging.NOTSET)
        return suppress_logs_and_warning(run)(args)

    return wrapper  # type: ignore[return-value]


# -- argument parsing ------------------------------------------------------------------------------
def parse_pool_args(values: Sequence[str] | None, option: str = "--pool") -> dict[str, int]:
    """``["gpu_a100=4", "gpu_default=8"]`` -> ``{"gpu_a100": 4, "gpu_default": 8}``.

    :raises ValueError: a value is not ``NAME=SLOTS`` with SLOTS a whole number >= 0.
    """
    pools: dict[str, int] = {}
    for value in values or ():
        name, sep, slots = value.partition("=")
        name = name.strip()
        try:
            number = int(slots.strip())
        except ValueError:
            number = -1
        if not sep or not name or number < 0:
            raise ValueError(
                f"{option} {value!r}: expected NAME=SLOTS with SLOTS a whole number >= 0, "
                f"e.g. {option} gpu_a100=8"
            )
        pools[name] = number
    return pools


def _configured_pools() -> dict[str, int]:
    from airflow_gpu_dag.settings import pool_capacities

    return dict(pool_capacities() or {})


# -- lint --------------------------------------------------------------------------------------------
@dataclass
class LintReport:
    """What ``lint`` found in some DAG files."""

    paths: list[str]
    files: int
    dags: list[str]
    skipped: list[str] = field(default_factory=list)
    import_errors: dict[str, str] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return len(self.import_errors) + sum(1 for f in self.findings if f.is_error)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if not f.is_error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "paths": self.paths,
            "files": self.files,
            "dags": self.dags,
            "not_gpu_dags": self.skipped,
            "import_errors": [{"file": k, "message": v} for k, v in sorted(self.import_errors.items())],
            "findings": [f.to_dict() for f in self.findings],
            "errors": self.errors,
            "warnings": self.warnings,
        }


def lint_dags(loaded: LoadedDags, policy: ValidationPolicy) -> LintReport:
    """Validate every loaded DAG. GPU DAGs (using this provider's hints or weight rule) get every
    check; other DAGs only the cycle check."""
    from airflow_gpu_dag.airflow.graph import build_task_graph
    from airflow_gpu_dag.airflow.policy import uses_provider

    report = LintReport(
        paths=loaded.paths,
        files=loaded.files,
        dags=sorted(loaded.dags),
        import_errors=dict(loaded.import_errors),
    )
    for dag_id in sorted(loaded.dags):
        dag = loaded.dags[dag_id]
        graph, extra = build_task_graph(dag)
        if uses_provider(dag):
            findings = validate_graph(graph, policy, extra=extra).findings
            # a malformed estimate is already an error; do not also call it "missing"
            bad = {f.task_id for f in findings if f.code == "bad-estimate"}
            report.findings.extend(
                f for f in findings if not (f.code == "missing-estimate" and f.task_id in bad)
            )
            continue
        report.skipped.append(dag_id)
        cycle = graph.find_cycle()
        if cycle:
            report.findings.append(
                Finding(
                    ERROR,
                    "cycle",
                    dag_id,
                    cycle[0],
                    f"dependency cycle {' -> '.join(cycle)}.",
                    "remove one edge of the cycle; a pipeline must be acyclic.",
                )
            )
    return report


@_quiet
def lint(args: argparse.Namespace) -> None:
    """``airflow gpu-dag lint [PATH ...]``."""
    from airflow_gpu_dag.settings import max_gpus_per_host

    pools = _configured_pools()
    pools.update(parse_pool_args(args.pools))
    policy = ValidationPolicy(
        pool_slots=pools or None,
        max_gpus_per_host=args.max_gpus_per_host
        if args.max_gpus_per_host is not None
        else max_gpus_per_host(),
        check_granularity=not args.no_granularity,
    )
    err = render.error_console()
    json_output = args.output == "json"
    with err.status("Parsing DAG files...", spinner="dots") if not json_output else contextlib.nullcontext():
        loaded = load_dags(args.paths)
        report = lint_dags(loaded, policy)
    failed = report.errors > 0 or (args.strict and report.warnings > 0)
    if json_output:
        render.print_json({**report.to_dict(), "ok": not failed})
    else:
        out = render.console()
        for path, message in sorted(report.import_errors.items()):
            out.print(f"[bold red]IMPORT ERROR[/] {path}", markup=True)
            out.print(message.rstrip(), markup=False)
        if report.findings:
            out.print(render.findings_table(report.findings))
        if report.skipped:
            out.print(f"Not GPU DAGs (only the cycle check ran): {', '.join(report.skipped)}", markup=False)
        pools_text = ", ".join(f"{k}={v}" for k, v in sorted(pools.items())) or "not checked"
        verdict = "[bold red]FAILED[/]" if failed else "[bold green]OK[/]"
        out.print(
            f"{verdict}: {len(report.dags)} DAG(s) in {report.files} file(s); {report.errors} error(s), "
            f"{report.warnings} warning(s). Pools: {pools_text}.",
            markup=True,
        )
    if failed:
        raise SystemExit(1)


# -- plan --------------------------------------------------------------------------------------------
@_quiet
def plan(args: argparse.Namespace) -> None:
    """``airflow gpu-dag plan DAG_ID [--file PATH]``."""
    from airflow_gpu_dag.airflow.graph import plan_dag

    json_output = args.output == "json"
    err = render.error_console()
    with (
        err.status(f"Loading DAG {args.dag_id!r}...", spinner="dots")
        if not json_output
        else (contextlib.nullcontext())
    ):
        dag = find_dag(args.dag_id, args.file)
        the_plan = plan_dag(dag)
    if json_output:
        render.print_json(the_plan.to_dict())
        return
    out = render.console()
    render.plan_table(the_plan, critical_only=args.critical_only).print()
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
    if any(not t.duration_declared for t in the_plan.tasks):
        out.print("* no duration estimate declared; the [gpu_dag] default_duration is assumed.", markup=False)
    if the_plan.findings:
        out.print(render.findings_table(the_plan.findings, title="Problems reading the DAG"))


# -- simulate ------------------------------------------------------------------------------------------
def _simulation_capacity(graph: Any, given: Mapping[str, int]) -> dict[str, int]:
    """Check ``given`` against the pools the DAG uses: every GPU pool needs a capacity, and every
    pool named must be used by the DAG.

    :raises ValueError: naming the pool, the task and the fix.
    """
    from airflow_gpu_dag.core.pools import task_pool

    used: dict[str, str] = {}
    gpu_pools: dict[str, str] = {}
    for node in graph.nodes.values():
        pool = task_pool(node)
        used.setdefault(pool, node.task_id)
        if node.gpu is not None:
            gpu_pools.setdefault(pool, node.task_id)
    unknown = sorted(set(given) - set(used))
    if unknown:
        raise ValueError(
            f"pool(s) {', '.join(unknown)} not used by DAG {graph.dag_id!r} "
            f"(its pools: {', '.join(sorted(used)) or 'none'}); check the --capacity names."
        )
    missing = sorted(set(gpu_pools) - set(given))
    if missing:
        hints = " ".join(f"--capacity {p}=<GPUs>" for p in missing)
        raise ValueError(
            f"GPU pool(s) {', '.join(missing)} of DAG {graph.dag_id!r} have no capacity (task "
            f"{gpu_pools[missing[0]]!r} uses {missing[0]!r}); add {hints} or set [gpu_dag] pools."
        )
    return dict(given)


@_quiet
def simulate(args: argparse.Namespace) -> None:
    """``airflow gpu-dag simulate DAG_ID --capacity POOL=N ... [--gantt out.html]``."""
    from airflow_gpu_dag.airflow.graph import build_task_graph
    from airflow_gpu_dag.core.critical_path import analyze
    from airflow_gpu_dag.core.planner import predict as run_simulation
    from airflow_gpu_dag.core.pools import task_pool
    from airflow_gpu_dag.rendering.gantt import GanttChart, bars_from_schedule, write_gantt

    json_output = args.output == "json"
    err = render.error_console()
    given = parse_pool_args(args.capacity, option="--capacity")
    with (
        err.status(f"Loading DAG {args.dag_id!r}...", spinner="dots")
        if not json_output
        else (contextlib.nullcontext())
    ):
        dag = find_dag(args.dag_id, args.file)
        graph, findings = build_task_graph(dag)
    bad = [f for f in findings if f.is_error]
    if bad:
        raise SystemExit("error: cannot simulate:\n" + "\n".join(str(f) for f in bad))
    if not given:
        configured = _configured_pools()
        used = {task_pool(node) for node in graph.nodes.values()}
        given = {k: v for k, v in configured.items() if k in used}
    capacity = _simulation_capacity(graph, given)
    critical = analyze(graph).critical_tasks
    results: dict[str, Any] = {}
    with err.status("Simulating...", spinner="dots") if not json_output else contextlib.nullcontext():
        results["stock"] = run_simulation(graph, capacity, policy="stock")
        results[args.policy] = run_simulation(
            graph, capacity, policy=args.policy, controller_interval=args.controller_interval
        )
    stock, ours = results["stock"], results[args.policy]
    gantt_path = None
    if args.gantt:
        charts = [
            GanttChart(
                f"{label}: makespan {render.hours(r.makespan)}",
                bars_from_schedule(r.schedule, critical),
                subtitle=f"priority rule {getattr(r, 'priority_rule', '') or '-'}; "
                f"lower bound {render.hours(r.lower_bound)}",
            )
            for label, r in results.items()
        ]
        summary = [["Admission", "Makespan", "Lower bound", "vs bound"]] + [
            [label, render.hours(r.makespan), render.hours(r.lower_bound), f"{r.ratio:.2f}x"]
            for label, r in results.items()
        ]
        capacity_text = ", ".join(f"{k}={v}" for k, v in sorted(capacity.items()))
        gantt_path = write_gantt(
            args.gantt, charts, f"DAG {graph.dag_id}: predicted schedules ({capacity_text})", summary
        )
    if json_output:
        render.print_json(
            {
                "dag_id": graph.dag_id,
                "capacity": capacity,
                "critical_tasks": critical,
                "gantt": str(gantt_path) if gantt_path else None,
                "results": {
                    label: {
                        "policy": r.policy,
                        "priority_rule": getattr(r, "priority_rule", ""),
                        "makespan": r.makespan,
                        "lower_bound": r.lower_bound,
                        "schedule": [
                            {
                                "task_id": t.task_id,
                                "start": t.start,
                                "end": t.end,
                                "slots": t.slots,
                                "pool": t.pool,
                                "priority": t.priority,
                            }
                            for t in r.schedule
                        ],
                    }
                    for label, r in results.items()
                },
            }
        )
        return
    out = render.console()
    render.simulation_table(results, critical).print()
    out.print(render.simulation_summary_table(results))
    capacity_text = ", ".join(f"{k}={v}" for k, v in sorted(capacity.items())) or "unlimited"
    saved = stock.makespan - ours.makespan
    if saved > 0:
        verdict = "saves " + render.hours(saved)
    elif saved == 0:
        verdict = "no gain"
    else:
        verdict = "slower by " + render.hours(-saved)
    out.print(
        f"Capacity: {capacity_text}. {args.policy} finishes in {render.hours(ours.makespan)} vs "
        f"{render.hours(stock.makespan)} with stock admission ({verdict}).",
        markup=False,
    )
    if gantt_path:
        out.print(f"Gantt chart written to {gantt_path}", markup=False)


# -- watermark (fallback) -----------------------------------------------------------------------------------
def watermark_unavailable(args: argparse.Namespace) -> None:
    """Stand-in for ``airflow gpu-dag watermark`` when its module is not installed."""
    raise SystemExit(
        "error: the watermark controller is not available in this installation "
        "(module airflow_gpu_dag.cli.watermark_command is missing); reinstall airflow-gpu-dag."
    )
