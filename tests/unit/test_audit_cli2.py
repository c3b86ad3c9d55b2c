"""``airflow gpu-dag`` defects found by a fourth audit of the CLI:

1. a DAG file that prints while it is parsed (``print("loading")``) wrote into stdout, before the
   ``-o json`` document of ``lint``, ``plan``, ``estimates`` and ``simulate``: no longer valid JSON;
2. ``watermark --once`` exited 0 when its tick failed (pools or task instances unreadable, a pool not
   written): a script or a configuration check saw success;
3. ``COLUMNS=0`` (what some pseudo-terminals report): every rich table and line vanished, exit code 0;
4. ``watermark --heartbeat-file`` that can never be written (a folder, a path under a file) was accepted:
   every tick logged an error and ``watermark-health`` reported a live controller as dead;
5. ``estimates`` with ``[gpu_dag] learned_quantile = 0.995`` labelled its column ``p100`` (the maximum);
6. the several-runs table of ``simulate`` cut long DAG ids with ``…``: two DAGs printed as the same row.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from airflow_gpu_dag.cli import display
from airflow_gpu_dag.cli.estimates import estimates_table
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, EstimateSettings
from tests.unit.test_cli import run_cli
from tests.unit.test_cli_audit3 import table_column
from tests.unit.test_watermark_cli import ClosingRest, config, rest  # noqa: F401 - the fixture

_DAG = """\
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow_gpu_dag import gpu_hints
{prelude}
with DAG("{dag_id}", schedule=None):
    EmptyOperator(task_id="prepare", executor_config=gpu_hints(duration="30m"))
"""


@pytest.fixture(autouse=True)
def _settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


def _dag_file(folder: Path, dag_id: str, prelude: str = "") -> Path:
    path = folder / f"{dag_id}.py"
    path.write_text(_DAG.format(dag_id=dag_id, prelude=prelude))
    return path


# -- 1. a DAG file's print() must not corrupt the JSON output -------------------------------------------
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


# -- 2. watermark --once: a failed tick is exit code 1 ----------------------------------------------------
@pytest.mark.parametrize("dry_run", [True, False])
def test_watermark_once_exits_1_when_its_tick_failed(
    rest: ClosingRest,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    dry_run: bool,
) -> None:
    rest.ti_error = RuntimeError("api-server unreachable")
    argv = ["watermark", "--config", config(tmp_path), "--once", "-o", "json"]
    assert run_cli(*argv, *(["--dry-run"] if dry_run else [])) == 1
    captured = capsys.readouterr()
    (pool,) = json.loads(captured.out)["pools"]  # the output still says what happened to every pool
    assert pool["action"] == "error" and "api-server unreachable" in pool["error"]
    assert "the tick failed for 1 pool(s): gpu (task instances: api-server unreachable)" in captured.err


def test_watermark_once_exits_0_when_its_tick_worked(
    rest: ClosingRest,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_cli("watermark", "--config", config(tmp_path), "--once", "--dry-run", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["pools"][0]["error"] is None


# -- 3. COLUMNS=0 ---------------------------------------------------------------------------------------
def test_columns_zero_still_prints_the_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "0")
    path = _dag_file(tmp_path, "plain_dag")
    assert run_cli("plan", "plain_dag", "--file", str(path)) == 0
    out = capsys.readouterr().out
    assert "Plan of DAG 'plain_dag'" in out and "prepare" in out and "Critical path" in out


class _Terminal(io.StringIO):
    """A terminal whose size cannot be asked (a pseudo-terminal that reports none)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("columns", "tty", "width"), [("0", False, 200), ("0", True, 80), ("120", True, 120)]
)
def test_console_width_ignores_a_columns_of_zero(
    monkeypatch: pytest.MonkeyPatch, columns: str, tty: bool, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert display.console(_Terminal() if tty else io.StringIO()).width == width


# -- 4. watermark --heartbeat-file that can never be written ----------------------------------------------
@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_watermark_refuses_a_heartbeat_file_it_cannot_write(
    rest: ClosingRest,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    if where == "folder":
        heartbeat = tmp_path / "beats"
        heartbeat.mkdir()
    else:
        (tmp_path / "a_file").write_text("x")
        heartbeat = tmp_path / "a_file" / "heartbeat.json"
    argv = ["watermark", "--config", config(tmp_path), "--once", "--heartbeat-file", str(heartbeat)]
    assert run_cli(*argv) == 1
    err = capsys.readouterr().err
    assert f"--heartbeat-file {str(heartbeat)!r}: cannot write" in err
    assert rest.writes == [] and rest.pools == {}  # refused before the start-up check made any pool


def test_watermark_makes_the_heartbeat_files_folder(
    rest: ClosingRest,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    heartbeat = tmp_path / "run" / "gpu-dag" / "heartbeat.json"
    argv = ["watermark", "--config", config(tmp_path), "--once", "--heartbeat-file", str(heartbeat)]
    assert run_cli(*argv) == 0
    assert json.loads(heartbeat.read_text())["last_tick"] is not None


# -- 5. the quantile column of estimates -------------------------------------------------------------------
@pytest.mark.parametrize(("quantile", "label"), [(0.9, "p90"), (0.995, "p99.5"), (0.999, "p99.9")])
def test_estimates_table_names_the_quantile_it_shows(quantile: float, label: str) -> None:
    settings = EstimateSettings(quantile=quantile)
    estimate = DurationEstimate("train", declared=600.0, fallback=600.0)
    table = estimates_table("d", {"train": estimate}, settings, 1.5)
    assert [name for name, _ in table.columns][3] == label


# -- 6. several runs: long DAG ids are wrapped, not cut ---------------------------------------------------
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
