"""``airflow gpu-dag`` defects found by an audit of the CLI, one test group per defect:

1. ``simulate --gantt PATH`` that cannot be written: one ``error:`` line before simulating, not a
   traceback after it (one run, ``-o json``, several runs), and a clean error when the write fails;
2. ``lint`` of a path that holds no DAG file fails and names the path;
3. ``plan``/``simulate`` of a DAG id two files define warn on stderr, naming both files;
4. ``watermark --once`` prints the pools it created (or, dry run, found missing) in its table;
5. ``-o plain`` prints its header line also when there is no row;
6. ``plan --critical-only`` counts in its title the tasks it shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.charts.gantt import GanttChart, GanttWriteError, check_gantt_path, write_gantt
from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.estimates import ESTIMATE_COLUMNS, estimates_report
from airflow_gpu_dag.cli.lint import LINT_COLUMNS
from airflow_gpu_dag.cli.watermark_command import OUTCOME_COLUMNS
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, EstimateSettings
from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook
from tests.unit.test_cli import GOOD, PIPELINE, ROOT, run_cli
from tests.unit.test_watermark_cli import ClosingRest, config
from tests.unit.test_watermark_controller import NOW, ti

CAPACITY = ("--capacity", "gpu_default=4")


@pytest.fixture(autouse=True)
def _no_configured_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``[gpu_dag] pools`` from the environment; wide lines (as in ``tests/unit/test_cli.py``)."""
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


# -- 1. simulate --gantt PATH that cannot be written ---------------------------------------------------------
def _no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any simulation fail the test: the path must be refused before simulating."""

    def simulated(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("simulated although the --gantt path cannot be written")

    monkeypatch.setattr("airflow_gpu_dag.core.planning.planner.predict", simulated)
    monkeypatch.setattr("airflow_gpu_dag.core.simulation.cross_dag.predict_runs", simulated)


@pytest.mark.parametrize(
    "extra",
    [(), ("-o", "json"), ("--trigger", f"{PIPELINE}=0", "--trigger", f"{PIPELINE}=30m")],
    ids=["table", "json", "several-runs"],
)
def test_simulate_gantt_to_a_folder_is_one_error_before_simulating(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
) -> None:
    folder = tmp_path / "x.html"
    folder.mkdir()
    _no_simulation(monkeypatch)
    argv = ("simulate", PIPELINE, "--file", str(GOOD), *CAPACITY, "--gantt", str(folder), *extra)
    assert run_cli(*argv) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == f"error: --gantt '{folder}': cannot write (it is a directory)"
    assert captured.out == ""


def test_simulate_gantt_write_failure_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An OSError when the chart is written (the path checked fine, then became a folder) is the same
    one-line error, not a traceback."""
    folder = tmp_path / "late.svg"
    folder.mkdir()
    monkeypatch.setattr("airflow_gpu_dag.charts.gantt.check_gantt_path", Path, raising=False)
    for extra in ((), ("--trigger", f"{PIPELINE}=0")):
        assert (
            run_cli("simulate", PIPELINE, "--file", str(GOOD), *CAPACITY, "--gantt", str(folder), *extra) == 1
        )
        err = capsys.readouterr().err
        assert f"error: --gantt '{folder}': cannot write (" in err and "Traceback" not in err


def test_check_gantt_path(tmp_path: Path) -> None:
    nested = tmp_path / "new" / "dir" / "chart.html"
    assert check_gantt_path(nested) == nested and not (tmp_path / "new").exists()  # nothing created
    existing = tmp_path / "old.svg"
    existing.write_text("<svg/>")
    assert check_gantt_path(str(existing)) == existing
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(GanttWriteError, match=r"cannot write \('.*file' is not a directory\)"):
        check_gantt_path(a_file / "chart.html")
    with pytest.raises(ValueError, match=r"use a file name ending in \.html or \.svg"):
        check_gantt_path(tmp_path / "chart.png")


def test_write_gantt_raises_a_clean_error_that_is_still_an_oserror(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(GanttWriteError, match=r"--gantt '.*chart\.html': cannot write \(") as info:
        write_gantt(a_file / "chart.html", [GanttChart("t")], "title")
    assert isinstance(info.value, OSError) and isinstance(info.value, ValueError)


# -- 2. lint of a path without DAG files -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["README.md", "docs"])
def test_lint_of_a_path_without_dag_files_fails(capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = str(ROOT / name)
    assert run_cli("lint", path) == 1
    captured = capsys.readouterr()
    assert f"error: path {path!r} holds no DAG file (a .py file defining a DAG" in captured.err
    assert "OK:" not in captured.out


def test_lint_names_only_the_paths_without_dag_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "helpers.py").write_text("# airflow dag helpers, no DAG here\nVALUE = 1\n")
    assert run_cli("lint", str(GOOD), str(tmp_path), "-o", "json") == 1
    captured = capsys.readouterr()
    assert f"error: path {str(tmp_path)!r} holds no DAG file" in captured.err
    assert str(GOOD) not in captured.err and captured.out == ""


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


def test_no_duplicate_warning_for_a_dag_defined_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "-o", "json") == 0
    assert "warning:" not in capsys.readouterr().err


# -- 4. watermark --once: pools created / missing in the table ----------------------------------------------
@pytest.fixture
def rest(monkeypatch: pytest.MonkeyPatch) -> ClosingRest:
    """An in-memory REST API with no pool yet (as in ``tests/unit/test_watermark_cli.py``)."""
    api = ClosingRest()
    monkeypatch.setattr(AirflowApiHook, "get_client", lambda self: api)
    monkeypatch.setattr("airflow_gpu_dag.metrics.configure", lambda force=False: None)
    api.tis = [ti("hold", "running", started=NOW - 10, duration=100)]
    return api


def test_watermark_once_table_names_the_missing_pool_in_a_dry_run(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--dry-run") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "pool gpu does not exist (dry run: would be created)"
    assert rest.pools == {}


def test_watermark_once_table_names_the_created_pool(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "created pool gpu (size 0 until the first tick)"
    assert "does not exist" not in "\n".join(lines)


# -- 5. -o plain: the header also without rows ---------------------------------------------------------------
def test_plain_lint_without_problems_prints_the_header(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("lint", str(GOOD), "--pool", "gpu_default=8", "-o", "plain") == 0
    assert capsys.readouterr().out == "\t".join(LINT_COLUMNS) + "\n"


def test_print_plain_with_columns_and_no_rows() -> None:
    import io

    out = io.StringIO()
    display.emit("plain", {}, rows=[], columns=("a", "b"), file=out)
    assert out.getvalue() == "a\tb\n"
    out = io.StringIO()
    display.print_plain([{"a": 1, "b": [2, 3]}], out, columns=("b", "a"))
    assert out.getvalue() == "b\ta\n2,3\t1\n"


def test_plain_headers_are_the_keys_of_the_rows(
    rest: ClosingRest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fixed headers match the rows each command prints (so they cannot drift apart)."""
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "-o", "plain") == 0
    assert capsys.readouterr().out.splitlines()[0].split("\t") == list(display.PLAN_COLUMNS)
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--dry-run", "-o", "json") == 0
    assert list(json.loads(capsys.readouterr().out)["pools"][0]) == list(OUTCOME_COLUMNS)
    estimate = DurationEstimate("t", declared=60.0, fallback=60.0)
    report = estimates_report("d", {"t": estimate}, EstimateSettings(), 1.5)
    assert list(report["tasks"][0]) == list(ESTIMATE_COLUMNS)
    assert run_cli("lint", str(ROOT / "tests" / "fixtures" / "dags_broken"), "-o", "plain") == 1
    assert capsys.readouterr().out.splitlines()[0].split("\t") == list(LINT_COLUMNS)


# -- 6. plan --critical-only: the title counts what is shown ------------------------------------------------
def test_plan_critical_only_title_counts_the_tasks_shown(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "--critical-only") == 0
    out = capsys.readouterr().out
    assert f"Plan of DAG {PIPELINE!r} (5 of 13 tasks, critical path only)" in out
    assert "(13 tasks)" not in out
    assert run_cli("plan", PIPELINE, "--file", str(GOOD)) == 0
    assert f"Plan of DAG {PIPELINE!r} (13 tasks)" in capsys.readouterr().out
