"""``benchmarks/planner_cost.py --scale``: how it times the sizes and what it writes (the full runs are
benchmarks; figures in docs/benchmarks/plan_speed.md)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

pytestmark = pytest.mark.usefixtures("benchmarks_on_path")


def _fake_jobs(
    monkeypatch: pytest.MonkeyPatch, seconds: Callable[[int, str, int], float]
) -> list[tuple[int, str]]:
    """Replace the timed work by ``seconds(tasks, column, call)`` CPU seconds; returns the calls made,
    in order, as ``(tasks, column)``."""
    import planner_cost

    calls: list[tuple[int, str]] = []

    def job(tasks: int, column: str) -> tuple[int, str]:
        return tasks, column

    def jobs(tasks: int) -> dict[str, Callable[[], object]]:
        return {column: functools.partial(job, tasks, column) for column in planner_cost.SCALE_COLUMNS}

    def timed(func: Callable[[], object]) -> tuple[float, float]:
        tasks, column = cast(tuple[int, str], func())
        calls.append((tasks, column))
        value = seconds(tasks, column, calls.count((tasks, column)))
        return value, value

    monkeypatch.setattr(planner_cost, "scale_jobs", jobs)
    monkeypatch.setattr(planner_cost, "_timed", timed)
    return calls


def test_each_round_times_every_size_and_each_size_keeps_its_best_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slow spell of the machine falls on one round of every size, not on every run of the sizes
    timed while it lasted: the rounds go through all sizes in turn, and the least CPU of each wins."""
    import planner_cost

    slow = {(2000, 2)}  # the second round of 2,000 tasks ran in a slow spell
    calls = _fake_jobs(
        monkeypatch, lambda tasks, column, k: tasks / 1000 * (3.0 if (tasks, k) in slow else 1.0 + k / 100)
    )
    rows = planner_cost.scale_rows([1000, 2000], 3)
    columns = list(planner_cost.SCALE_COLUMNS)
    assert [tasks for tasks, _ in calls] == [n for _ in range(3) for n in (1000, 2000) for _c in columns]
    assert all(rows[n][c] == pytest.approx((n / 1000 * 1.01,) * 2) for n in (1000, 2000) for c in columns)


def test_the_plot_draws_every_column_with_its_fitted_exponent_beside_n_log_n(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import planner_cost

    _fake_jobs(monkeypatch, lambda tasks, column, k: tasks / 1000 * (2.0 if column == "plan60" else 1.0))
    out = tmp_path / "curve.svg"
    assert (
        planner_cost.main(["--scale", "--sizes", "1000,2000,4000,8000", "--repeat", "1", "--plot", str(out)])
        == 0
    )
    svg = out.read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count("<polyline") == len(planner_cost.SCALE_COLUMNS) + 1  # and the n log n line
    assert "n log n (dashed)" in svg and "exponent 1.13" in svg  # n log n over 1,000-8,000 tasks
    assert "plan, 60-s controller" in svg and "exponent 1.00" in svg  # the fake costs grow linearly
    printed = capsys.readouterr().out
    assert "| 8,000 | 8.00 (8.00) | 16.00 (16.00) |" in printed and "plan, 60-s controller 1.00" in printed


def test_the_plot_leaves_out_a_time_too_short_to_measure() -> None:
    import planner_cost

    curves = {column: [0.5, 1.0] for column in planner_cost.SCALE_COLUMNS}
    curves["sim60"] = [0.0, 0.2]  # a process-time reading of 0 has no place on a log axis
    svg = planner_cost.curve_svg([1000, 2000], curves)
    assert svg.count("<circle") == 2 * len(curves) - 1 and "exponent nan" in svg
