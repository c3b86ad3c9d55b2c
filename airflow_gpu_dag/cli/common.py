"""What the ``airflow gpu-dag`` commands share: quiet running, ``NAME=SLOTS`` arguments, the
configured pools, the progress spinner, and the stand-in for a missing watermark command."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.utils.cli import suppress_logs_and_warning

from airflow_gpu_dag.cli.loading import DagLoadError
from airflow_gpu_dag.core.model.graph import CycleError
from airflow_gpu_dag.core.policy.objective import get_objective
from airflow_gpu_dag.settings import objective_name, pool_capacities, pools_problem

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "check_objective_setting",
    "configured_pools",
    "parse_pool_args",
    "quiet",
    "status",
    "watermark_unavailable",
]

F = TypeVar("F", bound=Callable[..., Any])


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of a closed pipe raises nothing
    (what the Python docs advise for ``BrokenPipeError``)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def quiet(func: F) -> F:
    """Silence Airflow's parse logs and warnings unless ``--verbose``; turn load errors into a
    one-line message and exit code 1."""

    def run(args: argparse.Namespace) -> Any:
        try:
            return func(args)
        except (DagLoadError, CycleError, ValueError) as err:
            raise SystemExit(f"error: {err}") from None
        except BrokenPipeError:  # `... -o plain | head`: the reader stopped; not an error of ours
            _stdout_to_devnull()
            raise SystemExit(0) from None

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> Any:
        if getattr(args, "verbose", False):
            return run(args)
        # Airflow's wrapper reads args.verbose: a command without -v gets a namespace that has it
        return suppress_logs_and_warning(lambda _quiet: run(args))(argparse.Namespace(verbose=False))

    return wrapper  # type: ignore[return-value]


def check_objective_setting() -> None:
    """Refuse an unknown ``[gpu_dag] objective``: the scheduler falls back to ``fair`` with a log
    line (it must never raise), but a command that prints a plan under it says so at once.

    :raises ValueError: the unknown name and the known ones (:func:`quiet` prints it, exit code 1).
    """
    get_objective(objective_name())


def status(err: Console, message: str, json_output: bool) -> contextlib.AbstractContextManager[Any]:
    """A spinner with ``message`` on the error console; nothing when ``json_output`` (any
    machine-readable ``--output``: json, yaml, plain)."""
    return err.status(message, spinner="dots") if not json_output else contextlib.nullcontext()


# -- argument parsing ------------------------------------------------------------------------------
def parse_pool_args(values: Sequence[str] | None, option: str = "--pool") -> dict[str, int]:
    """``["gpu_a100=4", "gpu_default=8"]`` -> ``{"gpu_a100": 4, "gpu_default": 8}``.

    :raises ValueError: a value is not ``NAME=SLOTS`` with SLOTS a whole number >= 0, or one pool is
        given two different sizes (the last one silently winning would simulate a pool the user
        did not mean).
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
        if pools.get(name, number) != number:
            raise ValueError(
                f"{option} {name}={pools[name]} and {option} {value!r}: pool {name!r} is given two "
                f"sizes; give it once"
            )
        pools[name] = number
    return pools


def configured_pools() -> dict[str, int]:
    """The pools of ``[gpu_dag] pools`` (empty when not set)."""
    return dict(pool_capacities() or {})


def simulation_capacity(
    gpu_pools: dict[str, str], used: set[str], given: dict[str, int], what: str
) -> dict[str, int]:
    """The pool capacities to simulate on: ``[gpu_dag] pools`` for the pools used, overridden by
    ``--capacity`` (``given``), as ``lint --pool`` adds to the configured pools.

    ``gpu_pools``: GPU pool -> the task that uses it first (named in the error); ``used``: every pool
    the simulated tasks use; ``what``: the simulated DAGs, for the messages.

    :raises ValueError: a ``--capacity`` pool nothing uses (a typo), or a GPU pool with no capacity;
        the message says what ``[gpu_dag] pools`` holds, or what is wrong with it.
    """
    unknown = sorted(set(given) - used)
    if unknown:
        raise ValueError(
            f"pool(s) {', '.join(unknown)} not used by {what} "
            f"(its pools: {', '.join(sorted(used)) or 'none'}); check the --capacity names."
        )
    configured = configured_pools()
    capacity = {pool: slots for pool, slots in configured.items() if pool in used}
    capacity.update(given)
    missing = sorted(set(gpu_pools) - set(capacity))
    if missing:
        hints = " ".join(f"--capacity {p}=<GPUs>" for p in missing)
        problem = pools_problem()
        if problem:
            setting = f"fix [gpu_dag] pools, which {problem} and is ignored"
        elif configured:
            setting = f"add {missing[0]!r} to [gpu_dag] pools (it has {', '.join(sorted(configured))})"
        else:
            setting = "set [gpu_dag] pools"
        raise ValueError(
            f"GPU pool(s) {', '.join(missing)} of {what} have no capacity (task {gpu_pools[missing[0]]!r} "
            f"uses {missing[0]!r}); add {hints} or {setting}."
        )
    return capacity


# -- watermark (fallback) --------------------------------------------------------------------------
def watermark_unavailable(args: argparse.Namespace) -> None:
    """Stand-in for ``airflow gpu-dag watermark`` when its module is not installed."""
    raise SystemExit(
        "error: the watermark controller is not available in this installation "
        "(module airflow_gpu_dag.cli.watermark_command is missing); reinstall airflow-gpu-dag."
    )
