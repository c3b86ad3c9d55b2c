"""``airflow gpu-dag`` as a whole: Airflow discovers its commands and the parser has each of them; a
DAG file that prints while it is parsed (``print("loading")``) writes nothing into stdout before the
``-o json`` document, which must stay valid JSON; ``COLUMNS=0`` (what some pseudo-terminals report)
still prints every rich table and line; rich tables wrap long ids instead of cutting them with ``…``
(two DAGs or tasks would print as the same row); a DAG id two files define is a warning naming both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_gpu_dag.cli.definition import get_parser
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
