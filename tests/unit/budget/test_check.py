"""Tests of ``airflow_gpu_dag.budget.check``, the GPU-hour budget gate:

* a gate with only a per-run cap claims in its task's pool, so the gates capping that pool's day see
  the claim while the task runs;
* ``[gpu_dag] budget_claim_ttl = 0`` does not make every claim expire as it is made;
* a cap Variable that is not a number (``"300h"``) or is negative is not ignored without a word;
* a GPU operator or GPU pod that never got its GPUs (lease wait timed out, pod never started) is not
  charged GPUs x the try's run time, and a lease left to be reclaimed is charged once."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
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
from airflow_gpu_dag.budget.check import budget_ledger, claim_budget, claim_ttl_seconds
from airflow_gpu_dag.budget.ledger import FileBudgetLedger
from airflow_gpu_dag.budget.shared import SqlBudgetLedger
from airflow_gpu_dag.core.model.budget import BudgetCap
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.triggers.budget import BudgetTrigger


def _ctx(dag_id: str, run_id: str = "r1") -> dict[str, Any]:
    return {"dag": SimpleNamespace(dag_id=dag_id), "run_id": run_id, "ti": SimpleNamespace(map_index=-1)}


@pytest.mark.usefixtures("_deferring", "_no_variables")
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


@pytest.mark.usefixtures("_deferring", "_no_variables")
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


@pytest.mark.usefixtures("_deferring", "_no_variables")
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


def _context(dag_id: str = "train", run_id: str = "r1") -> dict:
    return {"dag": SimpleNamespace(dag_id=dag_id), "run_id": run_id}


@pytest.mark.usefixtures("_deferring")
def test_gate_passes_under_cap_and_defers_over_it(ledger: str, monkeypatch) -> None:
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)
    with DAG("g", schedule=None):
        ok = BudgetGateOperator(task_id="ok", gpu_hours_per_run=1000, ledger=ledger)
        over = BudgetGateOperator(task_id="over", gpu_hours_per_run=3, ledger=ledger, poke_interval=5)
    assert ok.execute(_context())["allowed"]
    with pytest.raises(TaskDeferred) as deferred:
        over.execute(_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, BudgetTrigger)
    assert trigger.serialize()[1]["cap"]["gpu_hours_per_run"] == 3
    with pytest.raises(TaskDeferred):  # resumed while still over the cap: it claims again and waits
        over.execute_complete(_context(), {"reason": "raised"})
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: 10.0)
    assert over.execute_complete(_context(), {"reason": "raised"})["waited"]


@pytest.mark.usefixtures("_deferring")
def test_budget_ledger_follows_budget_conn_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "shared.db"
    monkeypatch.setenv("AIRFLOW_CONN_GPU_DAG_BUDGET", json.dumps({"conn_type": "sqlite", "host": str(db)}))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__BUDGET_CONN_ID", "gpu_dag_budget")
    book = gate_module.budget_ledger()
    assert isinstance(book, SqlBudgetLedger) and db.exists()
    assert isinstance(
        gate_module.budget_ledger(str(tmp_path / "x.jsonl")), FileBudgetLedger
    )  # explicit file wins
    monkeypatch.delenv("AIRFLOW__GPU_DAG__BUDGET_CONN_ID")
    assert isinstance(gate_module.budget_ledger(), FileBudgetLedger)


@pytest.mark.usefixtures("_no_variables")
def test_a_cap_variable_that_cannot_be_read_is_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from airflow.sdk import Variable

    monkeypatch.undo()  # the real _variable_float

    def denied(key: str, default: object = None) -> object:
        raise PermissionError("access denied by the secrets backend")

    monkeypatch.setattr(Variable, "get", staticmethod(denied))
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.budget.check"):
        cap = gate_module.effective_cap(BudgetCap(gpu_hours_per_run=40), "train")
    assert cap.gpu_hours_per_run == 40  # the DAG's cap stays
    # before: nothing was logged
    assert "could not read Variable gpu_dag_budget.run.train (PermissionError" in caplog.text


#: Bound on a wait that the code under test never reaches (only a hang would): no assertion
#: depends on how long anything takes.
GUARD = 5.0


# -- 1. the budget trigger's ledger read does not hold the thread other triggers share -------------------
def test_a_blocked_budget_read_does_not_hold_the_thread_other_triggers_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The read must not run in the one thread every thread-sensitive ``sync_to_async`` call of the
    triggerer runs in (asgiref's default; Airflow's ExternalTaskSensor and human-in-the-loop triggers,
    every other budget gate): a read blocked on the file ledger's lock or a SQL database that does not
    answer would hold all of them."""
    from asgiref.sync import sync_to_async

    import airflow_gpu_dag.budget.check as budget_check
    from airflow_gpu_dag.core.model.budget import BudgetCap

    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    class Allowed:
        allowed, reason = True, "cap raised"

    def blocked_read(*args: Any, **kwargs: Any) -> Allowed:
        order.append("budget read started")
        started.set()
        order.append("budget read released" if release.wait(GUARD) else "budget read gave up")
        return Allowed()

    monkeypatch.setattr(budget_check, "check_budget", blocked_read)
    trigger = BudgetTrigger("d", "r1", BudgetCap(gpu_hours_per_run=3).to_dict(), None, 30.0)

    def another_trigger_call() -> None:  # e.g. WorkflowTrigger's sync_to_async(get_task_states)
        order.append("other trigger's call")
        release.set()

    async def main() -> dict[str, Any]:
        async def first() -> dict[str, Any]:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("no event")

        gate = asyncio.create_task(first())
        assert await asyncio.to_thread(started.wait, GUARD)
        await sync_to_async(another_trigger_call)()
        return await gate

    assert asyncio.run(main()) == {"status": "allowed", "reason": "cap raised"}
    assert order == ["budget read started", "other trigger's call", "budget read released"], order


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_leases_are_charged_to_the_configured_usage_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger" / "usage.jsonl"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(ledger))
    settings = LeaseSettings.from_config()
    assert settings.usage_file == ledger
    manager = LeaseManager(settings, parse_inventory("4xa100:80GiB"))
    owner = LeaseOwner(dag_id="d", run_id="r", task_id="t", try_number=1, pool="gpu_default")
    lease = manager.acquire(GpuRequest(4), owner)
    time.sleep(0.05)
    lease.release()
    assert not (tmp_path / "leases" / "usage.jsonl").exists()
    book = budget_ledger()
    assert isinstance(book, FileBudgetLedger) and book.path == ledger
    used = book.usage("d", "r", "gpu_default")
    assert used.run_gpu_seconds > 0
    assert used.pool_day_gpu_seconds == pytest.approx(used.run_gpu_seconds, abs=1e-3)


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("poke_interval", [0, -5])
def test_the_budget_trigger_does_not_spin_on_a_zero_poke_interval(
    poke_interval: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BudgetGate(poke_interval=0) (or a negative one) must not re-read the ledger in a tight loop
    # (thousands of file or SQL reads a second per waiting gate, in the shared triggerer); like the
    # dataset and checkpoint triggers, it waits at least 0.1 s between checks.
    import asyncio

    import airflow_gpu_dag.budget.check as budget_check
    from airflow_gpu_dag.core.model.budget import BudgetCap
    from airflow_gpu_dag.triggers.budget import BudgetTrigger

    calls = {"n": 0}

    class Refused:
        allowed, reason = False, "over the cap"

    def check(*args: Any, **kwargs: Any) -> Refused:
        calls["n"] += 1
        return Refused()

    monkeypatch.setattr(budget_check, "check_budget", check)
    trigger = BudgetTrigger("train", "r1", BudgetCap(gpu_hours_per_run=3).to_dict(), None, poke_interval)

    slept: list[float] = []

    class Stop(Exception):
        pass

    async def sleep(seconds: float) -> None:  # the trigger's wait between checks, recorded
        slept.append(seconds)
        if len(slept) == 3:
            raise Stop

    monkeypatch.setattr(asyncio, "sleep", sleep)

    async def wait_a_while() -> None:
        async for _ in trigger.run():
            raise AssertionError("the budget never allowed the request")

    with pytest.raises(Stop):
        asyncio.run(wait_a_while())
    assert calls["n"] == 3 and slept == [0.1, 0.1, 0.1], (calls, slept)
