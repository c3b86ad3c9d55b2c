"""GPU-hour budget: usage from the lease ledger, caps, the gate and its trigger."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.budget.check import claim_budget
from airflow_gpu_dag.budget.ledger import BudgetLedger, FileBudgetLedger, today
from airflow_gpu_dag.budget.shared import SqlBudgetLedger
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim, BudgetUsage, claim_id, evaluate
from airflow_gpu_dag.gpu.usage import UsageRecord

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


# -- claims: check and reserve in one step -------------------------------------------------------------
def _claim(task_id: str, gpu_seconds: float = 3600.0, run_id: str = "r9", now: float = NOW) -> BudgetClaim:
    return BudgetClaim("train", run_id, task_id, gpu_seconds, "gpu", today(now), now, now + 86400)


def _ledgers(tmp_path: Path) -> list[BudgetLedger]:
    return [
        FileBudgetLedger(tmp_path / "usage.jsonl"),
        SqlBudgetLedger(f"sqlite:///{tmp_path / 'budget.db'}"),
    ]


@pytest.mark.usefixtures("_deferring")
def test_evaluate_caps() -> None:
    usage = BudgetUsage(run_gpu_seconds=3 * 3600, pool_day_gpu_seconds=7 * 3600, day="2026-11-30")
    assert evaluate(BudgetCap(gpu_hours_per_run=4), usage).allowed
    blocked = evaluate(BudgetCap(gpu_hours_per_run=3), usage)
    assert not blocked.allowed and "cap 3" in blocked.reason
    pool = evaluate(BudgetCap(gpu_hours_per_pool_day=7, pool="gpu"), usage)
    assert not pool.allowed and "pool 'gpu'" in pool.reason and "2026-11-30" in pool.reason
    assert not evaluate(BudgetCap(gpu_hours_per_run=0), BudgetUsage(0, 0, "d")).allowed
    # a request must fit in what is left, claims count like usage
    assert evaluate(BudgetCap(gpu_hours_per_run=4), usage, request_gpu_seconds=3600).allowed
    short = evaluate(BudgetCap(gpu_hours_per_run=4), usage, request_gpu_seconds=3601)
    assert not short.allowed and "this task needs 1.000" in short.reason
    claimed = BudgetUsage(3 * 3600, 0, "d", run_claimed_seconds=1800)
    assert not evaluate(BudgetCap(gpu_hours_per_run=4), claimed, request_gpu_seconds=3600).allowed
    assert "+ 0.500 claimed" in evaluate(BudgetCap(gpu_hours_per_run=4), claimed).reason


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("kind", [0, 1], ids=["file", "sql"])
def test_settling_does_not_depend_on_the_wall_clock(tmp_path: Path, kind: int) -> None:
    # A claim made a year ago (long expired) and one made a year from now are both closed by settle,
    # in both ledgers alike: answering "no open claim" once the wall clock has passed the claim's
    # expiry would make this suite fail on the day after its fixed NOW.
    book = _ledgers(tmp_path)[kind]
    cap = BudgetCap(gpu_hours_per_pool_day=100, pool="gpu")
    for task_id, when in (("past", NOW - 365 * 86400), ("future", NOW + 365 * 86400)):
        assert book.claim(cap, _claim(task_id, now=when), when).allowed
        assert book.settle(claim_id("train", "r9", task_id))
        assert not book.settle(claim_id("train", "r9", task_id))


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("kind", [0, 1], ids=["file", "sql"])
def test_claims_count_until_settled_and_are_idempotent(tmp_path: Path, kind: int) -> None:
    book = _ledgers(tmp_path)[kind]
    cap = BudgetCap(gpu_hours_per_pool_day=1.5, pool="gpu")
    assert book.claim(cap, _claim("a"), NOW).allowed
    assert book.claim(cap, _claim("a"), NOW).allowed  # the same gate again (a retry): no second claim
    assert book.usage("train", "r9", "gpu", NOW).pool_day_claimed_seconds == 3600
    refused = book.claim(cap, _claim("b"), NOW)
    assert not refused.allowed and "+ 1.000 claimed" in refused.reason
    assert book.claim(cap, _claim("small", 1800), NOW).allowed  # what is left still fits
    assert not book.charged("train", "r9", "a", -1, 1)
    actual = UsageRecord("train", "r9", "a", 1, (0,), NOW - 600, NOW, pool="gpu", lease_id="lease-a")
    assert book.settle(claim_id("train", "r9", "a"), actual)
    assert book.charged("train", "r9", "a", -1, 1)
    assert not book.settle(claim_id("train", "r9", "a"))
    usage = book.usage("train", "r9", "gpu", NOW)
    assert (usage.pool_day_gpu_seconds, usage.pool_day_claimed_seconds) == (600, 1800)
    assert book.claim(cap, _claim("b", 1800), NOW).allowed  # the actual use was lower than claimed
    book.record(actual)  # idempotent by lease id
    assert book.usage("train", "r9", "gpu", NOW).pool_day_gpu_seconds == 600


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("kind", [0, 1], ids=["file", "sql"])
def test_expired_claims_no_longer_count(tmp_path: Path, kind: int) -> None:
    book = _ledgers(tmp_path)[kind]
    cap = BudgetCap(gpu_hours_per_run=1)
    old = BudgetClaim("train", "r9", "a", 3600, None, "2026-11-30", NOW - 90000, NOW - 10)
    assert book.claim(cap, old, NOW - 90000).allowed
    assert book.usage("train", "r9", None, NOW).run_claimed_seconds == 0
    assert book.claim(cap, _claim("b"), NOW).allowed


@pytest.mark.usefixtures("_deferring")
def test_a_variable_of_zero_pauses_gated_tasks_a_negative_one_is_ignored(monkeypatch) -> None:
    from airflow.sdk import Variable

    values = {"gpu_dag_budget.run.train": "0", "gpu_dag_budget.pool_day.gpu": "-1"}
    monkeypatch.setattr(Variable, "get", staticmethod(lambda key, default=None: values.get(key, default)))
    cap = gate_module.effective_cap(
        BudgetCap(gpu_hours_per_run=5, gpu_hours_per_pool_day=9, pool="gpu"), "train"
    )
    assert (cap.gpu_hours_per_run, cap.gpu_hours_per_pool_day) == (0, 9)
    assert not evaluate(cap, BudgetUsage(0, 0, "d")).allowed


@pytest.fixture
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)


@pytest.mark.usefixtures("_no_variables")
def test_a_nan_claim_in_the_ledger_does_not_let_every_gate_pass(tmp_path: Path) -> None:
    ledger = str(tmp_path / "usage.jsonl")
    cap = BudgetCap(gpu_hours_per_pool_day=10, pool="gpu")
    usage = BudgetUsage(0.0, 0.0, "2026-11-30", pool_day_claimed_seconds=math.nan)
    assert not evaluate(cap, usage, 3600.0).allowed  # before: allowed
    assert not evaluate(cap, BudgetUsage(0.0, 0.0, "2026-11-30"), math.nan).allowed
    first = claim_budget(
        cap, dag_id="a", run_id="r", task_id="t", map_index=-1, gpu_seconds=math.nan, ledger=ledger, now=NOW
    )
    assert not first.allowed  # a NaN claim is not written, so it cannot blind the next gate
    second = claim_budget(
        cap, dag_id="b", run_id="r", task_id="t", map_index=-1, gpu_seconds=100 * 3600, ledger=ledger, now=NOW
    )
    assert not second.allowed  # before: 100 GPU-h passed under a cap of 10
