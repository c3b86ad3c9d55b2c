"""Tests of ``airflow_gpu_dag.cli.common``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from airflow_gpu_dag.cli import common
from airflow_gpu_dag.cli.common import (
    check_objective_setting,
    configured_pools,
    parse_pool_args,
    quiet,
    simulation_capacity,
    watermark_unavailable,
)
from airflow_gpu_dag.cli.loading import DagLoadError
from airflow_gpu_dag.core.model.graph import CycleError

#: Every test runs with no configured pools and wide lines.
pytestmark = pytest.mark.usefixtures("_no_configured_pools")


def test_a_reader_that_stops_early_is_not_an_error(tmp_path: Path) -> None:
    """`airflow gpu-dag plan ... -o plain | head -1` ended in a BrokenPipeError traceback."""
    script = tmp_path / "pipe.py"
    script.write_text(
        "import argparse\n"
        "from airflow_gpu_dag.cli.common import quiet\n"
        "@quiet\n"
        "def command(args):\n"
        "    for i in range(200_000):\n"
        "        print('row', i)\n"
        "command(argparse.Namespace(verbose=True))\n"
    )
    result = subprocess.run(
        f"{sys.executable} {script} | head -1", shell=True, capture_output=True, text=True, check=False
    )
    assert result.stdout == "row 0\n"
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr


# -- --pool / --capacity NAME=SLOTS ------------------------------------------------------------------------
def test_pool_arguments_are_read_as_name_to_slots() -> None:
    """Blanks around the name and the number are dropped; 0 slots is a size (a pool switched off)."""
    assert parse_pool_args(["gpu_a100=4", " gpu_default = 0 "]) == {"gpu_a100": 4, "gpu_default": 0}


@pytest.mark.parametrize("values", [None, []])
def test_no_pool_argument_gives_no_pool(values: list[str] | None) -> None:
    assert parse_pool_args(values) == {}


def test_a_pool_given_twice_with_the_same_size_is_accepted() -> None:
    assert parse_pool_args(["gpu=4", "gpu=4"]) == {"gpu": 4}


@pytest.mark.parametrize(
    "value",
    [
        "gpu_a100",
        "gpu_a100:8",
        "=8",
        " =8",
        "gpu_a100=",
        "gpu_a100=eight",
        "gpu_a100=4.5",
        "gpu_a100=1e3",
        "gpu_a100=-1",
    ],
    ids=[
        "no =",
        "colon",
        "no name",
        "blank name",
        "no slots",
        "a word",
        "a fraction",
        "an exponent",
        "negative",
    ],
)
def test_a_pool_argument_that_is_not_name_equals_slots_is_refused_with_the_fix(value: str) -> None:
    """The message quotes the argument as given, says what is expected and shows a correct one."""
    with pytest.raises(ValueError) as err:
        parse_pool_args(["gpu_default=8", value])
    assert str(err.value) == (
        f"--pool {value!r}: expected NAME=SLOTS with SLOTS a whole number >= 0, e.g. --pool gpu_a100=8"
    )


def test_a_pool_argument_error_names_the_option_it_came_from() -> None:
    """`simulate --capacity gpu=x` must not tell the user to fix a `--pool` they never gave."""
    with pytest.raises(ValueError) as err:
        parse_pool_args(["gpu=x"], option="--capacity")
    assert str(err.value) == (
        "--capacity 'gpu=x': expected NAME=SLOTS with SLOTS a whole number >= 0, e.g. --capacity gpu_a100=8"
    )


def test_a_pool_given_two_sizes_is_refused() -> None:
    """The last size silently winning would simulate or check a pool the user did not mean."""
    with pytest.raises(ValueError) as err:
        parse_pool_args(["gpu=4", "other=1", "gpu = 8"], option="--capacity")
    assert str(err.value) == (
        "--capacity gpu=4 and --capacity 'gpu = 8': pool 'gpu' is given two sizes; give it once"
    )


# -- settings --------------------------------------------------------------------------------------------
def test_configured_pools_are_the_pools_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured_pools() == {}
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_a100": 4, "gpu_default": 8}')
    assert configured_pools() == {"gpu_a100": 4, "gpu_default": 8}


def test_configured_pools_ignore_a_pools_setting_that_is_not_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unusable setting is ignored here (lint reports it as `bad-config`), not a crash."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", "gpu_a100=4")
    assert configured_pools() == {}


@pytest.mark.parametrize("name", [None, "fair", "throughput", "balanced", " Latency "])
def test_a_known_objective_setting_is_accepted(monkeypatch: pytest.MonkeyPatch, name: str | None) -> None:
    if name is None:
        monkeypatch.delenv("AIRFLOW__GPU_DAG__OBJECTIVE", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", name)
    check_objective_setting()


def test_an_unknown_objective_setting_is_refused_with_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/cli.md: "`[gpu_dag] objective`, where an unknown name is an error" (the scheduler would
    silently fall back to `fair`)."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "fastest")
    with pytest.raises(ValueError) as err:
        check_objective_setting()
    assert str(err.value) == (
        "unknown objective 'fastest': use one of throughput, balanced, fair, latency ([gpu_dag] objective)"
    )


# -- simulation capacities ------------------------------------------------------------------------------
def test_simulation_capacity_is_the_configured_pools_used_updated_by_the_given_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Configured pools nothing uses are left out; `--capacity` overrides the setting."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_a": 4, "gpu_b": 8, "gpu_unused": 2}')
    capacity = simulation_capacity(
        {"gpu_a": "train", "gpu_b": "eval"}, {"gpu_a", "gpu_b"}, {"gpu_b": 1}, "DAG 'd'"
    )
    assert capacity == {"gpu_a": 4, "gpu_b": 1}


def test_simulation_capacity_refuses_a_pool_nothing_uses() -> None:
    """A `--capacity` pool no simulated task uses is a typo, not a pool to ignore."""
    with pytest.raises(ValueError) as err:
        simulation_capacity(
            {"gpu_a": "train"}, {"gpu_a", "default_pool"}, {"gpu_h100": 2, "gpu_a": 1}, "DAG 'd'"
        )
    assert str(err.value) == (
        "pool(s) gpu_h100 not used by DAG 'd' (its pools: default_pool, gpu_a); check the --capacity names."
    )


@pytest.mark.parametrize(
    ("setting", "fix"),
    [
        (None, "set [gpu_dag] pools"),
        ('{"gpu_b": 2, "gpu_c": 1}', "add 'gpu_a' to [gpu_dag] pools (it has gpu_b, gpu_c)"),
        ("gpu_a=4", "fix [gpu_dag] pools, which is not JSON ("),
    ],
    ids=["no setting", "setting without the pool", "unusable setting"],
)
def test_a_gpu_pool_without_capacity_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, fix: str
) -> None:
    """docs/cli.md: "Every GPU pool the DAG uses needs a capacity (the error says what `[gpu_dag] pools`
    holds, or what is wrong with it)"."""
    if setting is not None:
        monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", setting)
    with pytest.raises(ValueError) as err:
        simulation_capacity({"gpu_a": "train"}, {"gpu_a"}, {}, "DAG 'd'")
    message = str(err.value)
    assert message.startswith(
        "GPU pool(s) gpu_a of DAG 'd' have no capacity (task 'train' uses 'gpu_a'); "
        "add --capacity gpu_a=<GPUs> or "
    )
    assert fix in message
    assert message.endswith(".")


# -- quiet: how a command ends ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "error",
    [
        ValueError("bad --trigger"),
        DagLoadError("DAG 'x' not found"),
        CycleError("d", ["a", "b", "a"]),
    ],
    ids=["ValueError", "DagLoadError", "CycleError"],
)
@pytest.mark.parametrize("verbose", [False, True])
def test_a_load_error_ends_the_command_with_a_one_line_message(error: Exception, verbose: bool) -> None:
    """docs/cli.md: "Errors are one line naming the DAG, the task and the fix" (exit status 1: the
    message is the SystemExit code), with or without --verbose."""

    @quiet
    def command(args: argparse.Namespace) -> None:
        raise error

    with pytest.raises(SystemExit) as stop:
        command(argparse.Namespace(verbose=verbose))
    assert stop.value.code == f"error: {error}"
    assert stop.value.__suppress_context__  # no "During handling ..." traceback chained to it


def test_an_unexpected_error_is_not_turned_into_a_message() -> None:
    """Only load errors become one line: a bug keeps its traceback."""

    @quiet
    def command(args: argparse.Namespace) -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError, match="bug"):
        command(argparse.Namespace(verbose=False))


def test_a_reader_that_stops_early_ends_the_command_with_status_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """`... -o plain | head`: stdout is pointed at /dev/null (no error at the final flush), exit 0."""
    redirected: list[bool] = []
    monkeypatch.setattr(common, "_stdout_to_devnull", lambda: redirected.append(True))

    @quiet
    def command(args: argparse.Namespace) -> None:
        raise BrokenPipeError

    with pytest.raises(SystemExit) as stop:
        command(argparse.Namespace(verbose=True))
    assert stop.value.code == 0
    assert redirected == [True]


@pytest.mark.parametrize(("verbose", "shown"), [(False, 0), (True, 1)])
def test_warnings_and_logs_are_silenced_unless_verbose(verbose: bool, shown: int) -> None:
    """Airflow's parse logs and deprecation warnings would bury the output; `-v` shows them."""
    logged: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record)

    @quiet
    def command(args: argparse.Namespace) -> None:
        warnings.warn("deprecated", DeprecationWarning, stacklevel=1)
        logging.getLogger("test_common.quiet").warning("parsing")

    logger = logging.getLogger("test_common.quiet")
    handler = Keep()
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            command(argparse.Namespace(verbose=verbose))
    finally:
        logger.removeHandler(handler)
    assert (len(warned), len(logged)) == (shown, shown)
    assert logging.root.manager.disable == logging.NOTSET  # logging is back on after the command


def test_a_command_without_a_verbose_option_runs_quietly() -> None:
    ran: list[bool] = []

    @quiet
    def command(args: argparse.Namespace) -> None:
        ran.append(True)

    command(argparse.Namespace())
    assert ran == [True]


def test_a_load_error_exits_with_status_1_and_one_line_on_stderr(tmp_path: Path) -> None:
    """docs/cli.md: exit code 1 and a one-line message on stderr; stdout stays empty for `-o json | jq`."""
    script = tmp_path / "fails.py"
    script.write_text(
        "import argparse\n"
        "from airflow_gpu_dag.cli.common import quiet\n"
        "@quiet\n"
        "def command(args):\n"
        "    raise ValueError(\"DAG 'd' not found; check the DAG id\")\n"
        "command(argparse.Namespace(verbose=True))\n"
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "error: DAG 'd' not found; check the DAG id\n"


# -- the spinner, the missing watermark command -----------------------------------------------------------
class _RecordingConsole:
    """Stands for the error console: records the spinners asked for."""

    def __init__(self) -> None:
        self.spinners: list[tuple[str, str]] = []

    def status(self, message: str, spinner: str) -> contextlib.AbstractContextManager[None]:
        self.spinners.append((message, spinner))
        return contextlib.nullcontext()


@pytest.mark.parametrize(("machine_readable", "spinners"), [(False, [("Loading DAGs", "dots")]), (True, [])])
def test_the_spinner_runs_only_for_the_table_output(
    machine_readable: bool, spinners: list[tuple[str, str]]
) -> None:
    err = _RecordingConsole()
    with common.status(err, "Loading DAGs", machine_readable):  # type: ignore[arg-type]
        pass
    assert err.spinners == spinners


def test_a_missing_watermark_command_says_how_to_get_it() -> None:
    with pytest.raises(SystemExit) as stop:
        watermark_unavailable(argparse.Namespace())
    assert stop.value.code == (
        "error: the watermark controller is not available in this installation "
        "(module airflow_gpu_dag.cli.watermark_command is missing); reinstall airflow-gpu-dag."
    )
