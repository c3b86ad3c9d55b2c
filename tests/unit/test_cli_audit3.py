"""``airflow gpu-dag`` defects found by a third audit of the CLI (plan, lint, estimates, watermark):

1. rich tables cut long ids with ``…``: two tasks whose ids share their first characters printed as
   two identical rows (``plan``, ``lint``'s findings, ``estimates``); a cell is now wrapped, never cut;
2. ``watermark --health-port`` on a port in use: a traceback, after the pools had been created at size 0.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook
from tests.unit.test_cli import run_cli
from tests.unit.test_watermark_cli import ClosingRest, config

_LONG = "preprocessing_stage_for_the_large_language_model_training_shard_"
_IDS = (f"{_LONG}alpha", f"{_LONG}bravo")
_DAG = "long_ids_dag"


@pytest.fixture(autouse=True)
def _settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


# -- 1. rich tables must not cut ids --------------------------------------------------------------------
def _long_ids(folder: Path) -> Path:
    path = folder / "long_ids.py"
    tasks = "\n".join(
        f'    EmptyOperator(task_id="{task_id}", pool="gpu_default", '
        'executor_config=gpu_hints(duration="5m", gpus=1))'
        for task_id in _IDS
    )
    path.write_text(
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        "from airflow.sdk import DAG\n"
        "from airflow_gpu_dag import gpu_hints\n"
        f'with DAG("{_DAG}", schedule=None):\n{tasks}\n'
    )
    return path


def table_column(out: str, index: int, table: int = 0) -> str:
    """The cells of column ``index`` of the ``table``-th table in ``out`` (as printed in a pipe: a line
    of dashes under the header), joined in order (a wrapped cell's lines join back into its text; rows
    follow each other). The dashes give each column's span; a row has blanks between the spans."""
    lines = out.splitlines()
    underlines = [n for n, line in enumerate(lines) if line.startswith("-") and set(line) <= {"-", " "}]
    first = underlines[table]
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[first])]
    parts = []
    for line in lines[first + 1 :]:
        if not line.strip() or any(line[end : end + 1] not in ("", " ") for _, end in spans[:-1]):
            break  # the table ended: an empty line, or text across the gaps between columns
        start, end = spans[index]
        parts.append(line[start : end + 1].strip())
    return "".join(parts)


@pytest.mark.parametrize("command", ["plan", "estimates"])
def test_a_narrow_table_wraps_task_ids_instead_of_cutting_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert run_cli(command, _DAG, "--file", str(_long_ids(tmp_path))) == 0
    out = capsys.readouterr().out
    assert "…" not in table_column(out, 0)
    assert table_column(out, 0) == "".join(_IDS)


def test_a_narrow_lint_table_wraps_codes_dags_and_tasks_instead_of_cutting_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert run_cli("lint", str(_long_ids(tmp_path)), "--no-granularity") == 0
    out = capsys.readouterr().out
    # one finding: the GPU tasks are on a stock weight rule
    assert [table_column(out, i) for i in (1, 2, 3)] == ["incomparable-priority", _DAG, _IDS[0]]


# -- 2. watermark --health-port on a port in use --------------------------------------------------------
@pytest.fixture
def rest(monkeypatch: pytest.MonkeyPatch) -> ClosingRest:
    """An in-memory REST API with no pool: what the start-up check creates shows in ``pools``."""
    api = ClosingRest()
    monkeypatch.setattr(AirflowApiHook, "get_client", lambda self: api)
    monkeypatch.setattr("airflow_gpu_dag.metrics.configure", lambda force=False: None)
    return api


def test_watermark_health_port_in_use_is_one_line_before_touching_pools(
    rest: ClosingRest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--health-port`` on a port another process holds: an OSError traceback after the start-up check
    had created the pools at size 0; now one line, and no pool created."""

    def run_forever(*args: Any) -> None:
        raise AssertionError("the controller started although its health port is taken")

    monkeypatch.setattr("airflow_gpu_dag.cli.watermark_command._run_forever", run_forever)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = run_cli("watermark", "--config", config(tmp_path), "--health-port", str(port))
    assert code == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"airflow gpu-dag watermark: --health-port {port}: cannot serve /health on ")
    assert f"127.0.0.1:{port}" in last and "Traceback" not in err
    assert rest.pools == {} and rest.writes == []
    assert rest.closed
