"""``airflow gpu-dag watermark``: run the GPU watermark controller (long-running, or ``--once``).

Wire it into the CLI group with the ready-made :data:`WATERMARK_COMMAND` (or build your own
``ActionCommand`` from :data:`WATERMARK_ARGS`). This module stays light: the controller is imported
only when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import replace
from typing import Any

from airflow.cli.cli_config import ARG_VERBOSE, ActionCommand, Arg, lazy_load_command

__all__ = [
    "ARG_WATERMARK_CONFIG",
    "ARG_WATERMARK_CONN_ID",
    "ARG_WATERMARK_INTERVAL",
    "ARG_WATERMARK_ONCE",
    "WATERMARK_ARGS",
    "WATERMARK_COMMAND",
    "watermark",
]

log = logging.getLogger(__name__)


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {value!r}")
    return number


ARG_WATERMARK_ONCE = Arg(("--once",), action="store_true", help="Run one tick, print what it did, and exit.")
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

#: The command's options, for building the ``ActionCommand`` elsewhere.
WATERMARK_ARGS = (
    ARG_WATERMARK_ONCE,
    ARG_WATERMARK_INTERVAL,
    ARG_WATERMARK_CONFIG,
    ARG_WATERMARK_CONN_ID,
    ARG_VERBOSE,
)

#: Ready to put in the ``gpu-dag`` ``GroupCommand``'s subcommands.
WATERMARK_COMMAND = ActionCommand(
    name="watermark",
    help="Keep GPU pools at their live capacity (watermark) and reserve slots for wide critical tasks",
    func=lazy_load_command("airflow_gpu_dag.cli.watermark_command.watermark"),
    args=WATERMARK_ARGS,
)


def _print_outcomes(outcomes: list[Any]) -> None:
    if not outcomes:
        print("standing by: another watermark controller holds the lease")
        return
    for outcome in outcomes:
        size = "unchanged" if outcome.size is None else str(outcome.size)
        action = (
            "written" if outcome.written else ("error: " + outcome.error if outcome.error else "no change")
        )
        reason = outcome.decision.reason if outcome.decision is not None else ""
        print(
            f"{outcome.pool}: size {size} capacity {outcome.capacity.gpus} "
            f"(source {outcome.capacity.status}: {outcome.capacity.detail}) {action}"
            + (f" | {reason}" if reason else "")
        )


def watermark(args: argparse.Namespace) -> None:
    """Entry point of ``airflow gpu-dag watermark`` (reads once, interval, config, conn_id)."""
    from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook
    from airflow_gpu_dag.watermark.config import ConfigError, load_config
    from airflow_gpu_dag.watermark.controller import build_controller

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(getattr(args, "config", None))
    except ConfigError as err:
        raise SystemExit(f"airflow gpu-dag watermark: {err}") from None
    interval = getattr(args, "interval", None)
    if interval:
        config = replace(config, interval=float(interval))
    client = AirflowApiHook(getattr(args, "conn_id", None) or "gpu_dag_api").get_client()
    controller = build_controller(config, client)
    try:
        if getattr(args, "once", False):
            _print_outcomes(controller.tick())
            return
        stop = threading.Event()

        def _stop(signum: int, _frame: object) -> None:
            log.info("signal %d: stopping the watermark controller", signum)
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        log.info(
            "watermark controller: %d pool(s) every %gs: %s",
            len(config.pools),
            config.interval,
            ", ".join(f"{p.name} ({p.source.type})" for p in config.pools),
        )
        controller.run(stop)
    finally:
        if controller.leader_lock is not None and getattr(args, "once", False):
            controller.leader_lock.release()
        client.close()
        sys.stdout.flush()
