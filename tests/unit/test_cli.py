"""``airflow gpu-dag`` on real DAG files: lint (good and broken DAGs), plan, simulate.

The commands run in-process through the provider's own argument parser (the same ``ActionCommand``
definitions ``airflow`` uses); one test runs the real ``airflow`` binary to prove the provider's
CLI is discovered.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.cli.common import parse_pool_args
from airflow_gpu_dag.cli.definition import get_parser

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "tests" / "fixtures" / "dags_broken"
GOOD = ROOT / "tests" / "integration" / "dags" / "ui"
PIPELINE = "gpu_pipeline"


def run_cli(*argv: str) -> int:
    """Run ``airflow gpu-dag <argv>`` in-process; returns the exit code (0 when it returned)."""
    args = get_parser().parse_args(["gpu-dag", *argv])
    try:
        args.func(args)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return int(exc.code or 0)
    return 0


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = run_cli(*argv, "--output", "json")
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(autouse=True)
def _no_configured_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


# -- discovery -------------------------------------------------------------------------------------------
def test_airflow_discovers_the_gpu_dag_commands() -> None:
    airflow = Path(sys.executable).with_name("airflow")
    result = subprocess.run(
        [str(airflow), "gpu-dag", "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for command in ("lint", "plan", "simulate", "watermark"):
        assert command in result.stdout


def test_parser_has_every_command() -> None:
    parser = get_parser()
    for argv in (
        ["gpu-dag", "lint", "x.py"],
        ["gpu-dag", "plan", "d"],
        ["gpu-dag", "simulate", "d", "--capacity", "p=1"],
        ["gpu-dag", "watermark", "--help"][:2],
    ):
        assert callable(parser.parse_args(argv).func)


# -- lint ------------------------------------------------------------------------------------------------
def test_lint_good_dag_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, "lint", str(GOOD), "--pool", "gpu_default=8")
    assert code == 0
    assert report["dags"] == [PIPELINE]
    assert report["errors"] == 0 and report["import_errors"] == [] and report["ok"] is True


def test_lint_broken_folder_reports_every_problem(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, "lint", str(BROKEN), "--pool", "gpu_a100=8", "--pool", "gpu_default=8")
    assert code == 1 and report["ok"] is False
    found = {(f["dag_id"], f["code"], f["task_id"]) for f in report["findings"]}
    assert ("broken_cycle", "cycle", "prepare") in found
    assert ("broken_estimate", "bad-estimate", "train") in found
    assert ("broken_impossible", "impossible-request", "pretrain") in found
    assert ("broken_unknown_pool", "unknown-pool", "finetune") in found
    assert ("broken_hidden_dependency", "hidden-dependency", "evaluate") in found
    cycle = next(f for f in report["findings"] if f["code"] == "cycle")
    assert "prepare -> train -> evaluate -> prepare" in cycle["message"]
    unknown = next(f for f in report["findings"] if f["code"] == "unknown-pool")
    assert "gpu_h100" in unknown["message"] and "airflow pools set gpu_h100" in unknown["fix"]
    assert [e["file"].endswith("import_error_dag.py") for e in report["import_errors"]] == [True]
    assert "NameError" in report["import_errors"][0]["message"]
    assert report["errors"] == 5  # cycle, bad estimate, impossible, unknown pool, import error


@pytest.mark.parametrize(
    ("file", "code"),
    [
        ("cycle_dag.py", "cycle"),
        ("bad_estimate_dag.py", "bad-estimate"),
        ("impossible_request_dag.py", "impossible-request"),
        ("unknown_pool_dag.py", "unknown-pool"),
    ],
)
def test_lint_each_broken_file_fails(capsys: pytest.CaptureFixture[str], file: str, code: str) -> None:
    exit_code, report = run_json(capsys, "lint", str(BROKEN / file), "--pool", "gpu_a100=8")
    assert exit_code == 1
    assert code in {f["code"] for f in report["findings"] if f["severity"] == "error"}


def test_hidden_dependency_is_a_warning_unless_strict(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(BROKEN / "hidden_dependency_dag.py")
    code, report = run_json(capsys, "lint", path)
    assert code == 0 and report["warnings"] == 1 and report["errors"] == 0
    code, _ = run_json(capsys, "lint", path, "--strict")
    assert code == 1


def test_lint_reads_pools_from_config(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(BROKEN / "impossible_request_dag.py")
    code, report = run_json(capsys, "lint", path)
    assert code == 0, "without any pool sizes the request cannot be judged"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_a100": 8}')
    code, report = run_json(capsys, "lint", path)
    assert code == 1
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == ["impossible-request"]
    code, report = run_json(capsys, "lint", path, "--pool", "gpu_a100=16")
    assert code == 0, "--pool overrides the configured size"


def test_lint_pool_option_also_holds_for_gpu_operators_checked_when_declared(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A GPU operator checks its request against [gpu_dag] pools when the file is imported: with pools
    of 4 configured, `--pool gpu_default=8` still failed a 6-GPU task as an import error."""
    import os

    dag_file = tmp_path / "six.py"
    dag_file.write_text(
        "from airflow.sdk import DAG\n"
        "from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE\n"
        "from airflow_gpu_dag.operators.gpu import GpuBashOperator\n"
        "with DAG('six', default_args={'weight_rule': CRITICAL_PATH_WEIGHT_RULE}, schedule=None):\n"
        "    GpuBashOperator(task_id='train', bash_command='true', gpus=6, duration='1h')\n"
    )
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 4}')
    code, report = run_json(capsys, "lint", str(dag_file))
    assert code == 1 and report["import_errors"], "the configured pool of 4 cannot hold 6 GPUs"
    code, report = run_json(capsys, "lint", str(dag_file), "--pool", "gpu_default=8")
    assert code == 0 and report["import_errors"] == [] and report["dags"] == ["six"]
    assert os.environ["AIRFLOW__GPU_DAG__POOLS"] == '{"gpu_default": 4}'  # restored after the import


def test_lint_max_gpus_per_host(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, "lint", str(GOOD), "--max-gpus-per-host", "2")
    assert code == 1
    assert {(f["task_id"], f["code"]) for f in report["findings"] if f["severity"] == "error"} == {
        ("train", "impossible-request")
    }


def test_lint_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli("lint", str(BROKEN), "--pool", "gpu_a100=8", "--pool", "gpu_default=8")
    out = capsys.readouterr().out
    assert code == 1
    assert "IMPORT ERROR" in out and "import_error_dag.py" in out
    assert "prepare -> train -> evaluate -> prepare" in out
    assert "FAILED: 5 DAG(s) in 6 file(s); 5 error(s), 1 warning(s)" in out


def test_lint_unknown_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("lint", "/no/such/dags") == 1
    assert "'/no/such/dags' does not exist" in capsys.readouterr().err


def test_bad_pool_argument() -> None:
    with pytest.raises(ValueError, match="expected NAME=SLOTS"):
        parse_pool_args(["gpu_a100"])
    with pytest.raises(ValueError, match="--capacity 'x=-1'"):
        parse_pool_args(["x=-1"], option="--capacity")
    assert parse_pool_args(["a=1", " b = 2 "]) == {"a": 1, "b": 2}
    # the same pool twice: the same size is harmless, two sizes are refused (not last-one-wins)
    assert parse_pool_args(["a=1", "a=1"]) == {"a": 1}
    with pytest.raises(ValueError, match="pool 'a' is given two sizes"):
        parse_pool_args(["a=1", "b=2", "a=4"], option="--capacity")


# -- plan ------------------------------------------------------------------------------------------------
def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan = run_json(capsys, "plan", PIPELINE, "--file", str(GOOD))
    assert code == 0
    assert plan["critical_path"] == ["load", "preprocess", "train", "checkpoint", "evaluate"]
    assert plan["makespan"] == 3.5 * 3600
    tasks = {t["task_id"]: t for t in plan["tasks"]}
    assert tasks["ablation"]["slack"] == 70 * 60
    assert tasks["train"]["priority"] == (120 + 10 + 30) * 60
    assert tasks["train"]["gpus"] == 4
    assert plan["total_gpu_hours"] == pytest.approx(8 + 2 + 0.5 + 6 * 0.75)
    # the plan says which policy its priorities assume: the DAG's rule and the cross-DAG objective
    assert plan["policy"].startswith("Priority: critical path, objective balanced: key = trigger + 3 x")


def test_plan_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD)) == 0
    out = capsys.readouterr().out
    assert "Critical path (3h30m): load -> preprocess -> train -> checkpoint -> evaluate" in out
    assert "total GPU-hours: 15.00" in out
    assert "tokenizer_stats" in out and "4x GPU (80GiB each)" in out


def test_plan_says_which_fallback_rung_it_assumes(capsys: pytest.CaptureFixture[str]) -> None:
    plan_dags = ROOT / "tests" / "integration" / "dags" / "authoring" / "auth_plan.py"
    assert run_cli("plan", "auth_ladder", "--file", str(plan_dags)) == 0
    out = capsys.readouterr().out
    assert "Assumed by the plan:" in out
    assert "train.small: fallback ladder train: the plan assumes this rung 2 of 2 (3h30m)" in out
    assert "train.big: fallback ladder train: rung 1 of 2 expected 2h00m; the plan assumes small" in out


def test_plan_critical_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "--critical-only") == 0
    out = capsys.readouterr().out
    assert "train" in out and "sweep_0" not in out and "tokenizer_stats" not in out


def test_plan_unknown_dag(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", "no_such_dag", "--file", str(GOOD)) == 1
    err = capsys.readouterr().err
    assert "DAG 'no_such_dag' not found" in err and PIPELINE in err and "--file" in err


def test_plan_of_cyclic_dag_names_the_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", "broken_cycle", "--file", str(BROKEN / "cycle_dag.py")) == 1
    assert "prepare -> train -> evaluate -> prepare" in capsys.readouterr().err


def test_plan_uses_dags_folder(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow import settings

    monkeypatch.setattr(settings, "DAGS_FOLDER", str(GOOD))
    code, plan = run_json(capsys, "plan", PIPELINE)
    assert code == 0 and plan["dag_id"] == PIPELINE


# -- simulate --------------------------------------------------------------------------------------------
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
    for label in ("stock", "latency"):
        completions = [r[f"{label}_completion_s"] for r in result["runs"]]
        summary = result["summary"][label]
        assert summary["mean_completion_s"] == pytest.approx(sum(completions) / 2)
        assert summary["p95_completion_s"] == max(completions)
        assert summary["makespan_s"] >= 1200.0 + min(completions)


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
    assert "+1h" in out and "objective balanced" in out  # the run named with an offset, the policy named


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
            "choose its objective with --objective",  # was silently ignored
        ),
    ],
)
def test_simulate_several_runs_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert run_cli("simulate", "--file", str(GOOD), *argv) == 1
    assert message in capsys.readouterr().err


def test_simulate_several_runs_writes_the_gantt_chart_asked_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--gantt was silently ignored with several runs: no file, no word."""
    chart = tmp_path / "runs.html"
    argv = ["--trigger", f"{PIPELINE}=0", "--trigger", f"{PIPELINE}=30m", "--capacity", "gpu_default=4"]
    code, result = run_json(capsys, "simulate", "--file", str(GOOD), *argv, "--gantt", str(chart))
    assert code == 0 and result["gantt"] == str(chart)
    page = chart.read_text()
    assert "stock: makespan" in page and "balanced: makespan" in page and "2 runs of 1 DAG(s)" in page


def test_lint_checks_against_the_inventory_without_pools(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "2xa100:80GiB")
    code = run_cli("lint", str(GOOD))
    out = capsys.readouterr().out
    assert code == 1  # the pipeline's 4-GPU train cannot fit a 2-GPU host
    assert "impossible-request" in out and "static inventory" in out
    assert "GPUs checked against the static inventory" in out


# -- learned durations: estimates and plan ------------------------------------------------------------
def _fake_history(monkeypatch: pytest.MonkeyPatch, durations: dict[str, float], runs: int = 4) -> None:
    from airflow_gpu_dag.airflow import history
    from airflow_gpu_dag.core.analysis.estimates import RunSample

    def read(dag_id: str, task_ids: Any = None, window: int = 20, *, session: Any = None) -> Any:
        return {
            t: [RunSample(d, "success", 1000.0 * i, 1000.0 * i + d) for i in range(runs)]
            for t, d in durations.items()
        }

    monkeypatch.setattr(history, "read_history", read)
    monkeypatch.setattr(history, "read_map_counts", lambda *a, **k: {})


def test_estimates_flags_declared_estimates_that_are_off(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # train declares 2h but takes 20m; load declares 20m and takes 21m
    _fake_history(monkeypatch, {"train": 1200.0, "load": 1260.0})
    code, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD))
    assert code == 0 and report["flagged"] == ["train"]
    by_task = {t["task_id"]: t for t in report["tasks"]}
    assert by_task["train"]["source"] == "learned" and by_task["train"]["runs"] == 4
    assert by_task["train"]["learned"] == pytest.approx(1200, rel=0.02)
    assert by_task["train"]["declared"] == 7200 and by_task["train"]["ratio"] == pytest.approx(
        1 / 6, rel=0.02
    )
    assert by_task["evaluate"]["source"] == "declared" and not by_task["evaluate"]["flagged"]
    code, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD), "--factor", "1.01")
    assert report["flagged"] == ["load", "train"]
    for factor in ("1", "nan", "inf"):
        assert run_cli("estimates", PIPELINE, "--file", str(GOOD), "--factor", factor) == 1
        assert "must be a finite number greater than 1" in capsys.readouterr().err
    assert run_cli("estimates", PIPELINE, "--file", str(GOOD)) == 0
    out = capsys.readouterr().out
    assert "OFF >1.5x" in out and "1 of 13 task(s) flagged" in out


def test_plan_uses_learned_durations_and_declared_only_does_not(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_history(monkeypatch, {"train": 1200.0})
    _, learned = run_json(capsys, "plan", PIPELINE, "--file", str(GOOD))
    train = next(t for t in learned["tasks"] if t["task_id"] == "train")
    assert train["duration"] == pytest.approx(1200, rel=0.02) and train["duration_source"] == "learned"
    assert train["declared_duration"] == 7200
    _, declared = run_json(capsys, "plan", PIPELINE, "--file", str(GOOD), "--declared-only")
    assert next(t for t in declared["tasks"] if t["task_id"] == "train")["duration"] == 7200
    assert learned["makespan"] < declared["makespan"]
    run_cli("plan", PIPELINE, "--file", str(GOOD))
    out = capsys.readouterr().out
    assert re.search(r"20m(0\ds)?~", out) and "duration learned from past runs (1 task(s))" in out


def test_plan_shows_mapped_tasks_as_their_instances(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sweep.py").write_text(
        "from airflow.sdk import DAG, task\n"
        "from airflow_gpu_dag import gpu_hints\n"
        "with DAG('sweep_plan', schedule=None):\n"
        "    @task(executor_config=gpu_hints(duration='1h', gpus=2))\n"
        "    def trial(lr): return lr\n"
        "    @task(executor_config=gpu_hints(duration='10m'))\n"
        "    def pick(scores): return None\n"
        "    @task(executor_config=gpu_hints(duration='5m'))\n"
        "    def grid(): return [1, 2]\n"
        "    @task(executor_config=gpu_hints(duration='30m', gpus=1))\n"
        "    def evaluate(x): return x\n"
        "    pick(trial.expand(lr=[0.1, 0.01, 0.001, 0.0001]))\n"
        "    evaluate.expand(x=grid())\n"
    )
    _, plan = run_json(capsys, "plan", "sweep_plan", "--file", str(tmp_path))
    ids = [t["task_id"] for t in plan["tasks"]]
    assert [i for i in ids if i.startswith("trial")] == [f"trial[{i}]" for i in range(4)]
    assert "evaluate" in ids  # mapped over grid's output, no hint, no history: one node
    assert plan["total_gpu_hours"] == pytest.approx(4 * 2 * 1.0 + 0.5)
    trial = next(t for t in plan["tasks"] if t["task_id"] == "trial[2]")
    assert trial["map_of"] == "trial" and trial["map_index"] == 2
    run_cli("plan", "sweep_plan", "--file", str(tmp_path))
    out = capsys.readouterr().out
    assert "Mapped tasks shown as their instances: trial (4)." in out
    assert "unknown number of instances (shown once): evaluate;" in out
    # mapped over nothing: Airflow skips it, so it is 0 instances, not an unknown number
    (tmp_path / "sweep.py").write_text(
        (tmp_path / "sweep.py")
        .read_text()
        .replace(
            "@task(executor_config=gpu_hints(duration='30m', gpus=1))",
            "@task(executor_config=gpu_hints(duration='30m', gpus=1, map_length=0))",
        )
    )
    run_cli("plan", "sweep_plan", "--file", str(tmp_path))
    out = capsys.readouterr().out
    assert "as their instances: evaluate (0), trial (4)." in out and "unknown number" not in out


def _write_sweep(folder: Path) -> None:
    """DAG ``sweep_sim``: four literal 2-GPU trials of 1 h (declared), then a 10-minute pick."""
    (folder / "sweep.py").write_text(
        "from airflow.sdk import DAG, task\n"
        "from airflow_gpu_dag import gpu_hints\n"
        "with DAG('sweep_sim', schedule=None):\n"
        "    @task.gpu(gpus=2, duration='1h')\n"
        "    def trial(lr): return lr\n"
        "    @task(executor_config=gpu_hints(duration='10m'))\n"
        "    def pick(scores): return None\n"
        "    pick(trial.expand(lr=[0.1, 0.01, 0.001, 0.0001]))\n"
    )


def test_simulate_runs_mapped_tasks_as_their_instances_with_learned_durations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four 2-GPU trials on 4 GPUs run two at a time: two waves, not one node of 2 slots.
    _write_sweep(tmp_path)
    argv = ("simulate", "sweep_sim", "--file", str(tmp_path), "--capacity", "gpu_default=4")
    _, declared = run_json(capsys, *argv, "--declared-only")
    stock = {t["task_id"]: t for t in declared["results"]["stock"]["schedule"]}
    assert sorted(t for t in stock if t.startswith("trial")) == [f"trial[{i}]" for i in range(4)]
    assert {stock[f"trial[{i}]"]["slots"] for i in range(4)} == {2}
    assert declared["results"]["stock"]["makespan"] == pytest.approx(2 * 3600 + 600)
    assert declared["mapped_tasks"] == {"trial": 4} and declared["learned_tasks"] == []
    # the trials really take 30 minutes (four past runs): the simulation follows the history
    _fake_history(monkeypatch, {"trial": 1800.0})
    _, learned = run_json(capsys, *argv)
    assert learned["learned_tasks"] == ["trial"]
    assert learned["results"]["stock"]["makespan"] == pytest.approx(2 * 1800 + 600, rel=0.02)
    assert run_cli(*argv) == 0
    out = capsys.readouterr().out
    assert "trial[3]" in out and "Mapped tasks simulated as their instances: trial" in out
    assert "duration learned from past runs (1 task(s))" in out


def test_simulate_several_runs_expand_mapped_tasks_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("airflow_gpu_dag.airflow.history.read_map_counts", lambda *a, **k: {})
    _write_sweep(tmp_path)
    argv = ("simulate", "--file", str(tmp_path), "--capacity", "gpu_default=4", "--declared-only")
    code, result = run_json(capsys, *argv, "--trigger", "sweep_sim=0", "--trigger", "sweep_sim=0")
    assert code == 0 and result["dags"]["sweep_sim"]["mapped_tasks"] == {"trial": 4}
    # two runs of 4 x 2 GPU-hours on 4 GPUs: the last trial ends at 4 h at best, its pick 10 m later
    assert result["summary"]["stock"]["makespan_s"] == pytest.approx(4 * 3600 + 600)
    assert run_cli(*argv, "--trigger", "sweep_sim=0") == 0
    assert "sweep_sim: Mapped tasks simulated as their instances: trial" in capsys.readouterr().out


def test_declared_only_reads_no_past_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--declared-only plans the DAG as declared: neither durations nor map counts are read (before,
    the map counts were, and a DB without tables printed a second, contradicting note)."""

    def unreadable(*_a: object, **_k: object) -> None:
        raise RuntimeError("no such table: task_instance")

    monkeypatch.setattr("airflow_gpu_dag.airflow.history.read_map_counts", unreadable)
    monkeypatch.setattr("airflow_gpu_dag.airflow.history.read_history", unreadable)
    (tmp_path / "hinted.py").write_text(
        "from airflow.sdk import DAG, task\n"
        "from airflow_gpu_dag import gpu_hints\n"
        "with DAG('sweep_hinted', schedule=None):\n"
        "    hints = gpu_hints(duration='1h', gpus=2, map_length=3)\n"
        "    @task(pool='gpu_default', pool_slots=2, executor_config=hints)\n"
        "    def trial(lr): return lr\n"
        "    @task\n"
        "    def rates(): return [0.1, 0.01, 0.001]\n"
        "    trial.expand(lr=rates())\n"
    )
    _write_sweep(tmp_path)
    argv = ("simulate", "--folder", str(tmp_path), "--capacity", "gpu_default=4")
    _, declared = run_json(capsys, *argv, "--declared-only")
    notes = {d["history_note"] for d in declared["dags"].values()}
    assert notes == {"declared only, past runs not read"}
    assert declared["dags"]["sweep_hinted"]["mapped_tasks"] == {"trial": 3}
    _, read = run_json(capsys, *argv)
    assert {d["history_note"] for d in read["dags"].values()} == {
        "the metadata database is not set up: run `airflow db migrate` "
        "(history unreadable (RuntimeError: no such table: task_instance))"
    }
    assert run_cli(*argv, "--declared-only") == 0
    out = capsys.readouterr().out
    assert out.count("Note:") == 1 and "Note: declared only, past runs not read" in out


def test_simulate_folder_keeps_every_dag_when_trigger_names_some(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--folder runs every DAG in it; --trigger moves the DAGs it names to their offsets (two runs of
    the sweep here), the others stay at 0, and a DAG id already in the folder adds no run."""
    monkeypatch.setattr("airflow_gpu_dag.airflow.history.read_map_counts", lambda *a, **k: {})
    _write_sweep(tmp_path)
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


def test_simulate_measures_each_runs_start_window_from_its_own_trigger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, every run of a DAG got the window wait of a run starting now: a run triggered inside its
    window still waited for an opening already past, one triggered after it closed was not moved to
    the next day's window."""
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


def test_simulate_folder_refuses_files_that_fail_to_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, a DAG whose file failed to import was left out of the simulation without a word."""
    _write_sweep(tmp_path)
    (tmp_path / "broken.py").write_text("from airflow.sdk import DAG\nraise RuntimeError('boom')\n")
    assert run_cli("simulate", "--folder", str(tmp_path), "--capacity", "gpu_default=4") == 1
    err = capsys.readouterr().err
    assert "1 file(s)" in err and "broken.py" in err and "airflow gpu-dag lint" in err


def test_simulate_says_how_to_give_several_trigger_offsets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_sweep(tmp_path)
    argv = ("simulate", "--folder", str(tmp_path), "--trigger", "sweep_sim=0", "sweep_sim=10m")
    assert run_cli(*argv) == 1
    err = capsys.readouterr().err
    assert "'sweep_sim=10m' looks like DAG_ID=OFFSET" in err and "--trigger sweep_sim=10m" in err


# -- an unknown [gpu_dag] objective ------------------------------------------------------------------------
def test_lint_table_keeps_the_setting_name_in_brackets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # rich would read "[gpu_dag]" in a cell as markup and drop it: the message must keep it.
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "bogus")
    assert run_cli("lint", str(GOOD), "--pool", "gpu_default=8") == 1
    out = capsys.readouterr().out
    assert "bad-config" in out
    assert "[gpu_dag] objective" in out and "fix or unset [gpu_dag] objective" in out


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
    # The scheduler falls back to balanced with a log line; a command printing a plan must not hide it.
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "bogus")
    assert run_cli(*argv) == 1
    err = capsys.readouterr().err
    assert "unknown objective 'bogus'" in err and "[gpu_dag] objective" in err


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


def test_a_reader_that_stops_early_is_not_an_error(tmp_path: Path) -> None:
    """`airflow gpu-dag plan ... -o plain | head -1` ended in a BrokenPipeError traceback."""
    script = tmp_path / "pipe.py"
    script.write_text(
        "import argparse\n"
        "from airflow_gpu_dag.cli.common import quiet\n"
        "@quiet\n"
        "def command(args):\n"
        "    for i in range(200_000):\n"
        "        print('row', i)\n"
        "command(argparse.Namespace(verbose=True))\n"
    )
    result = subprocess.run(
        f"{sys.executable} {script} | head -1", shell=True, capture_output=True, text=True, check=False
    )
    assert result.stdout == "row 0\n"
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
