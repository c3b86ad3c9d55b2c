"""GPU-hour budget defects found by an audit; each test failed before its fix.

* a gate with only a per-run cap claimed with no pool, so while its task ran, gates capping that
  pool's day did not see it and let the pool overspend;
* ``[gpu_dag] budget_claim_ttl = 0`` made every claim expire as it was made: every gate passed;
* a cap Variable that is not a number (``"300h"``) or is negative was ignored without a word;
* a GPU operator or GPU pod that never got its GPUs (lease wait timed out, pod never started) was
  charged GPUs x the try's run time, and a lease left to be reclaimed was charged twice.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import TaskDeferred

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.budget import read_usage
from airflow_gpu_dag.budget.charge import SettleBudgetClaim
from airflow_gpu_dag.budget.check import claim_budget, claim_ttl_seconds
from airflow_gpu_dag.core.model.budget import BudgetCap
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings


@pytest.fixture(autouse=True)
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)


def _ctx(dag_id: str, run_id: str = "r1") -> dict[str, Any]:
    return {"dag": SimpleNamespace(dag_id=dag_id), "run_id": run_id, "ti": SimpleNamespace(map_index=-1)}


def _ti(dag_id: str, task_id: str, hours: float, try_number: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        dag_id=dag_id,
        run_id="r1",
        task_id=task_id,
        map_index=-1,
        try_number=try_number,
        start_date=datetime.now(UTC) - timedelta(hours=hours),
        state="failed",
    )


def _settle(task: Any, kind: str = "on_failure_callback") -> SettleBudgetClaim:
    (callback,) = [c for c in getattr(task, kind) if isinstance(c, SettleBudgetClaim)]
    return callback


def test_a_run_cap_gates_claim_counts_against_its_tasks_pool_day(tmp_path: Path) -> None:
    # dag a: run cap only; dag b: 10 GPU-h a day in gpu_a100. Both tasks: 4 GPUs x 2 h in gpu_a100.
    ledger = str(tmp_path / "usage.jsonl")
    hints = gpu_hints(gpus=4, duration="2h")
    with DAG("a", schedule=None):
        fit_a = EmptyOperator(task_id="fit", pool="gpu_a100", executor_config=hints)
        gate_a = budget_gate(fit_a, gpu_hours_per_run=40, ledger=ledger)
    with DAG("b", schedule=None):
        fit_b = EmptyOperator(task_id="fit", pool="gpu_a100", executor_config=hints)
        gate_b = budget_gate(fit_b, gpu_hours_per_pool_day=10, ledger=ledger)
    assert gate_a.execute(_ctx("a"))["allowed"]
    assert read_usage(ledger, "x", "y", "gpu_a100").pool_day_claimed_hours == 8
    with pytest.raises(TaskDeferred):  # a's task runs in gpu_a100: 8 claimed + 8 asked > 10
        gate_b.execute(_ctx("b"))


def test_a_claim_ttl_of_zero_does_not_switch_claims_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__BUDGET_CLAIM_TTL", "0")
    ledger = str(tmp_path / "usage.jsonl")
    cap = BudgetCap(gpu_hours_per_pool_day=10, pool="gpu")
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.budget.check"):
        assert claim_ttl_seconds() == 24 * 3600
    assert "budget_claim_ttl '0' is not > 0; using 24h" in caplog.text
    decisions = [
        claim_budget(
            cap, dag_id=dag, run_id="r", task_id="fit", map_index=-1, gpu_seconds=8 * 3600, ledger=ledger
        )
        for dag in ("a", "b")
    ]
    assert [d.allowed for d in decisions] == [True, False]  # before: both, 16 GPU-h under a cap of 10


@pytest.mark.parametrize("value", ["300h", "-1", "nan"])
def test_a_cap_variable_that_is_not_a_number_is_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    from airflow.sdk import Variable

    monkeypatch.undo()  # the real _variable_float
    monkeypatch.setattr(Variable, "get", staticmethod(lambda key, default=None: value))
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.budget.check"):
        cap = gate_module.effective_cap(BudgetCap(gpu_hours_per_pool_day=200, pool="gpu"), "d")
    assert cap.gpu_hours_per_pool_day == 200
    assert f"Variable gpu_dag_budget.pool_day.gpu = {value!r} is not a number of GPU-hours" in caplog.text


def test_a_gpu_operator_that_never_got_its_lease_is_charged_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    ledger = str(tmp_path / "usage.jsonl")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", ledger)  # where its leases are charged
    with DAG("d", schedule=None):
        fit = GpuBashOperator(task_id="fit", bash_command="true", gpus=4, duration="2h")
        gate = budget_gate(fit, gpu_hours_per_run=40)
        hints = gpu_hints(gpus=2, duration="1h")
        plain = EmptyOperator(task_id="plain", pool="gpu_a100", executor_config=hints)
        budget_gate(plain, gpu_hours_per_run=40)
    assert gate.execute(_ctx("d"))["allowed"]
    # the try waited an hour for its lease and timed out: it never held a GPU
    _settle(fit)({"ti": _ti("d", "fit", hours=1.0)})
    usage = read_usage(ledger, "d", "r1", None)
    assert (usage.run_gpu_seconds, usage.run_claimed_seconds) == (0, 0)  # before: 4 GPU-h
    # a task with neither a lease nor a pod is still charged GPUs x its run time
    _settle(plain)({"ti": _ti("d", "plain", hours=0.5)})
    assert read_usage(ledger, "d", "r1", None).run_gpu_hours == pytest.approx(1.0, abs=0.01)


def test_a_lease_left_to_be_reclaimed_is_charged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    ledger = tmp_path / "usage.jsonl"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(ledger))
    with DAG("d", schedule=None):
        fit = GpuBashOperator(task_id="fit", bash_command="true", gpus=2, duration="1h")
        budget_gate(fit, gpu_hours_per_run=40, ledger=str(ledger))  # the same file, named
    manager = LeaseManager(LeaseSettings.from_config(), parse_inventory("2xa100:80GiB"))
    owner = LeaseOwner(dag_id="d", run_id="r1", task_id="fit", try_number=1, pool=fit.pool)
    lease = manager.acquire(GpuRequest(2), owner)
    time.sleep(0.05)
    # the command could not be stopped: the lease is left to be reclaimed, the task fails first
    _settle(fit)({"ti": _ti("d", "fit", hours=1.0)})
    lease.release("reclaimed")
    used = read_usage(str(ledger), "d", "r1", None).run_gpu_seconds
    assert 0 < used < 10  # the lease's seconds only; before: plus 2 GPUs x 1 h of run time


def test_a_gpu_pod_that_never_started_is_charged_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator

    ledger = str(tmp_path / "usage.jsonl")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", ledger)
    with DAG("pods", schedule=None):
        train = GpuKubernetesPodOperator(task_id="train", image="i", gpus=2, duration="1h")
        budget_gate(train, gpu_hours_per_run=40)
    _settle(train)({"ti": _ti("pods", "train", hours=0.5)})  # GpuPodNotScheduled after 30 min
    assert read_usage(ledger, "pods", "r1", None).run_gpu_seconds == 0  # before: 1 GPU-h
