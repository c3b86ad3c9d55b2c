"""``benchmarks/real_airflow_multi_dag.py --orders``: the search over orders of the mix that boots no
Airflow (the real runs are the benchmark; figures in docs/benchmarks/multi_dag.md)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("benchmarks_on_path")


def _tiny() -> tuple[dict, dict]:
    import real_airflow_multi_dag as real

    the_mix = real.mix(2, 2, 1)  # pipeline, a 2-trial sweep, one evaluation on 2 GPUs
    return the_mix, real.offsets(list(the_mix))


def test_every_run_order_and_the_sampled_task_orders_are_simulated_both_ways() -> None:
    import real_airflow_multi_dag as real

    the_mix, when = _tiny()
    outcomes = real.order_outcomes(the_mix, when, 2, 2.0, samples=5)
    by_runs = [o for o in outcomes if o.how == "runs"]
    assert len(by_runs) == 6 * 2 and len(outcomes) == (6 + 5) * 2  # 3! run orders, 5 task orders
    assert {o.order for o in by_runs} == {
        ("pipeline", "sweep", "eval_0"),
        ("pipeline", "eval_0", "sweep"),
        ("sweep", "pipeline", "eval_0"),
        ("sweep", "eval_0", "pipeline"),
        ("eval_0", "pipeline", "sweep"),
        ("eval_0", "sweep", "pipeline"),
    }
    assert sum(o.reserved for o in outcomes) == len(outcomes) // 2
    # the sweep ends soonest when it goes first, and the evaluation when it does
    first = {name: min(o.sweep for o in by_runs if o.order[0] == name) for name in the_mix}
    assert first["sweep"] == min(o.sweep for o in outcomes) < first["eval_0"]
    assert all(o.sweep > 0 and o.mean > 0 and o.makespan > 0 for o in outcomes)


def test_the_climb_follows_the_search_and_keeps_only_steps_that_score_no_worse() -> None:
    import itertools
    import random

    import real_airflow_multi_dag as real

    the_mix, when = _tiny()
    searched = real.order_outcomes(the_mix, when, 2, 2.0, samples=5, climb=20)
    assert [o.how for o in searched[-40:]] == ["climb"] * 40  # 20 steps, each reserved for and not
    assert searched[:-40] == real.order_outcomes(the_mix, when, 2, 2.0, samples=5)  # after the same search

    target = {"a": 300.0, "b": 200.0, "c": 100.0}

    def distance(keys: dict) -> float:
        return sum(abs(keys[k] - target[k]) for k in target)

    start = {"a": 0.0, "b": 500.0, "c": 1000.0}
    best, path = real.hill_climb(start, distance(start), distance, 400, random.Random(1))
    assert len(path) == 400 and all(x >= y for x, y in itertools.pairwise(path))
    assert path[-1] == distance(best) < distance(start) / 4


def test_frontier_counts_the_orders_meeting_every_target_and_the_best_of_each() -> None:
    import real_airflow_multi_dag as real

    def outcome(sweep: float, mean: float, makespan: float) -> real.OrderOutcome:
        return real.OrderOutcome("runs", False, ("a",), sweep, mean, makespan)

    fast_sweep, fast_mean, all_met = (
        outcome(1.0, 0.95, 0.99),
        outcome(1.30, 0.80, 1.0),
        outcome(1.1, 0.85, 1.0),
    )
    long = outcome(1.0, 0.70, 1.01)  # a makespan over stock's: never the best of anything
    frontier = real.order_frontier([fast_sweep, fast_mean, long])
    assert frontier["simulated"] == 3 and frontier["meeting_every_target"] == 0
    assert frontier["best_mean_with_sweep_and_makespan"] is fast_sweep
    assert frontier["best_sweep_with_mean_and_makespan"] is fast_mean
    assert all_met.excess == 0 and real.order_frontier([all_met, long])["meeting_every_target"] == 1
    assert fast_mean.excess == pytest.approx(0.20)


def test_orders_flag_prints_the_frontier_without_booting(capsys: pytest.CaptureFixture[str]) -> None:
    import real_airflow_multi_dag as real

    code = real.main(["--orders", "2", "--capacity", "2", "--trials", "2", "--evals", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "simulated: 16; meeting every target:" in out  # (3! + 2) orders, each reserved for and not
    assert "best mean with the sweep and the makespan met:" in out
    assert "the provider's keys (predicted): sweep" in out


@pytest.mark.parametrize("name", ["fair", "balanced"])
def test_the_scheduler_is_told_the_stage_length_of_the_mix_and_reads_back_every_time_scaled(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mix's stages last seconds: ``[gpu_dag] stage_length`` = 6 h / 1200 scales every time of the
    objective, the due cap included, and the prediction reads the same objective back; a time given on
    the command line overrides that one alone."""
    import argparse

    import real_airflow_multi_dag as real

    from airflow_gpu_dag.core.policy.objective import OBJECTIVES

    for option in ("STAGE_LENGTH", "RESERVATION_GAP", "RESERVATION_OVERDUE", "DESCENDANT_UNIT"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)
    args = argparse.Namespace(capacity=4, objective=name, gap=None, overdue=None, descendant_unit=None)
    env = real.settings_env(args)
    assert env["AIRFLOW__GPU_DAG__STAGE_LENGTH"] == "18s"
    assert not {"AIRFLOW__GPU_DAG__RESERVATION_GAP", "AIRFLOW__GPU_DAG__DESCENDANT_UNIT"} & set(env)
    assert real.scaled_objective(args) == OBJECTIVES[name].for_stage(18.0)
    args.gap = 50.0
    assert real.scaled_objective(args).gap == 50.0
    assert real.scaled_objective(args).overdue == OBJECTIVES[name].overdue / 1200
