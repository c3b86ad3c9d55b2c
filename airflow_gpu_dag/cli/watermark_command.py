"""``airflow gpu-dag watermark``: run the GPU watermark controller (long-running, or ``--once``), and
``airflow gpu-dag watermark-health``: is a running controller ticking (exec probes, healthchecks).

Wire them into the CLI group with the ready-made :data:`WATERMARK_COMMAND` and
:data:`WATERMARK_HEALTH_COMMAND` (or build your own ``ActionCommand`` from :data:`WATERMARK_ARGS`).
This module stays light: the controller is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from airflow.cli.cli_config import ARG_VERBOSE, ActionCommand, Arg, lazy_load_command
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_gpu_dag.cli.definition import output_arg

__all__ = [
    "ARG_WATERMARK_CONFIG",
    "ARG_WATERMARK_CONN_ID",
    "ARG_WATERMARK_DRY_RUN",
    "ARG_WATERMARK_HEALTH_HOST",
    "ARG_WATERMARK_HEALTH_PORT",
    "ARG_WATERMARK_HEARTBEAT_FILE",
    "ARG_WATERMARK_INTERVAL",
    "ARG_WATERMARK_ONCE",
    "ARG_WATERMARK_OUTPUT",
    "OUTCOME_COLUMNS",
    "WATERMARK_ARGS",
    "WATERMARK_COMMAND",
    "WATERMARK_HEALTH_COMMAND",
    "outcome_row",
    "watermark",
    "watermark_health",
]

log = logging.getLogger(__name__)


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {value!r}")
    return number


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0-65535, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0-65535, got {value!r}")
    return port


ARG_WATERMARK_ONCE = Arg(
    ("--once",),
    action="store_true",
    help="Run one tick, print what it did, write the pools back to their capacity, and exit.",
)
ARG_WATERMARK_DRY_RUN = Arg(
    ("--dry-run",),
    dest="dry_run",
    action="store_true",
    help="With --once: decide and print what would be written; write nothing (no pool, no lease).",
)
ARG_WATERMARK_OUTPUT = output_arg("Output format of --once (default: table).")
ARG_WATERMARK_INTERVAL = Arg(
    ("--interval",),
    type=_positive_float,
    default=None,
    help="Seconds between ticks (default: 'interval' of the config file, else 60).",
)
ARG_WATERMARK_CONFIG = Arg(
    ("--config",),
    default=None,
    help="YAML/JSON file describing the pools and their capacity sources (see docs/watermarks.md). "
    "Default: static pools from the gpu_dag.pools option.",
)
ARG_WATERMARK_CONN_ID = Arg(
    ("--conn-id",),
    dest="conn_id",
    default="gpu_dag_api",
    help="Airflow connection with the REST API URL (host) and login/password (default: gpu_dag_api).",
)
ARG_WATERMARK_HEALTH_PORT = Arg(
    ("--health-port",),
    dest="health_port",
    type=_port,
    default=None,
    metavar="PORT",
    help="Serve GET /health on this port: 200 while the last completed tick is younger than "
    "3 x interval, else 503 (off unless given).",
)
ARG_WATERMARK_HEALTH_HOST = Arg(
    ("--health-host",),
    dest="health_host",
    default="127.0.0.1",
    metavar="HOST",
    help="Address of the /health endpoint (default: 127.0.0.1; 0.0.0.0 for a Kubernetes httpGet probe).",
)
ARG_WATERMARK_HEARTBEAT_FILE = Arg(
    ("--heartbeat-file",),
    dest="heartbeat_file",
    default=None,
    metavar="PATH",
    help='Rewrite this JSON file after every tick: {"last_tick", "interval", "pid", "active"} '
    "(checked by airflow gpu-dag watermark-health).",
)
ARG_HEALTH_FILE = Arg(
    ("--heartbeat-file",),
    dest="heartbeat_file",
    required=True,
    metavar="PATH",
    help="The controller's --heartbeat-file.",
)
ARG_HEALTH_MAX_AGE = Arg(
    ("--max-age",),
    dest="max_age",
    type=_positive_float,
    default=None,
    metavar="SECONDS",
    help="Stale when the last tick is at least this old (default: 3 x the controller's interval).",
)
ARG_HEALTH_OUTPUT = output_arg(
    "Output format (default: table, the one line; the exit code is the same in every format)."
)

#: The command's options, for building the ``ActionCommand`` elsewhere.
WATERMARK_ARGS = (
    ARG_WATERMARK_ONCE,
    ARG_WATERMARK_DRY_RUN,
    ARG_WATERMARK_OUTPUT,
    ARG_WATERMARK_INTERVAL,
    ARG_WATERMARK_CONFIG,
    ARG_WATERMARK_CONN_ID,
    ARG_WATERMARK_HEALTH_PORT,
    ARG_WATERMARK_HEALTH_HOST,
    ARG_WATERMARK_HEARTBEAT_FILE,
    ARG_VERBOSE,
)

#: Ready to put in the ``gpu-dag`` ``GroupCommand``'s subcommands.
WATERMARK_COMMAND = ActionCommand(
    name="watermark",
    help="Keep GPU pools at their live capacity (watermark) and reserve slots for wide critical tasks",
    func=lazy_load_command("airflow_gpu_dag.cli.watermark_command.watermark"),
    args=WATERMARK_ARGS,
)

WATERMARK_HEALTH_COMMAND = ActionCommand(
    name="watermark-health",
    help="Exit 0 when the watermark controller's heartbeat file is fresh, 1 otherwise (probes)",
    func=lazy_load_command("airflow_gpu_dag.cli.watermark_command.watermark_health"),
    args=(ARG_HEALTH_FILE, ARG_HEALTH_MAX_AGE, ARG_HEALTH_OUTPUT),
)

#: The keys of ``watermark-health -o json``, in order: the header of ``-o plain``.
HEALTH_COLUMNS = ("fresh", "status", "age_s", "limit_s", "active", "pid", "heartbeat_file", "message")


#: The keys of :func:`outcome_row`, in order: the header of ``-o plain`` (printed also with no pool).
OUTCOME_COLUMNS = (
    "pool",
    "capacity",
    "source_status",
    "source_detail",
    "failed_intervals",
    "previous_size",
    "size",
    "action",
    "error",
    "reserved_for",
    "reserved_slots",
    "backfill_slots",
    "shadow_time",
    "lookahead",
    "reason",
)


def outcome_row(outcome: Any) -> dict[str, Any]:
    """One pool's outcome as a JSON-ready row (``-o json|yaml|plain``)."""
    decision = outcome.decision
    if outcome.error:
        action = "error"
    elif outcome.written:
        action = "written"
    elif outcome.would_write:
        action = "would write"
    else:
        action = "no change" if outcome.size is not None else "unchanged"
    reserving = decision is not None and decision.reserved_for is not None
    return {
        "pool": outcome.pool,
        "capacity": outcome.capacity.gpus,
        "source_status": outcome.capacity.status,
        "source_detail": outcome.capacity.detail,
        "failed_intervals": outcome.capacity.failures,
        "previous_size": outcome.previous,
        "size": outcome.size,
        "action": action,
        "error": outcome.error,
        "reserved_for": decision.reserved_for if decision is not None else None,
        "reserved_slots": decision.reserved_slots if reserving else 0,
        "backfill_slots": decision.backfill_slots if reserving else 0,
        "shadow_time": decision.shadow_time if decision is not None else None,
        "lookahead": bool(decision.lookahead) if decision is not None else False,
        "reason": decision.reason if decision is not None else None,
    }


def _print_table(
    outcomes: list[Any],
    released: list[str],
    dry_run: bool,
    missing: list[str] | None = None,
    created: list[str] | None = None,
    offline: str | None = None,
) -> None:
    """The human form of ``--once``: the pools the start-up check created (or, in a dry run, found
    missing), a line per pool, then the pools written back to their capacity. ``offline``: why a dry
    run read nothing from Airflow (its sizes assume no task waits)."""
    if offline:
        print(f"offline dry run ({offline}; sizes assume no task waits)")
    for pool in missing or ():
        print(f"pool {pool} does not exist (dry run: would be created)")
    for pool in created or ():
        print(f"created pool {pool} (size 0 until the first tick)")
    if not outcomes:
        print("standing by: another watermark controller holds the lease")
        return
    for outcome in outcomes:
        row = outcome_row(outcome)
        size = "unchanged" if outcome.size is None else str(outcome.size)
        action = "error: " + str(outcome.error) if outcome.error else row["action"]
        reason = row["reason"] or ""
        print(
            f"{outcome.pool}: size {size} capacity {outcome.capacity.gpus} "
            f"(source {outcome.capacity.status}: {outcome.capacity.detail}) {action}"
            + (f" | {reason}" if reason else "")
        )
    if dry_run:
        print("dry run: nothing was written")
    for pool in released:
        print(f"{pool}: written back to its capacity (the controller stops: fail open)")


def _fail(message: str) -> SystemExit:
    return SystemExit(f"airflow gpu-dag watermark: {message}")


def _unwritable(path: str) -> str | None:
    """Why the heartbeat file ``path`` cannot be rewritten after each tick (a temporary file in its
    folder, renamed over it; the folder is made if missing), or None. Nothing is created."""
    target = Path(path)
    if target.is_dir():
        return "it is a directory"
    folder = target.absolute().parent
    while not folder.exists() and folder != folder.parent:  # the folders the first beat would make
        folder = folder.parent
    if not folder.is_dir():
        return f"{str(folder)!r} is not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"permission denied in {str(folder)!r}"
    return None


def _client(hook_class: Any, conn_id: str, offline_ok: bool = False) -> Any:
    """The REST client of connection ``conn_id``; a missing or unusable connection is a one-line error
    that says how to create it, not a traceback. ``offline_ok`` (a dry run): a connection that is not
    defined gives the :class:`~airflow_gpu_dag.watermark.offline.OfflineClient` instead, which reads an
    empty Airflow (docs/watermarks.md#checking-a-configuration)."""
    try:
        return hook_class(conn_id).get_client()
    except AirflowNotFoundException:
        if offline_ok:
            # start-up: every `airflow` command loads this module; the offline client only for a dry run
            from airflow_gpu_dag.watermark.offline import OfflineClient  # start-up

            return OfflineClient()
        env = "AIRFLOW_CONN_" + conn_id.upper()
        raise _fail(
            f"Airflow connection {conn_id!r} (the REST API the controller writes pools through) is not "
            f"defined. Create it: airflow connections add {conn_id} --conn-type gpu_dag_api "
            f"--conn-host http://<api-server>:8080 --conn-login <user> --conn-password <password>, or set "
            f"{env}; or pass --conn-id (docs/connections.md)."
        ) from None
    except ValueError as err:
        raise _fail(f"{err} (docs/connections.md)") from None


def watermark(args: argparse.Namespace) -> None:
    """Entry point of ``airflow gpu-dag watermark`` (see :data:`WATERMARK_ARGS`)."""
    # start-up: every `airflow` command loads this module (its arguments); the controller loads when it runs
    import airflow_gpu_dag.metrics as metrics  # start-up
    from airflow_gpu_dag.cli import display  # start-up
    from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook  # start-up
    from airflow_gpu_dag.watermark.config import ConfigError, load_config, with_interval  # start-up
    from airflow_gpu_dag.watermark.controller import build_controller  # start-up
    from airflow_gpu_dag.watermark.health import Heartbeat  # start-up
    from airflow_gpu_dag.watermark.lifecycle import PreflightError  # start-up

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    once, dry_run = bool(getattr(args, "once", False)), bool(getattr(args, "dry_run", False))
    output = getattr(args, "output", None) or "table"
    if dry_run and not once:
        raise _fail("--dry-run needs --once (decide once, print, write nothing)")
    _refuse_bad_config()
    heartbeat_file = getattr(args, "heartbeat_file", None)
    if heartbeat_file is not None and not str(heartbeat_file).strip():
        # an unset $HEARTBEAT: running without the file a probe watches gets a healthy controller killed
        raise _fail("--heartbeat-file is empty: give the file the liveness probe reads, or leave it out")
    problem = _unwritable(heartbeat_file) if heartbeat_file else None
    if problem:
        raise _fail(
            f"--heartbeat-file {heartbeat_file!r}: cannot write ({problem}); watermark-health would report "
            "the controller as not ticking. Give a file in a writable folder"
        )
    try:
        config = load_config(getattr(args, "config", None))
    except ConfigError as err:
        raise _fail(str(err)) from None
    interval = getattr(args, "interval", None)
    if interval:
        try:
            config = with_interval(config, float(interval))
        except ConfigError as err:
            raise _fail(f"--interval {interval:g}: {err}") from None
    risk = config.fail_open_risk()
    if risk:
        log.warning("%s", risk)
    conn_id = getattr(args, "conn_id", None) or "gpu_dag_api"
    client = _client(AirflowApiHook, conn_id, offline_ok=dry_run)
    offline = f"no Airflow connection {conn_id!r}: {client.reason}" if hasattr(client, "reason") else None
    server = None
    try:
        heartbeat = Heartbeat(config.interval, getattr(args, "heartbeat_file", None))
        if getattr(args, "health_port", None) is not None and not once:
            # before the start-up check creates pools (at size 0): a taken port must leave none behind
            host = getattr(args, "health_host", None) or "127.0.0.1"
            try:
                server = heartbeat.serve(args.health_port, host)
            except OSError as err:
                raise _fail(
                    f"--health-port {args.health_port}: cannot serve /health on {host}:{args.health_port} "
                    f"({err.strerror or err}); choose a free port or another --health-host"
                ) from None
            log.info("health: GET http://%s:%d/health", *server.address)
        try:
            controller = build_controller(config, client, dry_run=dry_run)
        except ConfigError as err:
            raise _fail(str(err)) from None
        try:
            report = controller.preflight()
        except PreflightError as err:
            raise _fail(str(err)) from None
        if not dry_run:
            metrics.configure()
        if once:
            try:
                outcomes = controller.tick()
                if not dry_run:
                    heartbeat.beat(controller.active)
            finally:
                released = [] if dry_run else _release(controller, "finished --once")
            rows = [outcome_row(o) for o in outcomes]
            data = {
                "dry_run": dry_run,
                "offline": offline,
                "standing_by": not outcomes,
                "created": report.created,
                "missing": report.missing,
                "pools": rows,
                "released": released,
            }
            display.emit(
                output,
                data,
                rows=rows,
                columns=OUTCOME_COLUMNS,
                table=lambda: _print_table(
                    outcomes, released, dry_run, report.missing, report.created, offline
                ),
            )
            failed = [f"{o.pool} ({o.error})" for o in outcomes if o.error]
            if failed:  # a script or a config check must see that the tick did not do its work
                raise _fail(f"the tick failed for {len(failed)} pool(s): {'; '.join(failed)}")
            return
        _run_forever(controller, config, heartbeat)
    finally:
        if server is not None:
            server.stop()
        client.close()
        sys.stdout.flush()


def _refuse_bad_config() -> None:
    """A ``[gpu_dag]`` option the provider cannot use stops the controller before it touches a pool:
    where it is read its default would apply silently (DAGs still import with it; lint fails on it)."""
    from airflow_gpu_dag.gpu.inventory import inventory_problem  # start-up: the CLI loads this module
    from airflow_gpu_dag.settings import config_problems  # start-up: the CLI loads this module

    bad = [*config_problems(), *filter(None, [inventory_problem()])]
    if bad:
        options = "; ".join(f"[gpu_dag] {option} {problem}" for option, problem in bad)
        raise _fail(f"{options}. Fix or unset it (docs/configuration.md gives the format), then start again")


def _release(controller: Any, reason: str) -> list[str]:
    active = controller.active
    controller.shutdown(reason)
    return list(controller.released) if active else []


def _run_forever(controller: Any, config: Any, heartbeat: Any) -> None:
    stop = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping the watermark controller", signum)
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.info(
        "watermark controller %s (%s): %d pool(s) every %gs, fail open after %d intervals: %s",
        controller.holder,
        controller.group,
        len(config.pools),
        config.interval,
        config.fail_open_after,
        ", ".join(f"{p.name} ({p.source.type})" for p in config.pools),
    )
    try:
        controller.run(stop, on_tick=lambda _outcomes: heartbeat.beat(controller.active))
    finally:  # in-process callers (tests, an embedding app) get their handlers back
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)


def watermark_health(args: argparse.Namespace) -> None:
    """Entry point of ``airflow gpu-dag watermark-health``: exit 0 when fresh, 1 otherwise."""
    from airflow_gpu_dag.cli import display  # start-up: the CLI loads this module
    from airflow_gpu_dag.watermark.health import heartbeat_status  # start-up: the CLI loads this module

    status = heartbeat_status(args.heartbeat_file, getattr(args, "max_age", None))
    display.emit(
        getattr(args, "output", None) or "table",
        status,
        rows=[status],
        columns=HEALTH_COLUMNS,
        table=lambda: print(status["message"]),
    )
    sys.stdout.flush()
    if not status["fresh"]:
        raise SystemExit(1)
