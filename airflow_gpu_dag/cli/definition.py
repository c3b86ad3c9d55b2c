"""``airflow gpu-dag ...``: the provider's CLI commands, registered through
``get_provider_info()["cli"]`` (the same mechanism as ``airflow kubernetes ...`` of the
cncf-kubernetes provider).

This module is imported by every ``airflow`` invocation, so it only declares arguments; the
commands themselves (one module each: :mod:`airflow_gpu_dag.cli.lint`, ``plan``, ``simulate``,
``explain``, ``watermark_command``) are imported when they run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
from collections.abc import Iterable
from typing import Any

from airflow.cli.cli_config import ARG_VERBOSE, ActionCommand, Arg, GroupCommand, lazy_load_command

log = logging.getLogger(__name__)

__all__ = ["GPU_DAG_COMMANDS", "get_gpu_dag_cli_commands", "get_parser"]

_CLI = "airflow_gpu_dag.cli"
_WATERMARK_MODULE = "airflow_gpu_dag.cli.watermark_command"

ARG_LINT_PATHS = Arg(
    ("paths",),
    nargs="*",
    metavar="PATH",
    help="DAG files or folders to lint (default: the configured dags folder).",
)
ARG_DAG_ID = Arg(("dag_id",), help="The DAG id.")
ARG_FILE = Arg(
    ("-f", "--file"),
    dest="file",
    metavar="PATH",
    help="Read the DAG from this file or folder instead of the configured dags folder.",
)
ARG_POOL = Arg(
    ("--pool",),
    dest="pools",
    action="append",
    default=None,
    metavar="NAME=SLOTS",
    help="A pool and its total slots (repeatable); overrides the gpu_dag.pools option for this command.",
)


def _host_gpus(value: str) -> int:
    """``--max-gpus-per-host``: a whole number >= 1 (0 made every GPU request "too large")."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: give the GPUs of the largest host, a whole number >= 1")
    return number


ARG_MAX_GPUS_PER_HOST = Arg(
    ("--max-gpus-per-host",),
    type=_host_gpus,
    default=None,
    metavar="N",
    help="GPUs on the largest host; larger requests are errors "
    "(default: the gpu_dag.max_gpus_per_host option).",
)
ARG_NO_GRANULARITY = Arg(
    ("--no-granularity",),
    action="store_true",
    help="Do not warn about tasks shorter than 10 minutes or longer than 2 hours.",
)
ARG_STRICT = Arg(("--strict",), action="store_true", help="Exit non-zero on warnings as well as errors.")
#: ``-o/--output`` of lint and plan (the same as ``airflow_gpu_dag.cli.display.OUTPUT_FORMATS``).
OUTPUT_FORMATS = ("table", "json", "yaml", "plain")


def output_arg(help: str) -> Arg:
    """``-o/--output``: one of :data:`OUTPUT_FORMATS`, table by default; ``help`` says what it formats."""
    return Arg(
        ("-o", "--output"),
        choices=OUTPUT_FORMATS,
        default="table",
        metavar="(table, json, yaml, plain)",
        help=help,
    )


ARG_OUTPUT = output_arg(
    "Output format: table (default), json, yaml, or plain (tab-separated rows for scripts)."
)
ARG_FACTOR = Arg(
    ("--factor",),
    type=float,
    default=None,
    metavar="F",
    help="Flag a task whose declared estimate is off from the learned one by more than F times, either "
    "way (default: the gpu_dag.learned_flag_factor option, 1.5).",
)
ARG_DECLARED_ONLY = Arg(
    ("--declared-only",),
    action="store_true",
    help="Plan the DAG as declared: declared estimates, map counts from literal expand() arguments or "
    "gpu_hints(map_length=N); past runs are not read.",
)
ARG_CRITICAL_ONLY = Arg(("--critical-only",), action="store_true", help="List only the critical tasks.")
ARG_CAPACITY = Arg(
    ("--capacity",),
    dest="capacity",
    action="append",
    default=None,
    metavar="POOL=SLOTS",
    help="Capacity of a pool for the simulation (repeatable; updates the gpu_dag.pools option).",
)
ARG_POLICY = Arg(
    ("--policy",),
    choices=("reservation", "critical_path"),
    default="reservation",
    help="Our admission policy to compare with stock Airflow (default: reservation).",
)
ARG_INTERVAL = Arg(
    ("--controller-interval",),
    dest="controller_interval",
    type=float,
    default=0.0,
    metavar="SECONDS",
    help="Seconds between watermark controller ticks in the simulation (default: 0, instant).",
)
ARG_DAG_IDS = Arg(
    ("dag_ids",),
    nargs="*",
    metavar="DAG_ID",
    help="The DAG id; several (or --folder, --trigger) simulate their runs together on shared pools.",
)
ARG_FOLDER = Arg(
    ("--folder",),
    metavar="PATH",
    default=None,
    help="Simulate one run of every DAG in this folder, together: at 0, or at the offsets of its --trigger.",
)
ARG_TRIGGER = Arg(
    ("--trigger",),
    dest="triggers",
    action="append",
    default=None,
    metavar="DAG_ID=OFFSET",
    help="Trigger a run of DAG_ID at OFFSET (e.g. 15m) after the first (repeatable; several runs per DAG).",
)
ARG_OBJECTIVE = Arg(
    ("--objective",),
    choices=("fair", "throughput", "balanced", "latency"),
    default=None,
    help="Cross-DAG objective of our policy (default: gpu_dag.objective); given with one DAG id, that "
    "DAG is simulated as one run of the cross-DAG policy.",
)
ARG_STAGE_LENGTH = Arg(
    ("--stage-length",),
    default=None,
    metavar="DURATION",
    help="How long one training stage of the pool runs, e.g. 20m (default: gpu_dag.stage_length): every "
    "time of the objective scales with it; simulate a few to see how the order of the runs moves.",
)
ARG_RUN_ID = Arg(
    ("run_id",),
    nargs="?",
    default=None,
    metavar="RUN_ID",
    help="The DAG run id (default: the DAG's latest run).",
)
ARG_EXPLAIN_TASK = Arg(
    ("--task",),
    dest="task",
    default=None,
    metavar="TASK_ID",
    help="Explain only this task (every map index of it).",
)
ARG_EXPLAIN_OUTPUT = output_arg(
    "Output format: table (default), json, yaml, or plain (a tab-separated row per task)."
)
ARG_CONN_ID = Arg(
    ("--conn-id",),
    dest="conn_id",
    default="gpu_dag_api",
    help="Airflow connection with the REST API URL (host) and login/password (default: gpu_dag_api).",
)
ARG_GANTT = Arg(
    ("--gantt",),
    metavar="FILE",
    default=None,
    help="Write the predicted schedules as a Gantt chart: FILE.html (page) or FILE.svg (image).",
)

GPU_DAG_COMMANDS: tuple[ActionCommand, ...] = (
    ActionCommand(
        name="lint",
        help="Validate DAG files: cycles, hidden dependencies, impossible GPU requests, estimates",
        description=(
            "Load DAG files and check every GPU DAG: import errors, dependency cycles, requests no pool "
            "or host can ever hold, unknown pools, malformed or missing duration estimates, task "
            "granularity and hidden dependencies (two tasks touching the same dataset with no edge). "
            "Exits 1 when an error is found (or a warning, with --strict)."
        ),
        func=lazy_load_command(f"{_CLI}.lint.lint"),
        args=(
            ARG_LINT_PATHS,
            ARG_POOL,
            ARG_MAX_GPUS_PER_HOST,
            ARG_NO_GRANULARITY,
            ARG_STRICT,
            ARG_OUTPUT,
            ARG_VERBOSE,
        ),
    ),
    ActionCommand(
        name="plan",
        help="Print the critical-path plan of a DAG: ES/EF/LS/LF, slack, priority, GPUs, GPU-hours",
        func=lazy_load_command(f"{_CLI}.plan.plan"),
        args=(ARG_DAG_ID, ARG_FILE, ARG_CRITICAL_ONLY, ARG_DECLARED_ONLY, ARG_OUTPUT, ARG_VERBOSE),
    ),
    ActionCommand(
        name="estimates",
        help="Declared vs learned task durations of a DAG; flags estimates that are far off",
        description=(
            "Read the DAG's recent successful task tries from the metadata database and print, per "
            "task, the declared duration estimate, the one learned from history (median, and a high "
            "quantile), the tries used and dropped (failed, zero-length, clock skew, outliers) and "
            "what plans use; tasks whose declared estimate is off by more than --factor are flagged."
        ),
        func=lazy_load_command(f"{_CLI}.estimates.estimates"),
        args=(ARG_DAG_ID, ARG_FILE, ARG_FACTOR, ARG_OUTPUT, ARG_VERBOSE),
    ),
    ActionCommand(
        name="simulate",
        help="Predict the schedule and makespan under stock Airflow and under airflow-gpu-dag",
        description=(
            "Simulate a run of the DAG on pools of the given capacity, once with stock Airflow "
            "admission (priority order, greedy backfill) and once with ours, and print both side by "
            "side; --gantt writes both schedules as a Gantt chart. With several DAG ids, --folder or "
            "--trigger, simulate their runs together on shared pools, each triggered at its offset, and "
            "print every run's completion time, the mean, the p95 and the makespan, stock vs ours. "
            "Durations are those learned from past runs (the declared estimates without enough history, "
            "or with --declared-only) and mapped tasks are simulated as their instances, as in plan."
        ),
        func=lazy_load_command(f"{_CLI}.simulate.simulate"),
        args=(
            ARG_DAG_IDS,
            ARG_FILE,
            ARG_FOLDER,
            ARG_TRIGGER,
            ARG_CAPACITY,
            ARG_POLICY,
            ARG_OBJECTIVE,
            ARG_STAGE_LENGTH,
            ARG_INTERVAL,
            ARG_DECLARED_ONLY,
            ARG_GANTT,
            ARG_OUTPUT,
            ARG_VERBOSE,
        ),
    ),
    ActionCommand(
        name="explain",
        help="Why each GPU task of a run waits, when it will start, and the plan against what happened",
        description=(
            "Read a DAG run's live state over the REST API (the gpu_dag_api connection) and say, for each "
            "GPU task not finished yet, its state, key and rank in its pool's queue, the tasks ahead of it, "
            "the watermark controller's decision that concerns it and its predicted start and end (the "
            "simulator on the live state, with learned durations); for each finished one, its planned "
            "start and end against the actual ones and where the difference came from. Exit codes: 0 "
            "explained, 3 no such DAG/run/task, 4 api-server unreachable or login refused, 5 the DAG does "
            "not use the provider, 6 explained but a GPU pool has no live watermark controller."
        ),
        func=lazy_load_command(f"{_CLI}.explain.explain"),
        args=(ARG_DAG_ID, ARG_RUN_ID, ARG_EXPLAIN_TASK, ARG_EXPLAIN_OUTPUT, ARG_CONN_ID, ARG_VERBOSE),
    ),
)


def _watermark_command() -> ActionCommand:
    """The watermark controller command, from ``airflow_gpu_dag.cli.watermark_command`` when that
    module is installed; otherwise a stub that says so (the other commands keep working)."""
    help_text = "Run the GPU watermark controller: keep GPU pool sizes equal to live capacity"
    try:
        if importlib.util.find_spec(_WATERMARK_MODULE) is not None:
            module = importlib.import_module(_WATERMARK_MODULE)
            command = getattr(module, "WATERMARK_COMMAND", None)
            if isinstance(command, ActionCommand):
                return command
            args: Iterable[Arg] = (
                getattr(module, "WATERMARK_ARGS", None) or getattr(module, "ARGS", None) or (ARG_VERBOSE,)
            )
            return ActionCommand(
                name="watermark",
                help=getattr(module, "WATERMARK_HELP", help_text),
                description=getattr(module, "WATERMARK_DESCRIPTION", None),
                func=lazy_load_command(f"{_WATERMARK_MODULE}.watermark"),
                args=tuple(args),
            )
    except Exception:  # a broken optional module must not break `airflow`
        log.exception(
            "airflow-gpu-dag: cannot load %s; `airflow gpu-dag watermark` is disabled", _WATERMARK_MODULE
        )
    return ActionCommand(
        name="watermark",
        help=help_text + " (not available in this installation)",
        func=lazy_load_command(f"{_CLI}.common.watermark_unavailable"),
        args=(ARG_VERBOSE,),
    )


def _watermark_health_command() -> tuple[ActionCommand, ...]:
    """``watermark-health`` (the controller's exec probe), when the watermark module has it."""
    try:
        module = importlib.import_module(_WATERMARK_MODULE)
        command = getattr(module, "WATERMARK_HEALTH_COMMAND", None)
        return (command,) if isinstance(command, ActionCommand) else ()
    except Exception:  # reported by _watermark_command already
        return ()


def get_gpu_dag_cli_commands() -> list[GroupCommand]:
    """The ``gpu-dag`` command group (``get_provider_info()["cli"]`` points here)."""
    return [
        GroupCommand(
            name="gpu-dag",
            help="Plan, validate and simulate GPU DAGs; run the GPU watermark controller",
            subcommands=(*GPU_DAG_COMMANDS, _watermark_command(), *_watermark_health_command()),
        )
    ]


def get_parser() -> argparse.ArgumentParser:
    """A parser with only the ``gpu-dag`` group (documentation and tests).

    :meta private:
    """
    # start-up: airflow.cli.cli_parser imports this module as it builds Airflow's parser (a cycle at the top)
    from airflow.cli.cli_parser import AirflowHelpFormatter, DefaultHelpParser, _add_command

    parser: Any = DefaultHelpParser(prog="airflow", formatter_class=AirflowHelpFormatter)
    subparsers = parser.add_subparsers(dest="subcommand", metavar="GROUP_OR_COMMAND")
    for group_command in get_gpu_dag_cli_commands():
        _add_command(subparsers, group_command)
    return parser
