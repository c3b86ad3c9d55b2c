"""Tests of ``airflow_gpu_dag.cli.simulate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.cli.conftest import (
    GOOD,
    ONE_RUN,
    PIPELINE,
    SEVERAL_RUNS,
    fake_history,
    run_cli,
    run_json,
    two_pools_dag_file,
    write_sweep,
)


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize("argv", [ONE_RUN, SEVERAL_RUNS], ids=["one run", "several runs"])
def test_simulate_yaml_is_its_json(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert run_cli(*argv, "-o", "json") == 0
    as_json = json.loads(capsys.readouterr().out)
    assert run_cli(*argv, "-o", "yaml") == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_plain_is_one_row_per_task_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(*ONE_RUN, "-o", "plain") == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split("\t") == [
        "policy", "task_id", "critical", "start_s", "end_s", "wait_s", "slots", "pool", "priority"
    ]  # fmt: skip
    rows = [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]
    assert {r["policy"] for r in rows} == {"stock", "reservation"}
    assert len(rows) == 2 * 13  # the pipeline's 13 tasks under each policy
    train = next(r for r in rows if r["policy"] == "reservation" and r["task_id"] == "train")
    assert (train["critical"], train["slots"], train["pool"]) == ("True", "4", "gpu_default")
    assert float(train["end_s"]) > float(train["start_s"])


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_several_runs_plain_is_one_row_per_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(*SEVERAL_RUNS, "-o", "plain") == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split("\t")[:3] == ["run", "dag_id", "trigger_offset_s"]
    rows = [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]
    assert [(r["run"], r["trigger_offset_s"], r["objective"]) for r in rows] == [
        ("1", "0.0", "latency"),
        ("2", "1200.0", "latency"),
    ]


# -- learned durations: estimates and plan ------------------------------------------------------------


# -- simulate --------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_json_and_gantt(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    gantt = tmp_path / "out.html"
    code, data = run_json(
        capsys,
        "simulate",
        PIPELINE,
        "--file",
        str(GOOD),
        "--capacity",
        "gpu_default=4",
        "--gantt",
        str(gantt),
    )
    assert code == 0
    assert set(data["results"]) == {"stock", "reservation"}
    for result in data["results"].values():
        schedule = {t["task_id"]: t for t in result["schedule"]}
        assert len(schedule) == 13
        assert result["makespan"] >= result["lower_bound"] >= 3.5 * 3600
        assert schedule["train"]["slots"] == 4
        # dependencies hold and the 4-GPU pool is never oversubscribed
        assert schedule["train"]["start"] >= schedule["preprocess"]["end"]
        events = sorted({t["start"] for t in schedule.values()})
        for moment in events:
            held = sum(
                t["slots"]
                for t in schedule.values()
                if t["pool"] == "gpu_default" and t["start"] <= moment < t["end"]
            )
            assert held <= 4
    text = gantt.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert text.count('class="gantt-bar critical"') == 2 * 5
    assert text.count('class="gantt-bar') == 2 * 13


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_table_and_svg(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    svg = tmp_path / "g.svg"
    code = run_cli(
        "simulate", PIPELINE, "--file", str(GOOD), "--capacity", "gpu_default=4", "--gantt", str(svg)
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "Predicted makespan" in out and "stock" in out and "reservation" in out
    assert f"Gantt chart written to {svg}" in out
    assert svg.read_text().startswith("<svg")


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--capacity", "gpu_x=4"], "pool(s) gpu_x not used by DAG 'gpu_pipeline'"),
        ([], "GPU pool(s) gpu_default of DAG 'gpu_pipeline' have no capacity"),
        (["--capacity", "gpu_default=2"], "task 'train' needs 4 slots of pool 'gpu_default'"),
        (["--capacity", "gpu_default=4", "--gantt", "chart.png"], "use a file name ending in .html or .svg"),
        (["--capacity", "gpu_default"], "expected NAME=SLOTS"),
        (["--capacity", "gpu_default=4", "--controller-interval", "-5"], "seconds >= 0"),
        (["--capacity", "gpu_default=4", "--controller-interval", "nan"], "seconds >= 0"),
        (["--capacity", "gpu_default=4", "--controller-interval", "inf"], "finite seconds"),
    ],
)
def test_simulate_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert run_cli("simulate", PIPELINE, "--file", str(GOOD), *argv) == 1
    assert message in capsys.readouterr().err


# -- simulate several runs -------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_several_runs_json(capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of one DAG, 20 minutes apart, on 4 GPUs: per-run completion, mean, p95, makespan."""
    code, result = run_json(
        capsys,
        "simulate",
        "--file",
        str(GOOD),
        "--trigger",
        f"{PIPELINE}=0",
        "--trigger",
        f"{PIPELINE}=20m",
        "--capacity",
        "gpu_default=4",
        "--objective",
        "latency",
        "--controller-interval",
        "60",
    )
    assert code == 0
    assert [r["trigger_offset_s"] for r in result["runs"]] == [0.0, 1200.0]
    assert result["objective"]["name"] == "latency" and result["capacity"] == {"gpu_default": 4}
    assert (
        result["objective"]["descendant_unit_s"] == 0
        and result["objective"]["reservation_overdue_s"] == 43200
        and result["objective"]["stage_length_s"] == 6 * 3600
    )
    for label in ("stock", "latency"):
        completions = [r[f"{label}_completion_s"] for r in result["runs"]]
        summary = result["summary"][label]
        assert summary["mean_completion_s"] == pytest.approx(sum(completions) / 2)
        assert summary["p95_completion_s"] == max(completions)
        assert summary["makespan_s"] >= 1200.0 + min(completions)


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_at_another_stage_length_scales_every_time_of_the_objective(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--stage-length`` stands for ``[gpu_dag] stage_length`` in this simulation (one DAG with it is
    one run of the cross-DAG policy): the objective's times scale with it, a single time set in the
    settings stays as set; ``--objective`` alone takes the pool's stage length; a bad stage is refused
    with the option named."""
    common = ("simulate", PIPELINE, "--file", str(GOOD), "--capacity", "gpu_default=4")
    code, result = run_json(capsys, *common, "--stage-length", "20m")
    assert code == 0 and len(result["runs"]) == 1
    fair = result["objective"]
    assert (fair["name"], fair["stage_length_s"], fair["descendant_unit_s"], fair["gap_s"]) == (
        "fair",
        1200,
        1200,
        16 * 1200,
    )
    monkeypatch.setenv("AIRFLOW__GPU_DAG__RESERVATION_GAP", "1h")  # a single time stays as set
    code, result = run_json(capsys, *common, "--stage-length", "20m")
    assert (result["objective"]["gap_s"], result["objective"]["descendant_unit_s"]) == (3600, 1200)
    # naming the pool's own objective changes nothing; another one is as shipped (the 1 h was for fair)
    code, result = run_json(capsys, *common, "--stage-length", "20m", "--objective", "fair")
    assert (result["objective"]["gap_s"], result["objective"]["descendant_unit_s"]) == (3600, 1200)
    code, result = run_json(capsys, *common, "--stage-length", "20m", "--objective", "balanced")
    assert (result["objective"]["name"], result["objective"]["gap_s"]) == ("balanced", 8 * 1200 / 6)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__RESERVATION_GAP")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__STAGE_LENGTH", "3h")
    code, result = run_json(capsys, *common, "--objective", "balanced")
    assert code == 0 and (result["objective"]["gap_s"], result["objective"]["stage_length_s"]) == (
        4 * 3600,
        3 * 3600,
    )
    for bad, words in (("soon", "--stage-length 'soon'"), ("31h", "a wait without bound to those runs")):
        assert run_cli(*common, "--stage-length", bad) == 1
        assert words in capsys.readouterr().err


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_says_when_the_stage_length_is_another_time_scale_than_the_dags(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline's longest GPU task (train, 2 h) is 6 stages of 20 minutes: the prediction is of the
    objective at another time scale, said in a note (and in the JSON) with the stage length to try; at
    2-h stages there is none."""
    monkeypatch.delenv("AIRFLOW__GPU_DAG__STAGE_LENGTH", raising=False)
    common = ("simulate", PIPELINE, "--file", str(GOOD), "--capacity", "gpu_default=4")
    code, result = run_json(capsys, *common, "--stage-length", "20m")
    note = result["objective"]["stage_note"]
    assert code == 0 and note is not None
    assert "'train' of 'gpu_pipeline', takes 2h00m, 6 stages (over 3)" in note
    assert "try --stage-length 2h00m" in note
    code, result = run_json(capsys, *common, "--stage-length", "2h")
    assert result["objective"]["stage_note"] is None
    assert run_cli(*common, "--stage-length", "20m") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "stages of 20m);" in out and "Note: the longest GPU task, 'train' of 'gpu_pipeline'" in out


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_several_runs_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(
        "simulate",
        PIPELINE,
        "--file",
        str(GOOD),
        "--trigger",
        f"{PIPELINE}=1h",
        "--capacity",
        "gpu_default=4",
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "Predicted completion per run" in out and "mean completion" in out and "makespan" in out
    assert "+1h" in out and "objective fair" in out  # the run named with an offset, the policy named
    assert "6h00m earlier per descendant task up to 24, reservation overdue 36h00m" in out


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trigger", "gpu_pipeline"], "expected DAG_ID=OFFSET"),
        (["--trigger", "gpu_pipeline=soon"], "expected DAG_ID=OFFSET"),
        (["--trigger", "gpu_pipeline=-5m"], "expected DAG_ID=OFFSET"),
        (["--trigger", "no_such_dag=0"], "DAG 'no_such_dag' not found"),
        (["--trigger", "gpu_pipeline=0"], "have no capacity"),
        (
            ["--trigger", "gpu_pipeline=0", "--capacity", "gpu_default=4", "--policy", "critical_path"],
            "choose its objective with --objective",  # not ignored silently
        ),
    ],
)
def test_simulate_several_runs_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert run_cli("simulate", "--file", str(GOOD), *argv) == 1
    assert message in capsys.readouterr().err


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_several_runs_writes_the_gantt_chart_asked_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--gantt with several runs writes the chart: ignoring it would leave no file and no word."""
    chart = tmp_path / "runs.html"
    argv = ["--trigger", f"{PIPELINE}=0", "--trigger", f"{PIPELINE}=30m", "--capacity", "gpu_default=4"]
    code, result = run_json(capsys, "simulate", "--file", str(GOOD), *argv, "--gantt", str(chart))
    assert code == 0 and result["gantt"] == str(chart)
    page = chart.read_text()
    assert "stock: makespan" in page and "fair: makespan" in page and "2 runs of 1 DAG(s)" in page


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_runs_mapped_tasks_as_their_instances_with_learned_durations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four 2-GPU trials on 4 GPUs run two at a time: two waves, not one node of 2 slots.
    write_sweep(tmp_path)
    argv = ("simulate", "sweep_sim", "--file", str(tmp_path), "--capacity", "gpu_default=4")
    _, declared = run_json(capsys, *argv, "--declared-only")
    stock = {t["task_id"]: t for t in declared["results"]["stock"]["schedule"]}
    assert sorted(t for t in stock if t.startswith("trial")) == [f"trial[{i}]" for i in range(4)]
    assert {stock[f"trial[{i}]"]["slots"] for i in range(4)} == {2}
    assert declared["results"]["stock"]["makespan"] == pytest.approx(2 * 3600 + 600)
    assert declared["mapped_tasks"] == {"trial": 4} and declared["learned_tasks"] == []
    # the trials really take 30 minutes (four past runs): the simulation follows the history
    fake_history(monkeypatch, {"trial": 1800.0})
    _, learned = run_json(capsys, *argv)
    assert learned["learned_tasks"] == ["trial"]
    assert learned["results"]["stock"]["makespan"] == pytest.approx(2 * 1800 + 600, rel=0.02)
    assert run_cli(*argv) == 0
    out = capsys.readouterr().out
    assert "trial[3]" in out and "Mapped tasks simulated as their instances: trial" in out
    assert "duration learned from past runs (1 task(s))" in out


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_several_runs_expand_mapped_tasks_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("airflow_gpu_dag.airflow.history.read_map_counts", lambda *a, **k: {})
    write_sweep(tmp_path)
    argv = ("simulate", "--file", str(tmp_path), "--capacity", "gpu_default=4", "--declared-only")
    code, result = run_json(capsys, *argv, "--trigger", "sweep_sim=0", "--trigger", "sweep_sim=0")
    assert code == 0 and result["dags"]["sweep_sim"]["mapped_tasks"] == {"trial": 4}
    # two runs of 4 x 2 GPU-hours on 4 GPUs: the last trial ends at 4 h at best, its pick 10 m later
    assert result["summary"]["stock"]["makespan_s"] == pytest.approx(4 * 3600 + 600)
    assert run_cli(*argv, "--trigger", "sweep_sim=0") == 0
    assert "sweep_sim: Mapped tasks simulated as their instances: trial" in capsys.readouterr().out


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_folder_keeps_every_dag_when_trigger_names_some(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--folder runs every DAG in it; --trigger moves the DAGs it names to their offsets (two runs of
    the sweep here), the others stay at 0, and a DAG id already in the folder adds no run."""
    monkeypatch.setattr("airflow_gpu_dag.airflow.history.read_map_counts", lambda *a, **k: {})
    write_sweep(tmp_path)
    (tmp_path / "evaluation.py").write_text(
        "from airflow.sdk import DAG, task\n"
        "with DAG('eval_sim', schedule=None):\n"
        "    @task.gpu(gpus=1, duration='20m')\n"
        "    def evaluate(): return None\n"
        "    evaluate()\n"
    )
    argv = ("simulate", "--folder", str(tmp_path), "--capacity", "gpu_default=4", "--declared-only")
    _, alone = run_json(capsys, *argv)
    assert [(r["dag_id"], r["trigger_offset_s"]) for r in alone["runs"]] == [
        ("eval_sim", 0.0),
        ("sweep_sim", 0.0),
    ]
    sweep_later = ("--trigger", "sweep_sim=15m", "--trigger", "sweep_sim=1h")
    for named in ((), ("eval_sim",)):
        _, moved = run_json(capsys, *argv, *named, *sweep_later)
        assert [(r["dag_id"], r["trigger_offset_s"]) for r in moved["runs"]] == [
            ("eval_sim", 0.0),
            ("sweep_sim", 900.0),
            ("sweep_sim", 3600.0),
        ]


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_measures_each_runs_start_window_from_its_own_trigger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each run waits for the window from its own trigger time, not that of a run starting now: a run
    triggered inside its window does not wait for an opening already past, and one triggered after it
    closes moves to the next day's window."""
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    opens, closes = (now + timedelta(hours=2)), (now + timedelta(hours=3))
    (tmp_path / "windowed.py").write_text(
        "from airflow.sdk import DAG\n"
        "from airflow_gpu_dag.authoring import start_window\n"
        "from airflow_gpu_dag.operators import GpuBashOperator\n"
        "with DAG('windowed', schedule=None):\n"
        "    train = GpuBashOperator(task_id='train', bash_command='true', gpus=1, duration='30m')\n"
        f"    start_window(train, opens='{opens:%H:%M:%S}', closes='{closes:%H:%M:%S}')\n"
    )
    argv = ("simulate", "--folder", str(tmp_path), "--capacity", "gpu_default=4", "--declared-only")
    triggers = ("--trigger", "windowed=0", "--trigger", "windowed=2h15m", "--trigger", "windowed=22h")
    _, out = run_json(capsys, *argv, *triggers)
    hours = [round(r["stock_completion_s"] / 3600, 2) for r in out["runs"]]
    assert hours == pytest.approx([2.5, 0.5, 4.5], abs=0.05)  # waits 2 h; inside it; the next day's


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_folder_refuses_files_that_fail_to_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that fails to import is an error naming it: leaving its DAGs out of the simulation
    without a word would make the result look complete."""
    write_sweep(tmp_path)
    (tmp_path / "broken.py").write_text("from airflow.sdk import DAG\nraise RuntimeError('boom')\n")
    assert run_cli("simulate", "--folder", str(tmp_path), "--capacity", "gpu_default=4") == 1
    err = capsys.readouterr().err
    assert "1 file(s)" in err and "broken.py" in err and "airflow gpu-dag lint" in err


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_says_how_to_give_several_trigger_offsets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_sweep(tmp_path)
    argv = ("simulate", "--folder", str(tmp_path), "--trigger", "sweep_sim=0", "sweep_sim=10m")
    assert run_cli(*argv) == 1
    err = capsys.readouterr().err
    assert "'sweep_sim=10m' looks like DAG_ID=OFFSET" in err and "--trigger sweep_sim=10m" in err


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(
    "argv",
    [
        ["plan", PIPELINE, "--file", str(GOOD)],
        ["simulate", "--file", str(GOOD), "--trigger", f"{PIPELINE}=0", "--capacity", "gpu_default=4"],
    ],
)
def test_plan_and_simulate_refuse_an_unknown_objective_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    # The scheduler falls back to fair with a log line; a command printing a plan must not hide it.
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "bogus")
    assert run_cli(*argv) == 1
    err = capsys.readouterr().err
    assert "unknown objective 'bogus'" in err and "[gpu_dag] objective" in err


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_objective_option_wins_over_a_bad_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "bogus")
    code, result = run_json(
        capsys,
        "simulate",
        "--file",
        str(GOOD),
        "--trigger",
        f"{PIPELINE}=0",
        "--capacity",
        "gpu_default=4",
        "--objective",
        "throughput",
    )
    assert code == 0 and result["objective"]["name"] == "throughput"


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_capacity_adds_to_the_configured_pools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    two_pools_dag_file(tmp_path)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", json.dumps({"gpu_default": 4, "gpu_a100": 4}))
    code, result = run_json(
        capsys, "simulate", "two_pools", "--file", str(tmp_path), "--capacity", "gpu_a100=2"
    )
    assert code == 0 and result["capacity"] == {"gpu_a100": 2, "gpu_default": 4}
    runs = ["--trigger", "two_pools=0", "--trigger", "two_pools=30m", "--capacity", "gpu_a100=2"]
    code, result = run_json(capsys, "simulate", "--file", str(tmp_path), *runs)
    assert code == 0 and result["capacity"] == {"gpu_a100": 2, "gpu_default": 4}


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_says_what_is_wrong_with_the_pools_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    two_pools_dag_file(tmp_path)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", json.dumps({"gpu_a100": 4}))
    assert run_cli("simulate", "two_pools", "--file", str(tmp_path)) == 1
    assert "add 'gpu_default' to [gpu_dag] pools (it has gpu_a100)" in capsys.readouterr().err
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", "not json")
    assert run_cli("simulate", "two_pools", "--file", str(tmp_path), "--capacity", "gpu_a100=2") == 1
    assert "fix [gpu_dag] pools, which is not JSON" in capsys.readouterr().err


@pytest.mark.usefixtures("_no_configured_pools")
def test_an_objective_with_one_dag_simulates_it_as_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    # --objective with one DAG is honoured: the DAG is simulated as one run under the objective, not
    # given the single-DAG report with no word on it.
    from tests.unit.cli.conftest import GOOD, PIPELINE

    argv = [
        "simulate",
        PIPELINE,
        "--file",
        str(GOOD),
        "--capacity",
        "gpu_default=4",
        "--objective",
        "latency",
    ]
    code, result = run_json(capsys, *argv)
    assert code == 0 and result["objective"]["name"] == "latency" and len(result["runs"]) == 1


CAPACITY = ("--capacity", "gpu_default=4")


# -- 1. simulate --gantt PATH that cannot be written ---------------------------------------------------------
def _no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any simulation fail the test: the path must be refused before simulating."""

    def simulated(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("simulated although the --gantt path cannot be written")

    monkeypatch.setattr("airflow_gpu_dag.core.planning.planner.predict", simulated)
    monkeypatch.setattr("airflow_gpu_dag.core.simulation.cross_dag.predict_runs", simulated)


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(
    "extra",
    [(), ("-o", "json"), ("--trigger", f"{PIPELINE}=0", "--trigger", f"{PIPELINE}=30m")],
    ids=["table", "json", "several-runs"],
)
def test_simulate_gantt_to_a_folder_is_one_error_before_simulating(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
) -> None:
    folder = tmp_path / "x.html"
    folder.mkdir()
    _no_simulation(monkeypatch)
    argv = ("simulate", PIPELINE, "--file", str(GOOD), *CAPACITY, "--gantt", str(folder), *extra)
    assert run_cli(*argv) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == f"error: --gantt '{folder}': cannot write (it is a directory)"
    assert captured.out == ""
