"""Tests of the benchmark scripts (``benchmarks/*.py``): workload input checks, the options that choose
what is measured, and the statistics they print. Tiny configurations only (the runs are benchmarks)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from tests.scripts import load_script


@pytest.mark.parametrize(
    ("task", "what"),
    [
        ({"id": "map_1", "d": math.nan, "gpus": 1}, "finite"),
        ({"id": "map_1", "d": math.inf, "gpus": 1}, "finite"),
        ({"id": "map_1", "d": 10.0, "gpus": 2.5}, "whole number"),
        ({"id": "map_1", "d": 10.0, "gpus": -0.5}, "whole number"),
        ({"id": "map_1", "d": 10.0, "gpus": math.inf}, "int 'gpus'"),
        ({"id": "map_1", "d": 10.0, "gpus": True}, "boolean"),
        ({"id": "map_1", "d": True, "gpus": 1}, "boolean"),
    ],
)
def test_workload_task_needs_a_finite_duration_and_a_whole_gpu_count(task: dict, what: str) -> None:
    """A NaN or infinite duration made every figure of the instance NaN or inf, and 2.5 GPUs ran as 2
    (-0.5 as a CPU task), all without a word."""
    import workloads

    with pytest.raises(workloads.WorkloadError, match=what) as caught:
        workloads.graph_from_tasks("montage-1", [task])
    assert "'montage-1'" in str(caught.value) and "map_1" in str(caught.value)


def test_workload_file_with_nan_duration_is_refused(tmp_path: Path) -> None:
    import workloads

    path = tmp_path / "w.json"
    path.write_text(json.dumps([{"name": "a/b", "tasks": [{"id": "t", "d": math.nan, "gpus": 1}]}]))
    with pytest.raises(workloads.WorkloadError, match="finite"):
        workloads.load_workloads(path)
    ok = workloads.graph_from_tasks("w", [{"id": "t", "d": 3, "gpus": 2.0}, {"id": "u", "d": 0}])
    assert ok.nodes["t"].pool_slots == 2 and ok.nodes["u"].gpu is None


@pytest.mark.parametrize("script", ["makespan", "learned_estimates"])
def test_ml_pipelines_alone_need_no_workload_file(
    script: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--sets ml_pipelines`` (a documented command) failed without ``../shared/workloads``: the WfCommons
    file was read even when its set was not run."""
    module = __import__(script)
    args = ["--sets", "ml_pipelines", "--workloads", str(tmp_path / "absent.json"), "--ml-count", "1"]
    args += ["--capacities", "32"]
    if script == "makespan":
        args += ["--policies", "stock"]
    assert module.main(args) == 0
    out = capsys.readouterr().out
    assert "| ml_pipelines | 32 |" in out and "wfinstances" not in out


@pytest.mark.parametrize("script", ["makespan", "learned_estimates"])
def test_a_misspelt_set_is_an_error(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``learned_estimates.py --sets ml-pipelines`` printed an empty table and exited 0;
    ``makespan.py --sets wfinstances,ml_pipeline`` dropped the ML pipelines without a word."""
    module = __import__(script)
    for bad in ("ml-pipelines", "wfinstances,ml_pipeline"):
        with pytest.raises(SystemExit):
            module.main(["--sets", bad, "--capacities", "8"])
        assert "use one or more of wfinstances, ml_pipelines" in capsys.readouterr().err


def test_stress_timing_p95_is_the_nearest_rank(tmp_path: Path) -> None:
    """``int(0.95 n)`` took one rank too many: of 20 calls it reported the slowest as the p95, of 400 the
    381st instead of the 380th (multi_dag.py and scheduler_loop.py use the nearest rank)."""
    stress = load_script("benchmarks/stress.py", "gpu_dag_benchmark_stress_audit2")
    path = tmp_path / "timings.txt"
    for n, p95 in ((20, 19), (400, 380), (1, 1), (100, 95)):
        path.write_text(
            "".join(f"{100 + i % 3} {v * 1e-6:.9f} 1 t{v}\n" for i, v in enumerate(range(n, 0, -1)))
        )
        summary = stress.read_timings(path, {})
        assert summary.calls == n
        assert summary.p95_us == pytest.approx(p95), n
        assert summary.max_us == pytest.approx(n)


def test_an_unknown_mix_generator_is_refused() -> None:
    """Any name but "A" drew from the held-out generator with other seeds: ``--variant b`` or ``"A, B"``
    (a space) measured mixes that are neither the tuning nor the recorded held-out ones."""
    import mixes

    for bad in ("b", " B", "C", ""):
        with pytest.raises(ValueError, match="use A \\(tuning\\) or B \\(held out\\)"):
            mixes.make_mix(0, bad)
        with pytest.raises(ValueError, match="use A"):
            mixes.triggers(mixes.make_mix(0, "B"), 8, "spread", 0, bad)
    assert mixes.make_mix(0, "B")[0].graph.dag_id.startswith("B0-")


def test_multi_dag_options_are_checked_before_any_mix_runs() -> None:
    import multi_dag

    parser = argparse.ArgumentParser()
    multi_dag.add_mix_arguments(parser)
    args = parser.parse_args(["--variant", "A, B", "--seeds", "3", "--caps", "8", "--modes", "once"])
    jobs = multi_dag.mix_jobs(args, ["stock"])
    assert [job[0] for job in jobs] == ["A", "A", "B", "B"]  # exact, uniform30 for each generator
    assert {job[4] for job in jobs} == {"exact", "uniform30"}
    with pytest.raises(SystemExit, match="--variant: mix generator 'b'"):
        multi_dag.main(["--variant", "b", "--seeds", "0", "--caps", "8", "--jobs", "1"])
    with pytest.raises(SystemExit, match=r"--estimates: 'lognormal': use exact, uniform30, lognormal30"):
        multi_dag.main(["--estimates", "exact,lognormal", "--seeds", "0", "--caps", "8", "--jobs", "1"])


def test_learned_multi_dag_refuses_an_unknown_generator_or_mode(capsys: pytest.CaptureFixture[str]) -> None:
    import learned_multi_dag

    for option, value in (("--variant", "A,b"), ("--modes", "spread,burst")):
        with pytest.raises(SystemExit):
            learned_multi_dag.main([option, value, "--seeds", "0", "--caps", "8", "--jobs", "1"])
        err = capsys.readouterr().err
        assert "use A (tuning) or B" in err or "use once, spread or spread:RHO" in err


def test_the_mixes_the_objectives_were_chosen_on_fit_their_stage_length() -> None:
    """The objectives' times were chosen on these mixes at the shipped stage length, so none of them may
    trip lint's stage-length-mismatch (their longest GPU task is 0.3-1.3 stages); the same mixes at a
    tenth of the time scale, where ``fair`` loses to stock, all do."""
    import mixes

    from airflow_gpu_dag.core.policy.objective import STAGE_LENGTH, stage_length_mismatch

    def longest(runs: list) -> float:
        return max(n.duration for r in runs for n in r.graph.nodes.values() if n.gpus > 0)

    for variant in ("A", "B"):
        for seed in range(30):
            own, tenth = mixes.make_mix(seed, variant), mixes.make_mix(seed, variant, 0.1)
            assert stage_length_mismatch(STAGE_LENGTH, longest(own)) is None
            assert stage_length_mismatch(STAGE_LENGTH, longest(tenth)) is not None


def test_a_fitted_stage_length_is_the_shipped_one_at_the_mixes_scale_and_the_longest_task_off_it() -> None:
    """``--stage-length fit`` measures what lint advises: every tuning mix keeps 6 h at its own scale (so
    its figures are the shipped ones), and at a tenth of it each mix gets its own longest GPU task."""
    import mixes
    import multi_dag

    from airflow_gpu_dag.core.policy.objective import STAGE_LENGTH

    for variant in ("A", "B"):
        for seed in range(0, 30, 3):
            own = [r.graph for r in mixes.make_mix(seed, variant)]
            tenth = [r.graph for r in mixes.make_mix(seed, variant, 0.1)]
            assert multi_dag.mix_stage_length(multi_dag.FIT, own) == STAGE_LENGTH
            longest = max(n.duration for g in tenth for n in g.nodes.values() if n.gpus > 0)
            assert multi_dag.mix_stage_length(multi_dag.FIT, tenth) == longest
            assert multi_dag.mix_stage_length(7200.0, tenth) == 7200.0


def test_the_stage_length_option_takes_hours_or_fit_and_refuses_the_rest(
    capsys: pytest.CaptureFixture,
) -> None:
    import multi_dag

    for bad, words in (("soon", "is neither hours nor 'fit'"), ("40", "a wait without bound")):
        with pytest.raises(SystemExit):
            multi_dag.main(["--stage-length", bad, "--seeds", "0", "--caps", "8", "--jobs", "1"])
        assert words in capsys.readouterr().err
    assert (
        multi_dag.main(
            [
                "--stage-length",
                "fit",
                "--time-scale",
                "0.1",
                "--seeds",
                "0",
                "--caps",
                "8",
                "--modes",
                "once",
                "--estimates",
                "exact",
                "--policies",
                "fair",
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    assert "stage length fitted to each mix" in capsys.readouterr().out


def test_a_time_scale_draws_the_same_mix_with_every_duration_scaled_and_the_triggers_follow() -> None:
    import mixes
    import multi_dag

    plain, slow = mixes.make_mix(4, "B"), mixes.make_mix(4, "B", 2.0)
    assert [r.graph.dag_id for r in plain] == [r.graph.dag_id for r in slow]
    for a, b in zip(plain, slow, strict=True):
        assert {t: 2 * n.duration for t, n in a.graph.nodes.items()} == {
            t: n.duration for t, n in b.graph.nodes.items()
        }
    a_plain, a_slow = mixes.make_mix(4, "A"), mixes.make_mix(4, "A", 2.0)
    assert mixes.triggers(a_slow, 8, "spread", 4, "A") == pytest.approx(
        [2 * t for t in mixes.triggers(a_plain, 8, "spread", 4, "A")],
        abs=1.0,  # whole seconds
    )
    # B's evaluations arrive in bursts a few minutes wide, whatever the scale
    assert mixes.triggers(slow, 8, "spread", 4, "B") == pytest.approx(
        [2 * t for t in mixes.triggers(plain, 8, "spread", 4, "B")], abs=300.0
    )
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="time scale"):
            mixes.make_mix(4, "B", bad)
    parser = argparse.ArgumentParser()
    multi_dag.add_mix_arguments(parser)
    args = parser.parse_args(["--seeds", "3", "--caps", "8", "--modes", "once", "--time-scale", "0.5"])
    assert {job[-1] for job in multi_dag.mix_jobs(args, ["stock"])} == {0.5}
    with pytest.raises(SystemExit, match=r"--time-scale: 0\.0 is not a positive number"):
        multi_dag.mix_jobs(parser.parse_args(["--time-scale", "0"]), ["stock"])
    with pytest.raises(SystemExit):
        multi_dag.main(["--stage-length", "40", "--seeds", "0", "--caps", "8", "--jobs", "1"])  # 24 x 40 h
