"""``airflow gpu-dag`` as a whole: Airflow discovers its commands and the parser has each of them; a
DAG file that prints while it is parsed (``print("loading")``) writes nothing into stdout before the
``-o json`` document, which must stay valid JSON; ``COLUMNS=0`` (what some pseudo-terminals report)
still prints every rich table and line; rich tables wrap long ids instead of cutting them with ``…``
(two DAGs or tasks would print as the same row); a DAG id two files define is a warning naming both."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from airflow.cli.cli_config import ActionCommand

from airflow_gpu_dag.cli import definition, display
from airflow_gpu_dag.cli.definition import GPU_DAG_COMMANDS, get_gpu_dag_cli_commands, get_parser
from tests.unit.cli.conftest import (
    GOOD,
    LONG_IDS,
    LONG_IDS_DAG,
    PIPELINE,
    long_ids_dag_file,
    run_cli,
    table_column,
)

_DAG = """\
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow_gpu_dag import gpu_hints
{prelude}
with DAG("{dag_id}", schedule=None):
    EmptyOperator(task_id="prepare", executor_config=gpu_hints(duration="30m"))
"""


def _dag_file(folder: Path, dag_id: str, prelude: str = "") -> Path:
    path = folder / f"{dag_id}.py"
    path.write_text(_DAG.format(dag_id=dag_id, prelude=prelude))
    return path


# -- 1. a DAG file's print() must not corrupt the JSON output -------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(
    "argv",
    [
        ["lint", "{file}"],
        ["plan", "chatty", "--file", "{file}"],
        ["estimates", "chatty", "--file", "{file}"],
        ["simulate", "chatty", "--file", "{file}"],
        ["simulate", "chatty", "--file", "{file}", "--trigger", "chatty=15m"],
    ],
)
def test_what_a_dag_file_prints_goes_to_stderr_not_into_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    path = _dag_file(tmp_path, "chatty", prelude='print("parsing chatty, hello")')
    assert run_cli(*(a.format(file=path) for a in argv), "-o", "json") == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # the document alone
    assert "parsing chatty, hello" in captured.err


# -- 3. COLUMNS=0 ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_columns_zero_still_prints_the_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "0")
    path = _dag_file(tmp_path, "plain_dag")
    assert run_cli("plan", "plain_dag", "--file", str(path)) == 0
    out = capsys.readouterr().out
    assert "Plan of DAG 'plain_dag'" in out and "prepare" in out and "Critical path" in out


# -- 6. several runs: long DAG ids are wrapped, not cut ---------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_the_several_runs_table_wraps_long_dag_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [f"nightly_evaluation_of_the_large_language_model_checkpoint_{s}" for s in ("alpha", "bravo")]
    for dag_id in ids:
        _dag_file(tmp_path, dag_id)
    monkeypatch.setenv("COLUMNS", "80")
    assert run_cli("simulate", "--folder", str(tmp_path)) == 0
    out = capsys.readouterr().out
    cells = table_column(out, 1)  # the DAG column of the first table, as printed in a pipe
    assert "…" not in cells
    assert cells == "".join(ids)


# -- discovery -------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_airflow_discovers_the_gpu_dag_commands() -> None:
    airflow = Path(sys.executable).with_name("airflow")
    result = subprocess.run(
        [str(airflow), "gpu-dag", "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for command in ("lint", "plan", "simulate", "watermark"):
        assert command in result.stdout


@pytest.mark.usefixtures("_no_configured_pools")
def test_parser_has_every_command() -> None:
    parser = get_parser()
    for argv in (
        ["gpu-dag", "lint", "x.py"],
        ["gpu-dag", "plan", "d"],
        ["gpu-dag", "simulate", "d", "--capacity", "p=1"],
        ["gpu-dag", "watermark", "--help"][:2],
    ):
        assert callable(parser.parse_args(argv).func)


# -- 3. a DAG id two files define ----------------------------------------------------------------------------
_DUP = """import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

with DAG("dupdag", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         default_args={{"weight_rule": CRITICAL_PATH_WEIGHT_RULE}}):
    EmptyOperator(task_id="{task}", pool="gpu_default", executor_config=gpu_hints(duration="20m", gpus=1))
"""


def _duplicated(folder: Path) -> tuple[Path, Path]:
    first, second = folder / "a.py", folder / "b.py"
    first.write_text(_DUP.format(task="a"))
    second.write_text(_DUP.format(task="b"))
    return first, second


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_a_dag_id_in_two_files_is_a_warning_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    first, second = _duplicated(tmp_path)
    extra = ("--capacity", "gpu_default=2") if command == "simulate" else ()
    assert run_cli(command, "dupdag", "--file", str(tmp_path), *extra, "-o", "json") == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # stdout stays a clean JSON document
    tasks = data["tasks"] if command == "plan" else data["results"]["stock"]["schedule"]
    kept = {t["task_id"] for t in tasks}
    used, ignored = (first, second) if kept == {"a"} else (second, first)
    assert kept in ({"a"}, {"b"})
    assert f"warning: DAG 'dupdag' is defined in 2 files: using {used}, ignoring {ignored}" in captured.err


@pytest.mark.usefixtures("_no_configured_pools")
def test_no_duplicate_warning_for_a_dag_defined_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "-o", "json") == 0
    assert "warning:" not in capsys.readouterr().err


# -- 1. rich tables must not cut ids --------------------------------------------------------------------


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize("command", ["plan", "estimates"])
def test_a_narrow_table_wraps_task_ids_instead_of_cutting_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert run_cli(command, LONG_IDS_DAG, "--file", str(long_ids_dag_file(tmp_path))) == 0
    out = capsys.readouterr().out
    assert "…" not in table_column(out, 0)
    assert table_column(out, 0) == "".join(LONG_IDS)


# -- direct unit tests of the module --------------------------------------------------------------------
@pytest.mark.parametrize(("value", "gpus"), [("1", 1), (" 3 ", 3), ("64", 64)])
def test_max_gpus_per_host_takes_a_whole_number_of_at_least_one(value: str, gpus: int) -> None:
    assert definition._host_gpus(value) == gpus


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "eight", "", "1e3"])
def test_max_gpus_per_host_refuses_what_is_no_whole_number_of_at_least_one(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        definition._host_gpus(value)
    assert str(caught.value) == f"{value!r}: give the GPUs of the largest host, a whole number >= 1"


def test_the_parser_refuses_zero_gpus_per_host_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        get_parser().parse_args(["gpu-dag", "lint", "--max-gpus-per-host", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--max-gpus-per-host" in err and "a whole number >= 1" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "d", "-o", "xml"],
        ["simulate", "d", "--objective", "fastest"],
        ["simulate", "d", "--policy", "stock"],
        ["estimates", "d", "--factor", "1,5"],
        ["simulate", "d", "--controller-interval", "5s"],
    ],
)
def test_a_bad_option_value_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        get_parser().parse_args(["gpu-dag", *argv])
    assert stop.value.code == 2
    assert argv[-2] in capsys.readouterr().err  # the option is named


def test_the_output_choices_are_the_formats_display_prints() -> None:
    assert definition.OUTPUT_FORMATS == display.OUTPUT_FORMATS
    for command in ("lint", "plan", "estimates", "simulate", "explain"):
        for output in display.OUTPUT_FORMATS:
            assert get_parser().parse_args(["gpu-dag", command, "d", "-o", output]).output == output


def test_simulate_defaults_and_repeated_options_accumulate_in_order() -> None:
    argv = ["simulate", "a", "b", "--trigger", "a=0", "--trigger", "b=1h", "--capacity", "p=1"]
    args = get_parser().parse_args(["gpu-dag", *argv, "--capacity", "q=2"])
    assert args.dag_ids == ["a", "b"] and args.triggers == ["a=0", "b=1h"] and args.capacity == ["p=1", "q=2"]
    assert (args.policy, args.objective, args.stage_length, args.controller_interval) == (
        "reservation",
        None,
        None,
        0.0,
    )
    assert (args.output, args.folder, args.gantt, args.declared_only, args.file) == (
        "table",
        None,
        None,
        False,
        None,
    )
    bare = get_parser().parse_args(["gpu-dag", "simulate"])
    assert bare.dag_ids == [] and bare.triggers is None and bare.capacity is None


def test_the_other_commands_defaults() -> None:
    parser = get_parser()
    lint = parser.parse_args(["gpu-dag", "lint"])
    assert (lint.paths, lint.pools, lint.max_gpus_per_host, lint.strict, lint.no_granularity) == (
        [],
        None,
        None,
        False,
        False,
    )
    estimates = parser.parse_args(["gpu-dag", "estimates", "d", "--factor", "2"])
    assert estimates.factor == 2.0 and estimates.file is None
    explain = parser.parse_args(["gpu-dag", "explain", "d"])
    assert (explain.run_id, explain.task, explain.conn_id) == (None, None, "gpu_dag_api")


def test_every_command_loads_a_function_that_exists() -> None:
    """The commands are imported only when they run: a wrong import path would surface only then."""
    (group,) = get_gpu_dag_cli_commands()
    for command in group.subcommands:
        path = inspect.getclosurevars(command.func).nonlocals["import_path"]
        module, _, name = path.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name, None)), path


def test_the_group_has_each_command_once() -> None:
    (group,) = get_gpu_dag_cli_commands()
    names = [c.name for c in group.subcommands]
    assert group.name == "gpu-dag"
    assert names == [c.name for c in GPU_DAG_COMMANDS] + ["watermark", "watermark-health"]
    assert len(set(names)) == len(names)


def test_the_help_listing_in_the_docs_has_every_command_with_its_help() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "cli.md").read_text()
    listing = docs.split("Positional Arguments:", 1)[1].split("Options:", 1)[0]
    (group,) = get_gpu_dag_cli_commands()
    for command in group.subcommands:
        assert command.name in listing and command.help in listing, command.name


# -- the watermark command, from a module that may be missing or broken ---------------------------------
def _watermark_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    """A module with ``body`` on ``sys.path``, standing for ``airflow_gpu_dag.cli.watermark_command``."""
    name = f"fake_watermark_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(definition, "_WATERMARK_MODULE", name)
    return name


def test_a_missing_watermark_module_gives_a_stub_that_says_to_reinstall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(definition, "_WATERMARK_MODULE", "airflow_gpu_dag.cli.no_such_watermark_module")
    command = definition._watermark_command()
    assert command.name == "watermark" and "(not available in this installation)" in command.help
    with pytest.raises(SystemExit, match="reinstall airflow-gpu-dag"):
        command.func(argparse.Namespace())
    assert definition._watermark_health_command() == ()


def test_a_broken_watermark_module_is_logged_and_the_other_commands_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    name = _watermark_module(tmp_path, monkeypatch, "raise RuntimeError('broken install')\n")
    with caplog.at_level(logging.ERROR, logger=definition.log.name):
        (group,) = get_gpu_dag_cli_commands()
    names = [c.name for c in group.subcommands]
    assert names == [c.name for c in GPU_DAG_COMMANDS] + ["watermark"]  # no health command
    assert "not available" in group.subcommands[-1].help
    assert any(name in r.getMessage() and "disabled" in r.getMessage() for r in caplog.records)


def test_a_watermark_module_with_only_its_args_gets_a_command_built_from_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = (
        "from airflow.cli.cli_config import Arg\n"
        "WATERMARK_ARGS = (Arg(('--config',), help='x'),)\n"
        "WATERMARK_HELP = 'Run the fake controller'\n"
        "def watermark(args):\n    return 'ran'\n"
    )
    _watermark_module(tmp_path, monkeypatch, body)
    command = definition._watermark_command()
    assert command.name == "watermark" and command.help == "Run the fake controller"
    assert [a.flags for a in command.args] == [("--config",)]
    assert command.func(argparse.Namespace()) == "ran"


def test_a_watermark_module_with_ready_commands_is_used_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = (
        "from airflow.cli.cli_config import ActionCommand\n"
        "WATERMARK_COMMAND = ActionCommand(name='watermark', help='w', func=print, args=())\n"
        "WATERMARK_HEALTH_COMMAND = ActionCommand(name='watermark-health', help='h', func=print, args=())\n"
    )
    name = _watermark_module(tmp_path, monkeypatch, body)
    module = sys.modules.get(name) or __import__(name)
    assert definition._watermark_command() is module.WATERMARK_COMMAND
    assert definition._watermark_health_command() == (module.WATERMARK_HEALTH_COMMAND,)
    assert isinstance(module.WATERMARK_COMMAND, ActionCommand)
