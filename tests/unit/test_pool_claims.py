"""``exclusive()`` / ``share()`` hold: their ``pool_size`` is the pool's size wherever that size is known.

``exclusive([b1, b2], pool="gpu_node1", pool_size=4)`` gives each task 4 slots; on a pool of 8 slots both
run at once. So a ``pool_size`` that differs from the pool's configured size (``[gpu_dag] pools``,
``lint --pool``, the static inventory's pools) is an error when the DAG file is parsed, naming the DAG,
the pool and both sizes; and ``airflow gpu-dag lint`` refuses DAGs that claim one pool with different
sizes (a finding naming both DAGs).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import exclusive, share
from airflow_gpu_dag.cli.definition import get_parser
from airflow_gpu_dag.operators.gpu import GpuBashOperator


@pytest.fixture(autouse=True)
def _nothing_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in ("POOLS", "MAX_GPUS_PER_HOST", "INVENTORY", "INVENTORY_SOURCE"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)


def _two(dag_id: str) -> tuple[DAG, list[EmptyOperator]]:
    with DAG(dag_id, schedule=None) as dag:
        tasks = [EmptyOperator(task_id=f"b{i}") for i in (1, 2)]
    return dag, tasks


def test_exclusive_with_a_pool_size_other_than_the_configured_one_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", json.dumps({"gpu_node1": 8}))
    _, tasks = _two("excl_small")
    with pytest.raises(ValueError, match=r"DAG 'excl_small'.*pool_size=4.*'gpu_node1' has 8 slots") as err:
        exclusive(tasks, pool="gpu_node1", pool_size=4)  # before: b1 and b2 took 4 of 8 slots each
    assert "[gpu_dag] pools" in str(err.value) and "Fix: pool_size=8" in str(err.value)
    assert [t.pool for t in tasks] == ["default_pool"] * 2  # refused before anything changed
    assert exclusive(tasks, pool="gpu_node1", pool_size=8) == {"b1": 8, "b2": 8}


def test_share_with_a_pool_size_other_than_the_configured_one_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", json.dumps({"gpu_node1": 8}))
    _, tasks = _two("share_small")
    refused = r"DAG 'share_small'.*share\(pool='gpu_node1', pool_size=4\).*8 slots"
    with pytest.raises(ValueError, match=refused):
        share([(t, 0.5) for t in tasks], pool="gpu_node1", pool_size=4)


def test_the_static_inventory_gives_the_size_of_its_gpu_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "8xa100:80GiB")
    with DAG("inv", schedule=None):
        tasks = [GpuBashOperator(task_id=f"b{i}", bash_command="true", gpu_type="a100") for i in (1, 2)]
    with pytest.raises(ValueError, match=r"'gpu_a100' has 8 slots \(the static inventory"):
        exclusive(tasks, pool="gpu_a100", pool_size=4)


def test_two_claims_of_one_pool_in_a_dag_must_agree_on_its_size() -> None:
    with DAG("two_claims", schedule=None):
        first = [EmptyOperator(task_id=f"a{i}") for i in (1, 2)]
        second = [EmptyOperator(task_id=f"b{i}") for i in (1, 2)]
    exclusive(first, pool="gpu_node1", pool_size=8)
    with pytest.raises(ValueError, match=r"DAG 'two_claims'.*pool_size=4.*'a1'.*pool_size=8") as err:
        exclusive(second, pool="gpu_node1", pool_size=4)
    assert "one pool has one size" in str(err.value)


# -- lint ----------------------------------------------------------------------------------------
def _lint(*argv: str) -> int:
    args = get_parser().parse_args(["gpu-dag", "lint", *argv])
    try:
        args.func(args)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return int(exc.code or 0)
    return 0


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


def test_lint_with_the_pool_size_refuses_an_exclusive_that_does_not_exclude(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _dag_file(tmp_path, "team_a", 4)
    assert _lint(str(path), "--pool", "gpu_node1=8", "-o", "plain") == 1  # before: OK
    out = capsys.readouterr().out
    assert "DAG 'team_a'" in out and "'gpu_node1' has 8 slots" in out and "pool_size=4" in out


def test_lint_refuses_two_dags_that_claim_one_pool_with_different_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _dag_file(tmp_path, "team_a", 4)
    _dag_file(tmp_path, "team_b", 8)
    assert _lint(str(tmp_path), "-o", "json") == 1
    report = json.loads(capsys.readouterr().out)
    (conflict,) = [f for f in report["findings"] if f["code"] == "pool-size-conflict"]
    assert conflict["severity"] == "error"
    assert "'team_a'" in conflict["message"] and "'team_b'" in conflict["message"]
    assert "pool_size=4" in conflict["message"] and "pool_size=8" in conflict["message"]


def test_lint_says_when_it_cannot_check_a_claimed_pool_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _dag_file(tmp_path, "team_a", 8)
    assert _lint(str(path), "-o", "json") == 0
    report = json.loads(capsys.readouterr().out)
    (unchecked,) = [f for f in report["findings"] if f["code"] == "pool-size-unchecked"]
    assert unchecked["severity"] == "warning" and "--pool gpu_node1=<slots>" in unchecked["fix"]
    assert _lint(str(path), "--pool", "gpu_node1=8", "-o", "json") == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    assert not [f for f in found if f["code"].startswith("pool-size")]
