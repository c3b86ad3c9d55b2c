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
