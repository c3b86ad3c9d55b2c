"""Tests of ``airflow_gpu_dag.cli.plan``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import airflow_gpu_dag.metrics as metrics
from tests.unit.cli.conftest import (
    BROKEN,
    GOOD,
    NOW,
    PIPELINE,
    ROOT,
    dag_file,
    fake_history,
    finished_state,
    report,
    run_cli,
    run_cli_explain,
    run_json,
    write_sweep,
)


def test_a_finished_run_is_held_against_its_plan_with_the_causes_and_the_error_quantiles(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    api = finished_state()
    t0 = NOW - 3600
    out = report(api, "pipe")
    tasks = {t["task_id"]: t for t in out["tasks"]}
    # the plan: prep 0-60, train 60-160, eval 160-210 (the run alone, estimates, from its start)
    assert [
        (tasks[t]["planned_start"] - t0, tasks[t]["planned_end"] - t0) for t in ("prep", "train", "eval")
    ] == [(0, 60), (60, 160), (160, 210)]
    assert tasks["prep"]["main_cause"] == "ran_longer" and tasks["prep"]["causes"]["ran_longer"] == 20
    train = tasks["train"]
    assert train["start_error_s"] == 60 and train["causes"]["upstream_late"] == 20
    assert train["causes"]["waited_for_slots"] == pytest.approx(30)
    assert train["causes"]["waited_for_reservation"] == pytest.approx(10)
    assert train["main_cause"] == "waited_for_slots"
    assert tasks["eval"]["start_error_s"] == 60 and tasks["eval"]["main_cause"] == "upstream_late"
    # absolute errors: starts 0, 60, 60 -> median 60, p90 60; ends 20, 60, 60
    assert out["plan_error"] == {
        "tasks": 3,
        "start_error_s": {"median": 60.0, "p90": 60.0},
        "end_error_s": {"median": 60.0, "p90": 60.0},
    }
    assert out["warnings"] == []  # a finished run needs no controller
    sent: list[tuple[str, float, dict[str, Any]]] = []
    monkeypatch.setattr(
        metrics, "_send", lambda kind, name, value, tags, per=None: sent.append((name, value, tags))
    )
    assert run_cli_explain(monkeypatch, api, ["pipe", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan_error"]["tasks"] == 3
    assert ("gpu_dag.plan.start_error_median", 60.0, {"dag_id": "pipe"}) in sent
    assert ("gpu_dag.plan.end_error_tail", 60.0, {"dag_id": "pipe"}) in sent


# -- ``airflow gpu-dag watermark`` in-process against an in-memory REST API: ``--once``, ``--dry-run``,


# -- lint and plan: yaml and plain --------------------------------------------------------------------------
def test_plan_yaml_and_plain(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "-o", "yaml") == 0
    plan = yaml.safe_load(capsys.readouterr().out)
    assert plan["critical_path"] == ["load", "preprocess", "train", "checkpoint", "evaluate"]
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "-o", "plain", "--critical-only") == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]
    assert header[:3] == ["task_id", "critical", "duration_s"]
    assert [r["task_id"] for r in rows] == ["load", "preprocess", "train", "checkpoint", "evaluate"]
    assert {r["critical"] for r in rows} == {"True"}


# -- learned durations: estimates and plan ------------------------------------------------------------


# -- plan ------------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
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
    assert plan["policy"].startswith(
        "Priority: critical path, objective fair for stages of 6h00m: key = trigger + min(5 x W, W + 12h00m) "
        "- 0.5 x remaining - 6h00m x min(descendant lead, 24)"
    )
    assert plan["policy"].endswith("or once it has waited 36h00m since it turned ready.")


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD)) == 0
    out = capsys.readouterr().out
    assert "Critical path (3h30m): load -> preprocess -> train -> checkpoint -> evaluate" in out
    assert "total GPU-hours: 15.00" in out
    assert "tokenizer_stats" in out and "4x GPU (80GiB each)" in out


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_says_which_fallback_rung_it_assumes(capsys: pytest.CaptureFixture[str]) -> None:
    plan_dags = ROOT / "tests" / "integration" / "dags" / "authoring" / "auth_plan.py"
    assert run_cli("plan", "auth_ladder", "--file", str(plan_dags)) == 0
    out = capsys.readouterr().out
    assert "Assumed by the plan:" in out
    assert "train.small: fallback ladder train: the plan assumes this rung 2 of 2 (3h30m)" in out
    assert "train.big: fallback ladder train: rung 1 of 2 expected 2h00m; the plan assumes small" in out


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_critical_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "--critical-only") == 0
    out = capsys.readouterr().out
    assert "train" in out and "sweep_0" not in out and "tokenizer_stats" not in out


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_unknown_dag(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", "no_such_dag", "--file", str(GOOD)) == 1
    err = capsys.readouterr().err
    assert "DAG 'no_such_dag' not found" in err and PIPELINE in err and "--file" in err


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_of_cyclic_dag_names_the_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", "broken_cycle", "--file", str(BROKEN / "cycle_dag.py")) == 1
    assert "prepare -> train -> evaluate -> prepare" in capsys.readouterr().err


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_uses_dags_folder(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow import settings

    monkeypatch.setattr(settings, "DAGS_FOLDER", str(GOOD))
    code, plan = run_json(capsys, "plan", PIPELINE)
    assert code == 0 and plan["dag_id"] == PIPELINE


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_uses_learned_durations_and_declared_only_does_not(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_history(monkeypatch, {"train": 1200.0})
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


@pytest.mark.usefixtures("_no_configured_pools")
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


@pytest.mark.usefixtures("_no_configured_pools")
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
    write_sweep(tmp_path)
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


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_keeps_the_declared_estimate_of_a_mapped_task_with_no_instance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dag_file(
        tmp_path,
        "zero.py",
        """
with DAG("zero", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}):
    @task(executor_config=gpu_hints(duration="10m"))
    def make():
        return []

    @task(pool="gpu_default", executor_config=gpu_hints(duration="15m", gpus=1, map_length=0))
    def trial(x):
        return x

    trial.expand(x=make())
""",
    )
    code, plan = run_json(capsys, "plan", "zero", "--file", str(tmp_path), "--declared-only")
    assert code == 0
    (trial,) = [t for t in plan["tasks"] if t["task_id"] == "trial"]
    assert (trial["duration"], trial["declared_duration"]) == (0.0, 900.0)


@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_critical_only_holds_in_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.cli.conftest import GOOD, PIPELINE

    _, whole = run_json(capsys, "plan", PIPELINE, "--file", str(GOOD))
    _, critical = run_json(capsys, "plan", PIPELINE, "--file", str(GOOD), "--critical-only")
    assert [t["task_id"] for t in critical["tasks"]] == [
        t["task_id"] for t in whole["tasks"] if t["critical"]
    ]
    assert (
        len(critical["tasks"]) < len(whole["tasks"]) and critical["critical_path"] == whole["critical_path"]
    )


# -- 6. plan --critical-only: the title counts what is shown ------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_plan_critical_only_title_counts_the_tasks_shown(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("plan", PIPELINE, "--file", str(GOOD), "--critical-only") == 0
    out = capsys.readouterr().out
    assert f"Plan of DAG {PIPELINE!r} (5 of 13 tasks, critical path only)" in out
    assert "(13 tasks)" not in out
    assert run_cli("plan", PIPELINE, "--file", str(GOOD)) == 0
    assert f"Plan of DAG {PIPELINE!r} (13 tasks)" in capsys.readouterr().out
