"""The real-scheduler makespan benchmark's plan error, on made-up runs (the benchmark itself boots a real
Airflow; its figures are in docs/benchmarks/real_airflow.md)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

ORIGIN = 1_800_000_000.0

pytestmark = pytest.mark.usefixtures("benchmarks_on_path")


def _run(times: dict[str, tuple[float, float]], tasks: list[dict[str, Any]]) -> Any:
    """A finished run as ``Run`` holds it: task instances as REST returns them, times from ``ORIGIN``."""
    tis = [
        {
            "dag_id": "bench_provider",
            "dag_run_id": "r",
            "task_id": t["id"],
            "map_index": -1,
            "pool": "gpu" if t["gpus"] else "default_pool",
            "pool_slots": max(1, t["gpus"]),
            "priority_weight": 1000 - i,
            "logical_date": "2026-01-01T00:00:00+00:00",
        }
        for i, t in enumerate(tasks)
    ]
    absolute = {k: (ORIGIN + s, ORIGIN + e) for k, (s, e) in times.items()}
    return SimpleNamespace(tis=tis, times=absolute, origin=ORIGIN)


def test_the_plan_error_is_zero_for_a_run_as_planned_and_measures_a_late_start() -> None:
    import real_airflow_makespan as bench

    tasks = [
        {"id": "prep", "d": 3, "gpus": 1, "parents": []},
        {"id": "pretrain", "d": 12, "gpus": 4, "parents": ["prep"]},
        {"id": "report", "d": 1, "gpus": 0, "parents": ["pretrain"]},
    ]
    as_planned = {"prep": (0.0, 3.0), "pretrain": (3.0, 15.0), "report": (15.0, 16.0)}
    exact = bench.plan_error(_run(as_planned, tasks), tasks, 4, 0.0, False)
    assert exact["tasks"] == 2  # the GPU tasks only
    assert exact["start_error_s"] == {"median": 0.0, "p90": 0.0}
    assert exact["end_error_s"] == {"median": 0.0, "p90": 0.0}

    late = {"prep": (0.0, 3.0), "pretrain": (10.0, 22.0), "report": (22.0, 23.0)}
    error = bench.plan_error(_run(late, tasks), tasks, 4, 0.0, False)
    assert error["start_error_s"] == {"median": 0.0, "p90": 7.0}
    assert error["end_error_s"] == {"median": 0.0, "p90": 7.0}
    longer = bench.plan_error(
        _run(late, tasks), tasks, 4, 0.0, False, {"prep": 3, "pretrain": 19, "report": 1}
    )
    assert longer["end_error_s"]["p90"] == 0.0  # planned with the durations it took: the start is still late
    assert longer["start_error_s"]["p90"] == 7.0
