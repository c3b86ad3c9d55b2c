"""Defects found by an audit of ``airflow gpu-dag simulate`` with several runs, the Gantt chart and the
hints helpers, one test group per defect:

1. a ``--trigger`` offset too large for a date (``gpu_pipeline=5000000d``, ``=1e300``) ended in an
   ``OverflowError`` traceback; it is a one-line error like any malformed offset;
2. ``simulate --objective latency`` with no DAG id, folder or trigger printed empty tables and exit 0;
3. Gantt labels cut at their end: task ids sharing a long prefix (mapped instances ``...[0]``,
   ``...[1]``; ``0:dag/task`` of several runs) got the same label;
4. ``duration_hint`` read an infinite or boolean ``duration_s`` as a duration (inf, 1.0).
"""

from __future__ import annotations

import pytest

from airflow_gpu_dag.charts.gantt import GanttBar, GanttChart, render_svg
from airflow_gpu_dag.cli.simulate_runs import parse_triggers
from airflow_gpu_dag.executor_config import duration_hint
from tests.unit.test_cli import GOOD, PIPELINE, run_cli


@pytest.fixture(autouse=True)
def _no_configured_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


# -- 1. a trigger offset too large for a date ----------------------------------------------------------------
@pytest.mark.parametrize("offset", ["5000000d", "1e300", "367d"])
def test_a_trigger_offset_past_a_year_is_one_error(offset: str) -> None:
    with pytest.raises(ValueError, match="expected DAG_ID=OFFSET") as caught:
        parse_triggers([f"{PIPELINE}={offset}"])
    assert "at most 366 days" in str(caught.value)


def test_a_huge_trigger_offset_is_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("simulate", "--file", str(GOOD), "--capacity", "gpu_default=4", "--declared-only")
    assert run_cli(*argv, "--trigger", f"{PIPELINE}=5000000d") == 1  # was an OverflowError
    assert "at most 366 days" in capsys.readouterr().err
    assert [r.offset for r in parse_triggers([f"{PIPELINE}=366d", f"{PIPELINE}=1h30m"])] == [
        366 * 86400.0,
        5400.0,
    ]


# -- 2. no DAG to simulate -----------------------------------------------------------------------------------
def test_simulate_with_only_an_objective_asks_for_a_dag(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("simulate", "--file", str(GOOD), "--objective", "latency") == 1
    assert "give a DAG id" in capsys.readouterr().err


# -- 3. Gantt labels of long task ids ------------------------------------------------------------------------
def test_long_task_ids_keep_distinct_labels() -> None:
    ids = [f"fine_tune_llama_70b_on_customer_data[{i}]" for i in range(3)]
    ids += ["0:nightly_training_pipeline_v2/evaluate", "0:nightly_training_pipeline_v2/train"]
    svg = render_svg([GanttChart("t", [GanttBar(t, i, i + 1.0) for i, t in enumerate(ids)])])
    labels = [part.split("<")[0] for part in svg.split('class="gantt-label">')[1:]]
    assert len(labels) == len(ids) == len(set(labels))
    assert all(len(label) <= 34 for label in labels)
    assert any(label.endswith("[2]") for label in labels)


# -- 4. duration_hint of an infinite or boolean duration ----------------------------------------------------
@pytest.mark.parametrize("raw", [float("inf"), "inf", "1e999", True])
def test_duration_hint_refuses_what_is_no_duration(raw: object) -> None:
    assert duration_hint({"gpu_dag": {"duration_s": raw}}) is None
    assert duration_hint(str({"gpu_dag": {"duration_s": str(raw)}})) is None


def test_duration_hint_reads_a_valid_duration() -> None:
    assert duration_hint({"gpu_dag": {"duration_s": 5400.0}}) == 5400.0
    assert duration_hint(str({"gpu_dag": {"duration_s": 0}})) == 0.0
