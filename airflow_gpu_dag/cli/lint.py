"""``airflow gpu-dag lint [PATH ...]``: validate DAG files (see ``definition.py`` for the arguments)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from rich.markup import escape

from airflow_gpu_dag.airflow.dag_reader import build_task_graph, rule_uses
from airflow_gpu_dag.airflow.policy import priority_findings, uses_provider
from airflow_gpu_dag.authoring.resource import pool_claim
from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.common import configured_pools, parse_pool_args, quiet, status
from airflow_gpu_dag.cli.loading import DagLoadError, LoadedDags, load_dags
from airflow_gpu_dag.core.analysis.validation import Finding, ValidationPolicy, cycle_finding, validate_graph
from airflow_gpu_dag.core.analysis.weight_rules import incomparable_rules
from airflow_gpu_dag.core.model.findings import ERROR, WARNING
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import format_duration
from airflow_gpu_dag.core.policy.objective import stage_misfit
from airflow_gpu_dag.gpu.inventory import (
    inventory_problem,
    parse_time_inventory_summary,
    parse_time_pool_sizes,
)
from airflow_gpu_dag.operators.gpu_spec import DeclarationErrors, collecting_declaration_errors
from airflow_gpu_dag.settings import config_problems, max_gpus_per_host, stage_length

__all__ = [
    "LINT_COLUMNS",
    "LintReport",
    "claim_findings",
    "config_findings",
    "declaration_findings",
    "exception_text",
    "incomparable_rule_findings",
    "lint",
    "lint_dags",
    "stage_length_findings",
]


#: The columns of ``lint -o plain`` (one row per problem; the header is printed also with none).
LINT_COLUMNS = ("severity", "code", "dag_id", "task_id", "message", "fix")


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

    def rows(self) -> list[dict[str, Any]]:
        """One row per problem (``-o plain``): import errors, then the findings."""
        columns = LINT_COLUMNS
        errors = [
            {
                "severity": "error",
                "code": "import-error",
                "dag_id": "",
                "task_id": "",
                "message": f"{path}: {exception_text(message)}",
                "fix": "make the file import (-o table or -o json shows the whole traceback).",
            }
            for path, message in sorted(self.import_errors.items())
        ]
        return errors + [{c: f.to_dict().get(c) for c in columns} for f in self.findings]

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


def exception_text(message: str) -> str:
    """The exception of an import error's traceback on one line: its type and whole message (a message
    of several lines joined), without the frames; a message without a traceback as it is, on one line."""
    lines = message.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if starts:
        rest = lines[starts[-1] + 1 :]
        frames = 0
        while frames < len(rest) and (not rest[frames] or rest[frames][0].isspace()):
            frames += 1
        lines = rest[frames:] or lines[-1:]
    return " ".join(line.strip() for line in lines if line.strip())


def declaration_findings(
    declared: DeclarationErrors, import_errors: dict[str, str]
) -> tuple[list[Finding], dict[str, str]]:
    """The GPU declaration errors collected while the DAG files were imported, as findings, and the
    import errors left: a file stopped by a declaration error (one that cannot be collected, such as a
    GPU keyword mapped over) is reported as that error's findings, not as an import error."""
    findings = list(declared.findings)
    left = dict(import_errors)
    for file, error in declared.raised.items():
        first = str(error).splitlines()[0] if str(error) else ""
        for path, text in import_errors.items():
            same = os.path.realpath(path) == os.path.realpath(file) or file.endswith(os.sep + path)
            if same and error.findings and first in text:
                findings.extend(error.findings)
                left.pop(path, None)
    unique = list(dict.fromkeys(findings))
    return unique, left


def config_findings() -> list[Finding]:
    """Every ``[gpu_dag]`` option set to a value the provider cannot use, as ``bad-config`` errors (no
    DAG: the configuration is the deployment's). The cluster policy only logs them, once, so that GPU
    DAGs still import with the defaults; lint and the watermark controller refuse to run with them."""
    problems = config_problems()
    if inventory := inventory_problem():
        problems.append(inventory)
    return [
        Finding(
            ERROR,
            "bad-config",
            "",
            None,
            f"[gpu_dag] {option} {problem}; where it is read its default applies (GPU DAGs still import).",
            f"fix or unset [gpu_dag] {option} (env AIRFLOW__GPU_DAG__{option.upper()}); "
            "docs/configuration.md gives its format.",
        )
        for option, problem in problems
    ]


def claim_findings(dags: dict[str, Any], pools: dict[str, int]) -> list[Finding]:
    """What ``exclusive()`` / ``share()`` said about pool sizes across DAGs: claims of one pool with
    different sizes (an error naming every DAG: at most one is the pool's size, and an ``exclusive()``
    with less than the pool lets its tasks run together), and claims of a pool whose size lint does not
    know (a warning: each DAG's import checks its claim against the sizes it knows)."""
    claims: dict[str, dict[int, set[tuple[str, str]]]] = {}
    for dag_id, dag in sorted(dags.items()):
        for task in dag.task_dict.values():
            if claim := pool_claim(task):
                claims.setdefault(claim.pool, {}).setdefault(claim.pool_size, set()).add(
                    (dag_id, claim.helper)
                )
    known = {**(parse_time_pool_sizes() or {}), **pools}
    findings = []
    for pool, by_size in sorted(claims.items()):
        first = min(dag_id for found in by_size.values() for dag_id, _ in found)
        said = "; ".join(
            f"{', '.join(f'DAG {d!r} ({h})' for d, h in sorted(found))} pool_size={size}"
            for size, found in sorted(by_size.items())
        )
        if len(by_size) > 1:
            findings.append(
                Finding(
                    ERROR,
                    "pool-size-conflict",
                    first,
                    None,
                    f"pool {pool!r} is claimed with different sizes: {said}. One pool has one size, so at "
                    "most one is right; an exclusive() with less than the pool lets its tasks run together.",
                    f"give every exclusive()/share() on {pool!r} the pool's size (airflow pools get {pool}), "
                    f"and set it in [gpu_dag] pools so each DAG's import checks it.",
                )
            )
        elif pool not in known:
            findings.append(
                Finding(
                    WARNING,
                    "pool-size-unchecked",
                    first,
                    None,
                    f"pool {pool!r} is claimed by {said}, a size lint cannot check: neither [gpu_dag] pools, "
                    "--pool nor the static inventory gives the pool's size.",
                    f"pass --pool {pool}=<slots> (or set [gpu_dag] pools): lint and DAG imports check it.",
                )
            )
    return findings


def incomparable_rule_findings(dags: dict[str, Any]) -> list[Finding]:
    """Every DAG (using the provider or not) whose tasks share a GPU pool with DAGs on a cross-DAG weight
    rule while they use another rule (:func:`~airflow_gpu_dag.core.analysis.weight_rules.incomparable_rules`),
    as an ``incomparable-weight-rule`` warning naming the DAG, the pools and the DAGs it shares them with."""
    uses = [use for dag in dags.values() for use in rule_uses(dag)]
    return [
        Finding(
            WARNING,
            "incomparable-weight-rule",
            found.dag_id,
            None,
            found.describe(),
            "set default_args={'weight_rule': CRITICAL_PATH_WEIGHT_RULE} (or PACKING_WEIGHT_RULE, from "
            f"airflow_gpu_dag) on DAG {found.dag_id!r}, or give it GPU pools of its own.",
        )
        for found in incomparable_rules(uses)
    ]


def stage_length_findings(graphs: Mapping[str, TaskGraph], length: float | None = None) -> list[Finding]:
    """A ``stage-length-mismatch`` warning when the longest declared GPU task of ``graphs`` (the GPU
    DAGs linted) is under a sixth of ``[gpu_dag] stage_length`` (``length``: that setting) or over
    three stages (:func:`~airflow_gpu_dag.core.policy.objective.stage_length_mismatch`), naming the DAG
    and the task; none without a declared GPU task. The linted DAGs may be a part of the pool: the
    message says what was measured on."""
    length = stage_length() if length is None else length
    misfit = stage_misfit(graphs, length)
    if misfit is None:
        return []
    fitted = format_duration(misfit.advised)
    return [
        Finding(
            WARNING,
            "stage-length-mismatch",
            misfit.dag_id,
            misfit.task_id,
            f"[gpu_dag] stage_length is {format_duration(length)} and the longest GPU task of the linted "
            f"DAGs takes {format_duration(misfit.duration)}, {misfit.problem}.",
            f"set [gpu_dag] stage_length to how long one training stage of your pool runs (about "
            f"{fitted} if this task is one), after checking the order with airflow "
            f"gpu-dag simulate --stage-length {fitted} on your DAGs; docs/priority.md, "
            "'The stage length'.",
        )
    ]


def lint_dags(
    loaded: LoadedDags, policy: ValidationPolicy, declared: DeclarationErrors | None = None
) -> LintReport:
    """Validate every loaded DAG. GPU DAGs (using this provider's hints or weight rule) get every
    check; other DAGs only the cycle check. The configuration (:func:`config_findings`) and the pool
    sizes claimed across DAGs (:func:`claim_findings`) are checked once. ``declared``: the GPU
    declaration errors collected while the files were imported (:func:`declaration_findings`)."""
    found, import_errors = declaration_findings(declared or DeclarationErrors(), dict(loaded.import_errors))
    report = LintReport(
        paths=loaded.paths,
        files=loaded.files,
        dags=sorted(loaded.dags),
        import_errors=import_errors,
        findings=found,
    )
    # a problem found when the task was declared is not reported again by the graph's checks, nor the
    # pool of an unknown GPU type (gpu_<type>): the type is the mistake
    seen = {(f.code, f.dag_id, f.task_id) for f in found}
    seen |= {("unknown-pool", d, t) for code, d, t in seen if code == "unknown-gpu-type"}
    gpu_graphs: dict[str, TaskGraph] = {}
    for dag_id in sorted(loaded.dags):
        dag = loaded.dags[dag_id]
        graph, extra = build_task_graph(dag)
        if uses_provider(dag):
            gpu_graphs[dag_id] = graph
            findings = validate_graph(graph, policy, extra=[*extra, *priority_findings(dag)]).findings
            # a malformed estimate is already an error; do not also call it "missing"
            bad = {f.task_id for f in [*findings, *found] if f.code == "bad-estimate" and f.dag_id == dag_id}
            report.findings.extend(
                f
                for f in findings
                if not (f.code == "missing-estimate" and f.task_id in bad)
                and (f.code, f.dag_id, f.task_id) not in seen
            )
            continue
        report.skipped.append(dag_id)
        cycle = graph.find_cycle()
        if cycle:
            report.findings.append(cycle_finding(dag_id, cycle))
    # a DAG on a stock rule named with the DAGs it shares GPU pools with: more than its own warning says
    shared = incomparable_rule_findings(loaded.dags)
    named = {f.dag_id for f in shared}
    report.findings[:] = [
        f for f in report.findings if not (f.code == "incomparable-priority" and f.dag_id in named)
    ]
    report.findings.extend(shared)
    report.findings.extend(claim_findings(loaded.dags, dict(policy.pool_slots or {})))
    report.findings.extend(stage_length_findings(gpu_graphs))
    report.findings[:0] = config_findings()
    return report


def _policy(args: argparse.Namespace, pools: dict[str, int]) -> ValidationPolicy:
    return ValidationPolicy(
        pool_slots=pools or None,
        max_gpus_per_host=args.max_gpus_per_host
        if args.max_gpus_per_host is not None
        else max_gpus_per_host(),
        check_granularity=not args.no_granularity,
        inventory=parse_time_inventory_summary(),
        cpu_estimates=bool(args.strict),
    )


def _print_report(
    report: LintReport, pools: dict[str, int], failed: bool, policy: ValidationPolicy | None = None
) -> None:
    out = display.console()
    for path, message in sorted(report.import_errors.items()):
        out.print(f"[bold red]IMPORT ERROR[/] {escape(str(path))}", markup=True)
        out.print(message.rstrip(), markup=False)
    if report.findings:
        out.print(display.findings_table(report.findings))
    if report.skipped:
        out.print(f"Not GPU DAGs (only the cycle check ran): {', '.join(report.skipped)}", markup=False)
    pools_text = display.pools_text(pools, "not checked")
    inventory = policy.inventory if policy is not None else None
    if inventory is not None:
        pools_text += f"; GPUs checked against the {inventory.source} inventory ({inventory.description})"
    verdict = "[bold red]FAILED[/]" if failed else "[bold green]OK[/]"
    out.print(
        f"{verdict}: {len(report.dags)} DAG(s) in {report.files} file(s); {report.errors} error(s), "
        f"{report.warnings} warning(s). Pools: {escape(pools_text)}.",
        markup=True,
    )


def _refuse_empty(loaded: LoadedDags) -> None:
    """A path that holds no DAG file is a mistake (a typo, the wrong folder), not a clean lint.

    :raises DagLoadError: naming the path(s) (:func:`~airflow_gpu_dag.cli.common.quiet`: exit code 1).
    """
    if not loaded.empty:
        return
    names = ", ".join(repr(path) for path in loaded.empty)
    holds = f"path {names} holds" if len(loaded.empty) == 1 else f"paths {names} hold"
    raise DagLoadError(
        f"{holds} no DAG file (a .py file defining a DAG, not excluded by .airflowignore); "
        "give a DAG file or a folder of DAG files."
    )


@contextlib.contextmanager
def _limits_while_importing(args: argparse.Namespace, pools: dict[str, int]) -> Iterator[None]:
    """``--pool`` / ``--max-gpus-per-host`` also for the checks that run while the DAG files are imported
    (the GPU operators and ``@task.gpu`` check their request against ``[gpu_dag]`` when declared): set
    as ``AIRFLOW__GPU_DAG__*`` for the import, the environment restored after."""
    wanted = {}
    if args.pools:
        wanted["AIRFLOW__GPU_DAG__POOLS"] = json.dumps(pools)
    if args.max_gpus_per_host is not None:
        wanted["AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST"] = str(args.max_gpus_per_host)
    with mock.patch.dict(os.environ, wanted):
        yield


@quiet
def lint(args: argparse.Namespace) -> None:
    """``airflow gpu-dag lint [PATH ...]``."""
    pools = configured_pools()
    pools.update(parse_pool_args(args.pools))
    policy = _policy(args, pools)
    output = getattr(args, "output", "table") or "table"
    with status(display.error_console(), "Parsing DAG files...", output != "table"):
        with _limits_while_importing(args, pools), collecting_declaration_errors() as declared:
            loaded = load_dags(args.paths)
        _refuse_empty(loaded)
        report = lint_dags(loaded, policy, declared)
    failed = report.errors > 0 or (args.strict and report.warnings > 0)
    display.emit(
        output,
        {**report.to_dict(), "ok": not failed},
        rows=report.rows,
        columns=LINT_COLUMNS,
        table=lambda: _print_report(report, pools, failed, policy),
    )
    if failed:
        raise SystemExit(1)
