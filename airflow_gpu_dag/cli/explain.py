"""``airflow gpu-dag explain DAG_ID [RUN_ID] [--task TASK_ID]``: why each GPU task of a run waits, when it
is predicted to start, and, once tasks have finished, how far the plan was from what happened.

The answer is read from the live state over the REST API (the ``gpu_dag_api`` connection, as the
watermark controller reads it) by :func:`airflow_gpu_dag.cli.explain_report.build_report`; this module
prints it (``-o table|json|yaml``) and exits with a code scripts can rely on
(:data:`~airflow_gpu_dag.cli.explain_report.EXIT_CODES`, docs/cli.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.explain_report import (
    EXIT_API,
    EXIT_NO_CONTROLLER,
    EXIT_OK,
    ExplainError,
    build_report,
)
from airflow_gpu_dag.pool_claim.state import iso_time

__all__ = ["PLAIN_COLUMNS", "explain", "explain_exit_code", "print_report"]

#: The columns of ``-o plain``: one row per task.
PLAIN_COLUMNS = (
    "task",
    "state",
    "pool",
    "slots",
    "priority_weight",
    "rank",
    "reason",
    "predicted_start",
    "predicted_end",
    "planned_start",
    "planned_end",
    "start",
    "end",
)


def _when(epoch: float | None, now: float) -> str:
    if epoch is None:
        return "unknown"
    return f"{iso_time(epoch)} ({epoch - now:+.0f}s)"


def _row(entry: Mapping[str, Any]) -> dict[str, Any]:
    reason = entry.get("reason") or {}
    return {**{name: entry.get(name) for name in PLAIN_COLUMNS}, "reason": reason.get("code")}


def print_report(report: Mapping[str, Any], file: Any = None) -> None:
    """The human form (``-o table``): the pools' controllers, then a paragraph per task."""
    out = file or sys.stdout
    now = float(report["now"])
    print(
        f"DAG {report['dag_id']}, run {report['run_id']} ({report.get('run_state')}), at {iso_time(now)}",
        file=out,
    )
    for name, pool in report["controller"].items():
        decision = pool.get("decision")
        said = f"; latest decision: {decision['code']} ({decision['meaning']})" if decision else ""
        print(f"  pool {name}: capacity {pool.get('capacity')}, controller {pool['status']}{said}", file=out)
    for warning in report.get("warnings", []):
        print(f"  warning: {warning}", file=out)
    for entry in report["tasks"]:
        reason = entry.get("reason") or {}
        print(file=out)
        head = f"{entry['task']} ({entry['state']}, pool {entry['pool']}, {entry['slots']} slot(s)"
        if entry.get("key"):
            head += f", key {entry['key']}"
        if entry.get("rank") is not None:
            head += f", rank {entry['rank']} of {entry['queue_length']} waiting"
        print(head + ")", file=out)
        print(f"  why: {reason.get('text', '')}", file=out)
        if entry.get("ahead"):
            shown = "; ".join(
                f"{a['task']} (key {a['key'] or a['priority_weight']}, {a['slots']} slot(s))"
                for a in entry["ahead"]
            )
            more = entry["ahead_count"] - len(entry["ahead"])
            print(f"  ahead: {shown}" + (f" and {more} more" if more > 0 else ""), file=out)
        if "start_error_s" in entry:
            print(
                f"  planned {_when(entry['planned_start'], now)} to {_when(entry['planned_end'], now)}; ran "
                f"{_when(entry['start'], now)} to {_when(entry['end'], now)} "
                f"(start {entry['start_error_s']:+.1f}s, end {entry['end_error_s']:+.1f}s)",
                file=out,
            )
        else:
            print(
                f"  predicted start {_when(entry.get('predicted_start'), now)}, end "
                f"{_when(entry.get('predicted_end'), now)}",
                file=out,
            )
    error = report.get("plan_error")
    if error:
        start, end = error["start_error_s"], error["end_error_s"]
        print(
            f"\nplan error over {error['tasks']} task(s): start median {start['median']:.1f}s, p90 "
            f"{start['p90']:.1f}s; end median {end['median']:.1f}s, p90 {end['p90']:.1f}s"
            if error["tasks"]
            else "\nplan error: no finished GPU task to compare",
            file=out,
        )


def explain_exit_code(report: Mapping[str, Any]) -> int:
    """0, or :data:`EXIT_NO_CONTROLLER` when a task still waits in a pool no live controller decides."""
    return EXIT_NO_CONTROLLER if report.get("warnings") else EXIT_OK


def _fail(message: str, code: int) -> SystemExit:
    print(f"airflow gpu-dag explain: {message}", file=sys.stderr)
    sys.stderr.flush()
    return SystemExit(code)


def _client(conn_id: str) -> Any:
    """The REST client of connection ``conn_id``; a missing or unusable one is a message and exit 4."""
    from airflow.sdk.exceptions import AirflowNotFoundException  # start-up: the command loads the SDK

    from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook  # start-up: only the command needs the hook

    try:
        return AirflowApiHook(conn_id).get_client()
    except AirflowNotFoundException:
        raise _fail(
            f"Airflow connection {conn_id!r} (the REST API explain reads the live state through) is not "
            f"defined. Create it: airflow connections add {conn_id} --conn-type gpu_dag_api --conn-host "
            "http://<api-server>:8080 --conn-login <user> --conn-password <password>, or set "
            f"AIRFLOW_CONN_{conn_id.upper()}; or pass --conn-id (docs/connections.md)",
            EXIT_API,
        ) from None
    except ValueError as err:
        raise _fail(f"{err} (docs/connections.md)", EXIT_API) from None


def explain(args: argparse.Namespace) -> None:
    """Entry point of ``airflow gpu-dag explain`` (arguments in :mod:`airflow_gpu_dag.cli.definition`)."""
    import airflow_gpu_dag.metrics as metrics  # start-up: metrics configure Airflow's stats when sent
    from airflow_gpu_dag.settings import default_duration_seconds, key_epoch  # start-up: reads [gpu_dag]
    from airflow_gpu_dag.watermark.controller import reservation_gate  # start-up: the controller's gate
    from airflow_gpu_dag.watermark.durations import ControllerHistory  # start-up: learned durations

    output = getattr(args, "output", None) or "table"
    client = _client(getattr(args, "conn_id", None) or "gpu_dag_api")
    try:
        report = build_report(
            client,
            args.dag_id,
            getattr(args, "run_id", None),
            getattr(args, "task", None),
            history=ControllerHistory(client, default_duration_seconds()),
            gate=reservation_gate(),
            epoch=key_epoch(),
        )
    except ExplainError as err:
        raise _fail(str(err), err.code) from None
    finally:
        client.close()
    error = report.get("plan_error")
    if error and error.get("tasks"):
        metrics.plan_error(args.dag_id, error["start_error_s"], error["end_error_s"])
    display.emit(
        output,
        report,
        rows=lambda: [_row(entry) for entry in report["tasks"]],
        columns=PLAIN_COLUMNS,
        table=lambda: print_report(report),
    )
    sys.stdout.flush()
    code = explain_exit_code(report)
    if code:
        raise _fail("; ".join(report["warnings"]), code)
