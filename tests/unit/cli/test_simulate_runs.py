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

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu_dag.cli import simulate_runs as simulate_runs_module
from airflow_gpu_dag.cli.loading import LoadedDags
from airflow_gpu_dag.cli.simulate_runs import (
    RUNS_COLUMNS,
    RunSpec,
    parse_stage_length,
    parse_triggers,
    stage_note,
    wants_several_runs,
)
from airflow_gpu_dag.core.model.graph import TaskGraph
from tests.unit.cli.conftest import (
    GOOD,
    PIPELINE,
    dag_file,
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


# -- direct unit tests of the module ------------------------------------------------------------------
_TINY = """
with DAG("{dag_id}", schedule=None, default_args={{"weight_rule": CRITICAL_PATH_WEIGHT_RULE}}):
    EmptyOperator(
        task_id="train", pool="gpu_default", executor_config=gpu_hints(duration="{duration}", gpus=1)
    )
"""


def _tiny_dag(folder: Path, dag_id: str, duration: str = "20m") -> Path:
    """A DAG ``dag_id`` of one 1-GPU task ``train`` of ``duration`` in pool ``gpu_default``."""
    return dag_file(folder, f"{dag_id}.py", _TINY.format(dag_id=dag_id, duration=duration))


def test_trigger_values_are_stripped_and_kept_in_the_order_given() -> None:
    assert parse_triggers([" b = 1h30m ", "a=0", "b=15m"]) == [
        RunSpec("b", 5400.0),
        RunSpec("a", 0.0),
        RunSpec("b", 900.0),
    ]
    assert parse_triggers(None) == [] and parse_triggers([]) == []


@pytest.mark.parametrize(
    "value",
    ["=5m", " =1h", "train", "train=", "train=-5m", "train=nan", "train=inf", "train=1h 1h", "train=\uff11h"],
)
def test_a_malformed_trigger_is_refused_naming_it_and_an_example(value: str) -> None:
    """A missing DAG id or offset, a negative, non-finite, repeated-unit or non-ASCII offset: one error
    that quotes the value and shows the expected form."""
    with pytest.raises(ValueError) as caught:
        parse_triggers(["ok=0", value])
    message = str(caught.value)
    assert message.startswith(f"--trigger {value!r}: expected DAG_ID=OFFSET")
    assert "--trigger nightly_eval=15m" in message


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, None), ("", None), (" 20m ", 1200.0), ("30h", 108000.0)]
)
def test_stage_length_reads_a_duration_up_to_30_hours(value: str | None, seconds: float | None) -> None:
    assert parse_stage_length(value) == seconds


@pytest.mark.parametrize("value", ["0", "-1m", "nan", "inf", "abc", "31h", "1e300"])
def test_a_bad_stage_length_is_refused_naming_the_option(value: str) -> None:
    with pytest.raises(ValueError, match=rf"^--stage-length {value!r}: "):
        parse_stage_length(value)


@pytest.mark.parametrize("value", ["31h", "1e300"])
def test_a_stage_length_over_30_hours_names_the_30_hour_limit(value: str) -> None:
    """Not the objective's internal times (descendant unit x cap, reservation overdue) it would break."""
    with pytest.raises(ValueError) as caught:
        parse_stage_length(value)
    assert "give at most 30h" in str(caught.value) and "fair" in str(caught.value)


@pytest.mark.parametrize(
    ("given", "several"),
    [
        ({"dag_ids": ["a"]}, False),
        ({"dag_ids": None}, False),
        ({"dag_ids": [], "triggers": [], "folder": ""}, False),
        ({"dag_ids": ["a", "b"]}, True),
        ({"dag_ids": ["a"], "objective": "fair"}, True),
        ({"dag_ids": ["a"], "stage_length": "20m"}, True),
        ({"dag_ids": None, "folder": "dags"}, True),
        ({"dag_ids": None, "triggers": ["a=0"]}, True),
    ],
)
def test_wants_several_runs(given: dict[str, Any], several: bool) -> None:
    assert wants_several_runs(argparse.Namespace(**given)) is several


# -- which runs are simulated (DAG loading faked) -----------------------------------------------------------
def _runs_args(**given: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"dag_ids": [], "file": None, "folder": None, "triggers": None, **given})


@pytest.fixture
def found(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """``find_dag`` returns a stand-in DAG for any id; the ``(dag_id, file)`` of each call, in order."""
    calls: list[tuple[str, str | None]] = []

    def find_dag(dag_id: str, file: str | None = None) -> Any:
        calls.append((dag_id, file))
        return SimpleNamespace(dag_id=dag_id)

    monkeypatch.setattr(simulate_runs_module, "find_dag", find_dag)
    return calls


def _fake_folder(monkeypatch: pytest.MonkeyPatch, dag_ids: list[str], errors: int = 0) -> None:
    loaded = LoadedDags(paths=["dags"])
    loaded.dags = {d: SimpleNamespace(dag_id=d) for d in dag_ids}
    loaded.import_errors = {f"/dags/broken_{i}.py": "SyntaxError" for i in range(errors)}
    monkeypatch.setattr(simulate_runs_module, "load_dags", lambda paths: loaded)


def test_runs_are_ordered_by_offset_and_a_triggered_dag_has_no_run_at_zero(
    found: list[tuple[str, str | None]],
) -> None:
    args = _runs_args(dag_ids=["a", "b"], triggers=["b=1h", "c=30m", "b=0"], file="dags/")
    runs, dags = simulate_runs_module._runs(args)
    assert runs == [RunSpec("b", 0.0), RunSpec("a", 0.0), RunSpec("c", 1800.0), RunSpec("b", 3600.0)]
    assert sorted(dags) == ["a", "b", "c"]
    assert found == [("a", "dags/"), ("b", "dags/"), ("c", "dags/")]  # each DAG read once


def test_a_dag_id_that_looks_like_a_trigger_says_to_use_trigger(found: list[tuple[str, str | None]]) -> None:
    with pytest.raises(ValueError, match=r"'eval=15m' looks like DAG_ID=OFFSET.*--trigger eval=15m"):
        simulate_runs_module._runs(_runs_args(dag_ids=["train", "eval=15m"]))
    assert found == []  # refused before any DAG file is parsed


def test_nothing_to_simulate_asks_for_a_dag(found: list[tuple[str, str | None]]) -> None:
    with pytest.raises(ValueError, match="give a DAG id"):
        simulate_runs_module._runs(_runs_args())


def test_every_dag_of_the_folder_runs_once_at_zero_unless_triggered(
    monkeypatch: pytest.MonkeyPatch, found: list[tuple[str, str | None]]
) -> None:
    _fake_folder(monkeypatch, ["b", "a", "c"])
    args = _runs_args(folder="dags", dag_ids=["a"], triggers=["c=2h", "c=1h"])
    runs, dags = simulate_runs_module._runs(args)
    assert runs == [RunSpec("a", 0.0), RunSpec("b", 0.0), RunSpec("c", 3600.0), RunSpec("c", 7200.0)]
    assert sorted(dags) == ["a", "b", "c"] and found == []  # all from the folder


def test_a_folder_with_import_errors_is_refused_naming_the_first_five(
    monkeypatch: pytest.MonkeyPatch, found: list[tuple[str, str | None]]
) -> None:
    _fake_folder(monkeypatch, ["a"], errors=6)
    with pytest.raises(ValueError) as caught:
        simulate_runs_module._runs(_runs_args(folder="dags"))
    message = str(caught.value)
    assert message.startswith("6 file(s) in 'dags' failed to import (/dags/broken_0.py, ")
    assert "/dags/broken_4.py)" in message and "broken_5" not in message
    assert "airflow gpu-dag lint" in message


def test_a_folder_without_dags_is_refused(
    monkeypatch: pytest.MonkeyPatch, found: list[tuple[str, str | None]]
) -> None:
    _fake_folder(monkeypatch, [])
    with pytest.raises(ValueError, match=r"no DAG in 'dags'; point --folder at a folder of DAG files"):
        simulate_runs_module._runs(_runs_args(folder="dags"))


# -- the stage note ------------------------------------------------------------------------------------------
def test_stage_note_names_the_longest_gpu_task_and_the_stage_length_to_try() -> None:
    graph = TaskGraph("evals")
    graph.add("prep", 3 * 3600)  # a CPU task: not what stages are measured by
    graph.add("score", 600, gpus=1)
    note = stage_note(6 * 3600, {"evals": graph})
    assert note is not None
    assert note.startswith("Note: the longest GPU task, 'score' of 'evals', takes 10m, ")
    assert note.endswith("try --stage-length 10m (and set [gpu_dag] stage_length to what fits).")


def test_stage_note_is_none_when_the_stages_fit_or_there_is_no_gpu_task() -> None:
    fits, cpu_only = TaskGraph("fits"), TaskGraph("cpu")
    fits.add("train", 3 * 3600, gpus=2)
    cpu_only.add("prep", 60)
    assert stage_note(6 * 3600, {"fits": fits}) is None
    assert stage_note(6 * 3600, {"cpu": cpu_only}) is None
    assert stage_note(6 * 3600, {}) is None


# -- the command, on small DAG files --------------------------------------------------------------------
def test_several_runs_refuse_the_critical_path_policy_and_name_objective(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny_dag(tmp_path, "solo")
    argv = ("simulate", "--file", str(tmp_path), "--trigger", "solo=0", "--trigger", "solo=1h")
    assert run_cli(*argv, "--policy", "critical_path", "--declared-only") == 1
    err = capsys.readouterr().err
    assert "--policy critical_path compares the admission of one DAG" in err and "--objective" in err


def test_dags_without_tasks_print_dashes_not_a_division_by_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dag_file(tmp_path, "empty.py", '\nwith DAG("empty_a", schedule=None):\n    pass\n')
    dag_file(tmp_path, "empty_b.py", '\nwith DAG("empty_b", schedule=None):\n    pass\n')
    assert run_cli("simulate", "--folder", str(tmp_path), "--declared-only") == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [line.split() for line in lines if "empty_" in line]
    assert [(r[1], r[-1]) for r in runs] == [("empty_a", "-"), ("empty_b", "-")]  # the Change column
    ratios = [line.split()[-1] for line in lines if line.startswith(("mean completion", "makespan"))]
    assert ratios == ["-", "-"]


def test_several_runs_plain_output_is_one_row_per_run_in_offset_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny_dag(tmp_path, "solo")
    argv = ("simulate", "--file", str(tmp_path), "--trigger", "solo=1h", "--trigger", "solo=0")
    assert run_cli(*argv, "--capacity", "gpu_default=1", "--objective", "latency", "-o", "plain") == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split("\t") == list(RUNS_COLUMNS)
    cells = [row.split("\t") for row in rows]
    assert [(c[0], c[1], c[2], c[4]) for c in cells] == [
        ("1", "solo", "0.0", "latency"),
        ("2", "solo", "3600.0", "latency"),
    ]
    assert all(float(c[3]) == pytest.approx(1200.0) for c in cells)  # 20 min each, nothing shared


def test_several_runs_json_reports_the_objective_at_the_stage_length_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny_dag(tmp_path, "one")
    _tiny_dag(tmp_path, "two", duration="40m")
    argv = ("simulate", "one", "two", "--file", str(tmp_path), "--capacity", "gpu_default=1")
    code = run_cli(*argv, "--objective", "latency", "--stage-length", "20m", "--declared-only", "-o", "json")
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["capacity"] == {"gpu_default": 1}
    assert data["objective"]["name"] == "latency" and data["objective"]["stage_length_s"] == 1200.0
    assert [r["dag_id"] for r in data["runs"]] == ["one", "two"]
    assert set(data["runs"][0]) == {
        "dag_id",
        "trigger_offset_s",
        "stock_completion_s",
        "latency_completion_s",
    }
    # one GPU for 20 + 40 minutes of work: whichever runs second ends at 1 h, under both policies
    for label in ("stock", "latency"):
        assert data["summary"][label]["makespan_s"] == pytest.approx(3600.0)
    assert set(data["dags"]) == {"one", "two"} and data["gantt"] is None


def test_a_dag_id_also_triggered_runs_only_at_its_trigger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cli.md: every DAG id gets one run at 0, unless --trigger gives its runs."""
    _tiny_dag(tmp_path, "solo")
    argv = ("simulate", "solo", "--file", str(tmp_path), "--trigger", "solo=1h", "--declared-only")
    assert run_cli(*argv, "--capacity", "gpu_default=1", "-o", "json") == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["dag_id"], r["trigger_offset_s"]) for r in runs] == [("solo", 3600.0)]


def test_an_unknown_configured_objective_is_an_error_unless_objective_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny_dag(tmp_path, "solo")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "fastest")
    argv = ("simulate", "solo", "--file", str(tmp_path), "--declared-only", "--trigger", "solo=0")
    argv += ("--capacity", "gpu_default=1")
    assert run_cli(*argv) == 1
    err = capsys.readouterr().err
    assert "unknown objective 'fastest'" in err and "[gpu_dag] objective" in err
    assert run_cli(*argv, "--objective", "fair", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["objective"]["name"] == "fair"
