"""The many-DAG benchmark scripts run end to end on a couple of mixes and print what they promise
(the full runs are benchmarks; figures in docs/benchmarks/)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(autouse=True)
def _on_path() -> Iterator[None]:
    sys.path.insert(0, str(BENCHMARKS))
    yield
    sys.path.remove(str(BENCHMARKS))


def test_multi_dag_prints_ratios_per_capacity_and_kind(capsys: pytest.CaptureFixture[str]) -> None:
    import multi_dag

    code = multi_dag.main(
        ["--seeds", "0-1", "--caps", "8", "--modes", "once", "--estimates", "exact", "--jobs", "1"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "| A | once | exact | 8 | balanced |" in out


def test_learned_multi_dag_recovers_most_of_the_exact_gain(capsys: pytest.CaptureFixture[str]) -> None:
    import learned_multi_dag

    instance = learned_multi_dag.one_instance(("A", 3, 8, "once", "balanced", 0.3, 5, 0.1, 60.0))
    stock, exact = instance["figures"]["stock"][0], instance["figures"]["exact"][0]
    assert exact < stock  # all at once on 8 GPUs: the policy shortens the mean completion
    code = learned_multi_dag.main(["--variant", "A", "--seeds", "0-1", "--caps", "8", "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "| 8 | 4 |" in out and "recovered, mean completion" in out


def test_makespan_target_below_the_lower_bound_is_marked_unreachable() -> None:
    import multi_dag

    def instance(lower_bound: float, stock: float) -> dict[str, object]:
        return {"lower_bound": lower_bound, "results": {"stock": {"makespan": stock}}}

    # stock within 2 % and 4 % of the lower bound: no schedule beats stock by more than that on average
    best = multi_dag.best_makespan([instance(98.0, 100.0), instance(96.0, 100.0)])
    assert best == pytest.approx(0.97)
    figures = {"mean": 0.8, "makespan": 0.99, "p95": 0.99, "pipeline": 1.0, "sweep": 1.0, "eval": 0.7}
    assert multi_dag.misses(8, figures, best) == ["makespan (unreachable: best 0.970)"]
    assert multi_dag.misses(8, figures, 0.90) == ["makespan"]  # reachable in principle: a plain miss
    assert multi_dag.misses(8, {**figures, "makespan": 0.94}, best) == []
