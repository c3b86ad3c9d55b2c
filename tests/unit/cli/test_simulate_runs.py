"""``airflow gpu-dag simulate`` with several runs, the Gantt chart and the hints helpers, one test group
per case:

1. a ``--trigger`` offset too large for a date (``gpu_pipeline=5000000d``, ``=1e300``) is a one-line
   error like any malformed offset, not an ``OverflowError`` traceback;
2. ``simulate --objective latency`` with no DAG id, folder or trigger is an error, not empty tables and
   exit 0;
3. Gantt labels are not cut at their end: task ids sharing a long prefix (mapped instances ``...[0]``,
   ``...[1]``; ``0:dag/task`` of several runs) would get the same label;
4. ``duration_hint`` does not read an infinite or boolean ``duration_s`` as a duration (inf, 1.0)."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.cli.simulate_runs import parse_triggers
from tests.unit.cli.conftest import (
    GOOD,
    PIPELINE,
    run_cli,
)

#: Every test runs with no configured pools and wide lines.
pytestmark = pytest.mark.usefixtures("_no_configured_pools")


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
