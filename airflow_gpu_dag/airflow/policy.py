"""Cluster policy (``airflow.policy`` entry point): validate GPU DAGs when they are parsed.

Only DAGs that use this provider (a task with ``gpu_dag`` hints or one of our weight rules) are
checked. Errors (malformed estimates, impossible GPU requests, unknown pools when
``[gpu_dag] pools`` is set) raise
``AirflowClusterPolicyViolation``, which Airflow shows as the DAG's import error with the task and the
fix; warnings (e.g. GPU tasks on a weight rule whose weights cannot be compared with other DAGs' keys)
are logged. A ``[gpu_dag]`` option the provider cannot use (an unknown objective, ``pools`` that is not
JSON) fails no DAG: its default applies and one error per process names it.
"""

from __future__ import annotations

import difflib
import enum
import logging
from typing import Any

from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.policies import hookimpl
from airflow.task import priority_strategy as airflow_strategies

from airflow_gpu_dag.airflow import parse_time
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.contract import DERIVED_KEY, HINTS_KEY, LEGACY_DERIVED_KEY
from airflow_gpu_dag.contract import read as read_contract
from airflow_gpu_dag.core.analysis.validation import ValidationPolicy, ValidationReport, validate_graph
from airflow_gpu_dag.core.model.findings import ERROR, WARNING, Finding
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.settings import log_config_problems, max_gpus_per_host, pool_capacities

#: The weight rules whose weights are cross-DAG keys (comparable across DAGs).
CROSS_DAG_RULES = ("CriticalPathPriorityStrategy", "PackingPriorityStrategy")
#: Their class paths (``airflow_gpu_dag.CRITICAL_PATH_WEIGHT_RULE`` / ``PACKING_WEIGHT_RULE``; the
#: package's top level is a layer above this module).
CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE = (
    f"airflow_gpu_dag.priority_strategy.{n}" for n in CROSS_DAG_RULES
)

log = logging.getLogger(__name__)


#: Our weight rules by class path, with the names a DAG may mean them by: the class name and the
#: simulator's short name (the constant's name is the short one + ``_WEIGHT_RULE``).
_OUR_RULES = {
    path: (path.rsplit(".", 1)[1], "critical_path" if "Critical" in path else "packing")
    for path in (CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE)
}


def _rule_meant(rule: object) -> str | None:
    """Our class path when ``rule`` is a string naming one of our rules without it (its class name, the
    simulator's ``critical_path`` / ``packing``, the constant's name), in any case; else None."""
    if not isinstance(rule, str) or isinstance(rule, enum.Enum):
        return None
    name = rule.rsplit(".", 1)[-1].strip().replace("_", "").lower()
    for path, (class_name, short) in _OUR_RULES.items():
        short = short.replace("_", "")
        if name in (class_name.lower(), short, f"{short}weightrule"):
            return path
    return None


def uses_provider(dag: Any) -> bool:
    """True when any task carries our hints or weight rule (or names one of our rules the way Airflow
    cannot load: ``weight_rule="critical_path"`` fails the DAG's serialization naming neither the task
    nor the fix; the policy names both)."""
    for task in dag.task_dict.values():
        config = getattr(task, "executor_config", None)
        if isinstance(config, dict) and HINTS_KEY in config:
            return True
        rule = getattr(task, "weight_rule", None)
        if "airflow_gpu_dag" in str(getattr(rule, "__module__", "")) or "airflow_gpu_dag" in str(rule):
            return True
        if isinstance(rule, str) and _rule_meant(rule) is not None and _cannot_load(rule):  # not a plugin
            return True
    return False


def _rule_name(task: Any) -> str:
    rule = getattr(task, "weight_rule", None)
    if isinstance(rule, enum.Enum):  # Airflow's WeightRule: its value, not <WeightRule.DOWNSTREAM: ...>
        return str(rule.value)
    return rule if isinstance(rule, str) else type(rule).__name__


def _is_mapped(task: Any) -> bool:
    return type(task).__name__ == "MappedOperator" or hasattr(task, "partial_kwargs")


def _unloadable_rules(dag: Any) -> dict[str, list[str]]:
    """Weight rule -> the tasks using it, for the rules Airflow cannot load (``instance:<class>`` for a
    strategy object on a mapped task)."""
    bad: dict[str, list[str]] = {}
    by_name: dict[str, list[str]] = {}  # each named rule is checked once, however many tasks use it
    for task in dag.task_dict.values():
        rule = getattr(task, "weight_rule", None)
        if isinstance(rule, str) and not isinstance(rule, enum.Enum):
            by_name.setdefault(rule, []).append(task.task_id)
        elif rule is not None and not isinstance(rule, enum.Enum) and _is_mapped(task):
            bad.setdefault(f"instance:{type(rule).__name__}", []).append(task.task_id)
    for rule, tasks in by_name.items():
        if _cannot_load(rule):
            bad[rule] = tasks
    return bad


def _cannot_load(rule: str) -> bool:
    """Whether Airflow fails on weight rule ``rule`` (``Unknown priority strategy X``) when it serializes
    the DAG; a plugin that fails to load, say, is not the DAG's error (serialization judges)."""
    try:
        airflow_strategies.validate_and_load_priority_weight_strategy(rule)
    except ValueError:
        return True
    except Exception:
        log.debug("airflow-gpu-dag: could not check weight rule %r", rule, exc_info=True)
    return False


def weight_rule_findings(dag: Any, bad: dict[str, list[str]] | None = None) -> list[Finding]:
    """Weight rules Airflow cannot load, found at parse time with the task and the fix.

    Airflow itself fails such a DAG only when it serializes it, with ``Unknown priority strategy X``
    naming no task; a strategy *object* on a mapped task (``.partial(weight_rule=Strategy())``) is
    serialized as its ``repr`` and fails when the DAG is read back."""
    known = ["absolute", "downstream", "upstream", CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE]
    findings = []
    for rule, tasks in (_unloadable_rules(dag) if bad is None else bad).items():
        tasks = sorted(tasks)
        shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        if rule.startswith("instance:"):
            message = (
                f"mapped task(s) {shown} set weight_rule to a {rule.removeprefix('instance:')} object: "
                "Airflow stores a mapped task's weight rule as written, and an object cannot be stored."
            )
            fix = "pass the class path string: weight_rule=CRITICAL_PATH_WEIGHT_RULE (from airflow_gpu_dag)."
        else:
            names = {name: name for name in known} | {
                alias: path for path, aliases in _OUR_RULES.items() for alias in aliases
            }
            meant = _rule_meant(rule)
            close = difflib.get_close_matches(rule, list(names), n=1, cutoff=0.6)
            meant = meant or (names[close[0]] if close else None)
            message = f"task(s) {shown} use weight rule {rule!r}, which Airflow does not know."
            fix = (f"did you mean {meant!r}? " if meant else "") + "Use one of " + ", ".join(known) + "."
        findings.append(Finding(ERROR, "bad-weight-rule", str(dag.dag_id), tasks[0], message, fix))
    return findings


def _lease_problem() -> str | None:
    """What makes ``[gpu_dag]``'s lease options unusable (the GPU operators read them when a task
    starts, and fail on them), or None."""
    # start-up: every Airflow process imports this policy; the GPU package loads at the first DAG checked
    from airflow_gpu_dag.gpu.lease_settings import LeaseSettings

    try:
        LeaseSettings.from_config()
    except ValueError as err:
        return str(err)
    return None


def priority_findings(dag: Any) -> list[Finding]:
    """The cross-DAG policy's parse-time checks: weight rules Airflow can load, usable lease options
    (other ``[gpu_dag]`` options are logged, not failed), and the DAG's GPU tasks use a weight rule
    whose weights compare with other DAGs' (our rules give every task instance a key in seconds; a
    stock rule's small numbers always sort after them, whatever the task's size or wait)."""
    dag_id = str(dag.dag_id)
    bad = _unloadable_rules(dag)
    findings = weight_rule_findings(dag, bad)
    # a malformed optional option (objective included): its default applies, one logged error per process
    log_config_problems()  # (not every GPU DAG's import error); lint and the controller refuse it
    bad_config: list[tuple[str, str]] = []
    if lease := _lease_problem():
        bad_config.append(
            (
                f"{lease}: every GPU task fails when it starts (its device lease cannot be taken).",
                "fix [gpu_dag] lease_ttl, lease_heartbeat (at most half the ttl), lease_poll_interval and "
                "lease_wait_timeout; docs/configuration.md gives their format.",
            )
        )
    findings.extend(Finding(ERROR, "bad-config", dag_id, None, message, fix) for message, fix in bad_config)
    findings.extend(derived_findings(dag))  # (none left in the policy: it removed them first)
    gpu_tasks = [
        task
        for task in dag.task_dict.values()
        if read_contract(getattr(task, "executor_config", None)).gpus is not None
    ]
    unloadable = {task_id for tasks in bad.values() for task_id in tasks}
    stock = sorted(
        t.task_id
        for t in gpu_tasks
        if not _rule_name(t).endswith(CROSS_DAG_RULES) and t.task_id not in unloadable
    )
    if stock:
        shown = ", ".join(stock[:5]) + (f" and {len(stock) - 5} more" if len(stock) > 5 else "")
        findings.append(
            Finding(
                WARNING,
                "incomparable-priority",
                dag_id,
                stock[0],
                f"GPU task(s) {shown} use weight rule {_rule_name(dag.task_dict[stock[0]])!r}: its weights "
                "cannot be compared with the cross-DAG keys of other DAGs sharing the GPU pools (they always "
                "sort after them, whatever the task's size or how long it waited).",
                "set default_args={'weight_rule': CRITICAL_PATH_WEIGHT_RULE} (or PACKING_WEIGHT_RULE) "
                "from airflow_gpu_dag on the DAG.",
            )
        )
    return findings


def derived_findings(dag: Any) -> list[Finding]:
    """A warning for every task whose ``executor_config`` carries derived figures (the contract's
    ``derived``, or the version-1 ``gpu_dag_critical_path``): only the cluster policy writes them, and
    it replaces what the DAG file wrote (lint reports them; the policy logs them and removes them)."""
    findings = []
    for task_id, task in dag.task_dict.items():
        config = getattr(task, "executor_config", None)
        if not isinstance(config, dict):
            continue
        hints = config.get(HINTS_KEY)
        keys = [k for k in (LEGACY_DERIVED_KEY,) if k in config]
        keys += [f"{HINTS_KEY}.{DERIVED_KEY}"] if isinstance(hints, dict) and DERIVED_KEY in hints else []
        if keys:
            findings.append(
                Finding(
                    WARNING,
                    "derived-hint",
                    str(dag.dag_id),
                    task_id,
                    f"executor_config sets {', '.join(keys)}, figures only the provider derives (the task's "
                    "remaining critical path, the run's GPU work); the cluster policy replaces them.",
                    "remove them from the DAG file.",
                )
            )
    return findings


def validate_dag(dag: Any) -> ValidationReport:
    """Validate an Airflow DAG with the settings in ``[gpu_dag]`` (pools, largest host) and the
    configured GPU inventory (NVML on this host or ``[gpu_dag] inventory``, when there is one)."""
    return _validate(dag)[1]


def _validate(dag: Any) -> tuple[TaskGraph, ValidationReport]:
    graph, findings = build_task_graph(dag)
    policy = ValidationPolicy(
        pool_slots=pool_capacities(), max_gpus_per_host=max_gpus_per_host(), inventory=_inventory()
    )
    return graph, validate_graph(graph, policy, extra=[*findings, *priority_findings(dag)])


def _inventory() -> Any:
    """The parse-time GPU inventory (None when there is none or its configuration is invalid)."""
    # start-up: every Airflow process imports this policy; the GPU package loads at the first DAG checked
    from airflow_gpu_dag.gpu.inventory import InventoryError, parse_time_inventory_summary

    try:
        return parse_time_inventory_summary()
    except InventoryError as err:
        log.warning("airflow-gpu-dag: the GPU inventory configuration is invalid (%s); not checked", err)
        return None


@hookimpl
def dag_policy(dag: Any) -> None:
    """Validate a DAG using the provider (its tasks' contracts, requests, pools, weight rules) and write
    each task's canonical contract with the figures the provider derives. What a DAG file wrote as
    derived figures is removed from every DAG first: only this policy writes them."""
    for finding in derived_findings(dag):
        log.warning("%s", finding)
    parse_time.strip_derived(dag)
    if not uses_provider(dag):
        return
    graph, report = _validate(dag)
    for warning in report.warnings:
        log.warning("%s", warning)
    if report.errors:
        raise AirflowClusterPolicyViolation("\n".join(str(f) for f in report.errors))
    try:  # the figures for the scheduler's first get_weight (airflow/parse_time.py)
        written = parse_time.annotate(dag, graph)
    except Exception:  # the scheduler then analyses the DAG itself (in its loop, once per DAG object)
        log.warning("airflow-gpu-dag: no derived figures for DAG %r", dag.dag_id, exc_info=True)
    else:
        if not written:
            log.warning("airflow-gpu-dag: no derived figures for DAG %r (not finite)", dag.dag_id)
