"""Tests of ``airflow_gpu_dag.cli.lint``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from airflow_gpu_dag.cli.lint import LINT_COLUMNS
from tests.unit.cli.conftest import (
    BROKEN,
    GOOD,
    LONG_IDS,
    LONG_IDS_DAG,
    PIPELINE,
    ROOT,
    dag_file,
    long_ids_dag_file,
    run_cli,
    run_json,
    table_column,
)


def test_lint_yaml_and_plain(capsys: pytest.CaptureFixture[str]) -> None:
    broken = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "dags_broken"
    assert run_cli("lint", str(broken / "unknown_pool_dag.py"), "--pool", "gpu_default=8", "-o", "yaml") == 1
    report = yaml.safe_load(capsys.readouterr().out)
    assert report["ok"] is False and report["findings"][0]["code"] == "unknown-pool"
    assert run_cli("lint", str(broken), "--pool", "gpu_default=8", "-o", "plain") == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["severity", "code", "dag_id", "task_id", "message", "fix"]
    codes = {line.split("\t")[1] for line in lines[1:]}
    assert {"import-error", "cycle", "unknown-pool"} <= codes
    assert all(len(line.split("\t")) == 6 for line in lines)


# -- lint ------------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_good_dag_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, "lint", str(GOOD), "--pool", "gpu_default=8")
    assert code == 0
    assert report["dags"] == [PIPELINE]
    assert report["errors"] == 0 and report["import_errors"] == [] and report["ok"] is True


@pytest.mark.usefixtures("_no_configured_pools")
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


@pytest.mark.usefixtures("_no_configured_pools")
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


@pytest.mark.usefixtures("_no_configured_pools")
def test_hidden_dependency_is_a_warning_unless_strict(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(BROKEN / "hidden_dependency_dag.py")
    code, report = run_json(capsys, "lint", path)
    assert code == 0 and report["warnings"] == 1 and report["errors"] == 0
    code, _ = run_json(capsys, "lint", path, "--strict")
    assert code == 1


@pytest.mark.usefixtures("_no_configured_pools")
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


@pytest.mark.usefixtures("_no_configured_pools")
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
    assert code == 1, "the configured pool of 4 cannot hold 6 GPUs"
    assert [(f["code"], f["task_id"]) for f in report["findings"]] == [("impossible-request", "train")]
    code, report = run_json(capsys, "lint", str(dag_file), "--pool", "gpu_default=8")
    assert code == 0 and report["import_errors"] == [] and report["dags"] == ["six"]
    assert os.environ["AIRFLOW__GPU_DAG__POOLS"] == '{"gpu_default": 4}'  # restored after the import


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_max_gpus_per_host(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, "lint", str(GOOD), "--max-gpus-per-host", "2")
    assert code == 1
    assert {(f["task_id"], f["code"]) for f in report["findings"] if f["severity"] == "error"} == {
        ("train", "impossible-request")
    }


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli("lint", str(BROKEN), "--pool", "gpu_a100=8", "--pool", "gpu_default=8")
    out = capsys.readouterr().out
    assert code == 1
    assert "IMPORT ERROR" in out and "import_error_dag.py" in out
    assert "prepare -> train -> evaluate -> prepare" in out
    assert "FAILED: 5 DAG(s) in 6 file(s); 5 error(s), 1 warning(s)" in out


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_unknown_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("lint", "/no/such/dags") == 1
    assert "'/no/such/dags' does not exist" in capsys.readouterr().err


@pytest.mark.usefixtures("_no_configured_pools")
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


# -- an unknown [gpu_dag] objective ------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_table_keeps_the_setting_name_in_brackets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # rich would read "[gpu_dag]" in a cell as markup and drop it: the message must keep it.
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "bogus")
    assert run_cli("lint", str(GOOD), "--pool", "gpu_default=8") == 1
    out = capsys.readouterr().out
    assert "bad-config" in out
    assert "[gpu_dag] objective" in out and "fix or unset [gpu_dag] objective" in out


# -- 2. lint of a path without DAG files -------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize("name", ["README.md", "docs"])
def test_lint_of_a_path_without_dag_files_fails(capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = str(ROOT / name)
    assert run_cli("lint", path) == 1
    captured = capsys.readouterr()
    assert f"error: path {path!r} holds no DAG file (a .py file defining a DAG" in captured.err
    assert "OK:" not in captured.out


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_names_only_the_paths_without_dag_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "helpers.py").write_text("# airflow dag helpers, no DAG here\nVALUE = 1\n")
    assert run_cli("lint", str(GOOD), str(tmp_path), "-o", "json") == 1
    captured = capsys.readouterr()
    assert f"error: path {str(tmp_path)!r} holds no DAG file" in captured.err
    assert str(GOOD) not in captured.err and captured.out == ""


# -- 5. -o plain: the header also without rows ---------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_plain_lint_without_problems_prints_the_header(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("lint", str(GOOD), "--pool", "gpu_default=8", "-o", "plain") == 0
    assert capsys.readouterr().out == "\t".join(LINT_COLUMNS) + "\n"


def _dag_file(folder: Path, dag_id: str, pool_size: int) -> Path:
    path = folder / f"{dag_id}.py"
    path.write_text(
        textwrap.dedent(
            f"""
            from airflow.sdk import DAG
            from airflow_gpu_dag.authoring import exclusive
            from airflow_gpu_dag.operators.gpu import GpuBashOperator

            with DAG({dag_id!r}, schedule=None) as dag:
                b1 = GpuBashOperator(task_id="b1", bash_command="true", duration="30m")
                b2 = GpuBashOperator(task_id="b2", bash_command="true", duration="30m")
            exclusive([b1, b2], pool="gpu_node1", pool_size={pool_size})
            """
        )
    )
    return path


@pytest.mark.usefixtures("_no_configured_limits")
def test_lint_with_the_pool_size_refuses_an_exclusive_that_does_not_exclude(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _dag_file(tmp_path, "team_a", 4)
    assert run_cli("lint", str(path), "--pool", "gpu_node1=8", "-o", "plain") == 1  # before: OK
    out = capsys.readouterr().out
    assert "DAG 'team_a'" in out and "'gpu_node1' has 8 slots" in out and "pool_size=4" in out


@pytest.mark.usefixtures("_no_configured_limits")
def test_lint_refuses_two_dags_that_claim_one_pool_with_different_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _dag_file(tmp_path, "team_a", 4)
    _dag_file(tmp_path, "team_b", 8)
    assert run_cli("lint", str(tmp_path), "-o", "json") == 1
    report = json.loads(capsys.readouterr().out)
    (conflict,) = [f for f in report["findings"] if f["code"] == "pool-size-conflict"]
    assert conflict["severity"] == "error"
    assert "'team_a'" in conflict["message"] and "'team_b'" in conflict["message"]
    assert "pool_size=4" in conflict["message"] and "pool_size=8" in conflict["message"]


@pytest.mark.usefixtures("_no_configured_limits")
def test_lint_says_when_it_cannot_check_a_claimed_pool_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _dag_file(tmp_path, "team_a", 8)
    assert run_cli("lint", str(path), "-o", "json") == 0
    report = json.loads(capsys.readouterr().out)
    (unchecked,) = [f for f in report["findings"] if f["code"] == "pool-size-unchecked"]
    assert unchecked["severity"] == "warning" and "--pool gpu_node1=<slots>" in unchecked["fix"]
    assert run_cli("lint", str(path), "--pool", "gpu_node1=8", "-o", "json") == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    assert not [f for f in found if f["code"].startswith("pool-size")]


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_reports_a_dag_id_defined_in_two_of_the_files_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = 'EmptyOperator(task_id="t1", executor_config=gpu_hints(duration="forty minutes"))'
    broken = dag_file(tmp_path, "d1.py", f'with DAG("dup", schedule=None):\n    {bad}\n')
    clean = dag_file(tmp_path, "d2.py", 'with DAG("dup", schedule=None):\n    EmptyOperator(task_id="t1")\n')
    code, result = run_json(capsys, "lint", str(broken), str(clean))
    assert code == 1 and result["ok"] is False
    codes = {(f["code"], f.get("task_id")) for f in result["findings"]}
    assert ("bad-estimate", "t1") in codes  # the first file's DAG is checked, not replaced
    (error,) = result["import_errors"]
    assert error["file"] == str(clean)
    assert "Ignoring DAG dup from" in error["message"] and "also found in" in error["message"]
    assert run_cli("lint", str(tmp_path), str(clean), str(tmp_path)) == 1
    assert "in 2 file(s)" in capsys.readouterr().out  # each file counted once


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_refuses_a_host_of_zero_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_cli("lint", "--max-gpus-per-host", "0")
    assert exit_.value.code == 2 and "a whole number >= 1" in capsys.readouterr().err


# -- 1. rich tables must not cut ids --------------------------------------------------------------------


@pytest.mark.usefixtures("_no_configured_pools")
def test_a_narrow_lint_table_wraps_codes_dags_and_tasks_instead_of_cutting_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__STAGE_LENGTH", "5m")  # its 5-minute tasks: no stage-length-mismatch
    assert run_cli("lint", str(long_ids_dag_file(tmp_path)), "--no-granularity") == 0
    out = capsys.readouterr().out
    # one finding: the GPU tasks are on a stock weight rule
    assert [table_column(out, i) for i in (1, 2, 3)] == ["incomparable-priority", LONG_IDS_DAG, LONG_IDS[0]]


# -- GPU declaration errors: findings with code, DAG and task, in every format -----------------------------
_DECLARED_WRONGLY = """
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("declared", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}, schedule=None):
    GpuBashOperator(task_id="huge", bash_command="true", gpus=16, duration="1h")
    GpuBashOperator(task_id="typo", bash_command="true", duration="forty", lease_timeout="soon")
    GpuBashOperator(task_id="kind", bash_command="true", gpu_type="h999", duration="1h")
    EmptyOperator(task_id="hinted", executor_config=gpu_hints(duration="forty minutes"))
"""

_MAPPED_WRONGLY = """
from airflow.sdk import DAG
from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("mapped", schedule=None):
    GpuBashOperator.partial(task_id="sweep", bash_command="true", duration="1h").expand(gpus=[1, 2])
"""

_EXPECTED = {
    ("impossible-request", "declared", "huge"),
    ("bad-estimate", "declared", "typo"),
    ("bad-lease-timeout", "declared", "typo"),
    ("unknown-gpu-type", "declared", "kind"),
    ("bad-estimate", "declared", "hinted"),
    ("mapped-gpu-request", "mapped", "sweep"),
}


@pytest.fixture
def _static_eight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "8xa100:80GiB")
    monkeypatch.setenv("COLUMNS", "250")


@pytest.mark.usefixtures("_static_eight")
@pytest.mark.parametrize("output", ["json", "yaml", "plain", "table"])
def test_every_gpu_declaration_error_of_a_file_is_a_finding_in_every_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    """Each wrongly declared task is a finding with its code, DAG and task, in every format: failing the
    file's import at the first would give one ``import-error`` with none of them (in plain, the last
    line of its traceback) and leave the other tasks unchecked."""
    (tmp_path / "declared.py").write_text(_DECLARED_WRONGLY)
    (tmp_path / "mapped.py").write_text(_MAPPED_WRONGLY)
    assert run_cli("lint", str(tmp_path), "--pool", "gpu_default=8", "-o", output) == 1
    out = capsys.readouterr().out
    if output in ("json", "yaml"):
        report = json.loads(out) if output == "json" else yaml.safe_load(out)
        assert report["import_errors"] == []
        rows = report["findings"]
        assert {(f["code"], f["dag_id"], f["task_id"]) for f in rows if f["severity"] == "error"} == _EXPECTED
        assert all(f["message"] and f["fix"] for f in rows)
    elif output == "plain":
        rows = [dict(zip(LINT_COLUMNS, line.split("\t"), strict=True)) for line in out.splitlines()[1:]]
        assert {(r["code"], r["dag_id"], r["task_id"]) for r in rows if r["severity"] == "error"} == _EXPECTED
    else:
        assert "IMPORT ERROR" not in out
        for code, dag_id, task_id in _EXPECTED:
            assert f" {code} " in out and f" {dag_id} " in out and f" {task_id} " in out
        # the mapped DAG's file stops at its error (no DAG); 'huge' is beyond the pool and the inventory
        assert "FAILED: 1 DAG(s) in 2 file(s); 7 error(s)" in out


def test_plain_keeps_an_import_errors_whole_exception() -> None:
    """``-o plain`` prints the whole exception, not the traceback's last line: a message of several
    lines must not shrink to its last one."""
    from airflow_gpu_dag.cli.lint import exception_text

    traceback = (
        "Traceback (most recent call last):\n"
        '  File "dags/a.py", line 3, in <module>\n'
        "    build()\n"
        "ValueError: first problem\n"
        "second problem\n"
    )
    assert exception_text(traceback) == "ValueError: first problem second problem"
    assert exception_text("AirflowDagDuplicatedIdException: Ignoring DAG d") == (
        "AirflowDagDuplicatedIdException: Ignoring DAG d"
    )


# -- CPU tasks and teardowns without an estimate -----------------------------------------------------------
_PIPELINE_WITH_TEARDOWN = """
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE
from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("finetune", default_args={{"weight_rule": CRITICAL_PATH_WEIGHT_RULE{extra}}}, schedule=None):
    load = EmptyOperator(task_id="load")
    train = GpuBashOperator(task_id="train", bash_command="true", gpus=2, duration="1h")
    release = EmptyOperator(task_id="release").as_teardown(setups=load)
    load >> train >> release
"""


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_warns_about_cpu_tasks_without_an_estimate_only_when_strict_and_never_about_teardowns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CPU task without an estimate ('load') is a missing-estimate warning only under --strict, and a
    teardown ('release') never is: its duration does not lengthen the critical path."""
    path = tmp_path / "finetune.py"
    path.write_text(_PIPELINE_WITH_TEARDOWN.format(extra=""))
    code, report = run_json(capsys, "lint", str(path), "--no-granularity")
    assert (code, report["findings"]) == (0, [])
    code, report = run_json(capsys, "lint", str(path), "--no-granularity", "--strict")
    assert code == 1
    assert [(f["code"], f["task_id"]) for f in report["findings"]] == [("missing-estimate", "load")]
    path.write_text(_PIPELINE_WITH_TEARDOWN.format(extra=', "gpu_dag_default_duration": "10m"'))
    code, report = run_json(capsys, "lint", str(path), "--no-granularity", "--strict")
    assert (code, report["findings"]) == (0, []), "the DAG's default duration is its CPU tasks' estimate"
    path.write_text(_PIPELINE_WITH_TEARDOWN.format(extra=', "gpu_dag_default_duration": "ten"'))
    code, report = run_json(capsys, "lint", str(path), "--no-granularity")
    assert code == 1
    assert [(f["code"], f["dag_id"]) for f in report["findings"]] == [("bad-default-duration", "finetune")]


# -- weight rules that cannot be compared across DAGs sharing a GPU pool -------------------------------------
_KEYED = """
from airflow.sdk import DAG
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE
from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("keyed", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}, schedule=None):
    GpuBashOperator(task_id="train", bash_command="true", gpus=2, duration="1h")
"""

_STOCK = """
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG("stock", schedule=None):
    BashOperator(task_id="eval", bash_command="true", pool="gpu_default", pool_slots=1)
"""


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_names_a_dag_whose_weight_rule_cannot_be_compared_with_the_dags_sharing_its_gpu_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DAG outside the provider (no hints) on Airflow's default rule is named, not only 'not a GPU
    DAG': its tasks in gpu_default always sort after the other DAGs' keys."""
    (tmp_path / "keyed.py").write_text(_KEYED)
    (tmp_path / "stock.py").write_text(_STOCK)
    code, report = run_json(capsys, "lint", str(tmp_path), "--no-granularity")
    assert code == 0  # a warning
    (found,) = [f for f in report["findings"] if f["code"] == "incomparable-weight-rule"]
    assert (found["severity"], found["dag_id"], found["task_id"]) == ("warning", "stock", None)
    assert (
        "'downstream'" in found["message"]
        and "gpu_default" in found["message"]
        and "'keyed'" in found["message"]
    )
    assert "CRITICAL_PATH_WEIGHT_RULE" in found["fix"]
    code, report = run_json(capsys, "lint", str(tmp_path / "stock.py"), "--no-granularity")
    assert report["findings"] == [], "alone in the pool: nothing to compare with"


# -- the stage length against the DAGs' longest GPU task -----------------------------------------------------
_SHORT_EVAL = """
from airflow.sdk import DAG
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE
from airflow_gpu_dag.operators.gpu import GpuBashOperator

with DAG("quick_eval", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}, schedule=None):
    GpuBashOperator(task_id="score", bash_command="true", gpus=1, duration="12m")
    GpuBashOperator(task_id="report", bash_command="true", gpus=1, duration="4m")
"""


@pytest.mark.usefixtures("_no_configured_pools")
def test_lint_warns_when_the_longest_gpu_task_is_another_time_scale_than_the_stage_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keyed for 6-h stages, a pool whose longest GPU task takes 12 minutes runs on another time scale:
    one warning naming that DAG and task and the stage length to try; none at a fitting stage length or
    once a DAG with a 1-h task is linted with it."""
    (tmp_path / "quick_eval.py").write_text(_SHORT_EVAL)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__STAGE_LENGTH", raising=False)
    code, report = run_json(capsys, "lint", str(tmp_path), "--no-granularity")
    assert code == 0  # a warning
    (found,) = [f for f in report["findings"] if f["code"] == "stage-length-mismatch"]
    assert (found["severity"], found["dag_id"], found["task_id"]) == ("warning", "quick_eval", "score")
    assert "stage_length is 6h00m" in found["message"] and "takes 12m" in found["message"]
    assert "about 30x too long" in found["message"]
    assert "--stage-length 12m" in found["fix"]
    assert run_cli("lint", str(tmp_path), "--no-granularity", "--strict", "-o", "json") == 1
    capsys.readouterr()
    monkeypatch.setenv("AIRFLOW__GPU_DAG__STAGE_LENGTH", "20m")
    code, report = run_json(capsys, "lint", str(tmp_path), "--no-granularity")
    assert [f for f in report["findings"] if f["code"] == "stage-length-mismatch"] == []
    monkeypatch.delenv("AIRFLOW__GPU_DAG__STAGE_LENGTH")
    (tmp_path / "keyed.py").write_text(_KEYED)  # a 1-h training task: a sixth of a stage
    code, report = run_json(capsys, "lint", str(tmp_path), "--no-granularity")
    assert [f for f in report["findings"] if f["code"] == "stage-length-mismatch"] == []
    monkeypatch.setenv("AIRFLOW__GPU_DAG__STAGE_LENGTH", "5m")  # that task is 12 stages of 5 min
    code, report = run_json(capsys, "lint", str(tmp_path), "--no-granularity")
    (found,) = [f for f in report["findings"] if f["code"] == "stage-length-mismatch"]
    assert "12 stages (over 3)" in found["message"] and "--stage-length 1h00m" in found["fix"]
