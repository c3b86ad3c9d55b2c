"""GPU-hour budget defects found by a second audit; each test failed before its fix.

* a gate built with ``claim_gpu_seconds=nan`` (or a negative claim) was accepted; its NaN claim made
  every later comparison with the pool's claimed total False, so every gate of the pool passed;
* ``poke_interval`` of 0, below 0, NaN or infinite was accepted by the gate (an infinite one never
  re-checked the budget);
* a cap too large for a float (``gpu_hours_per_run=10**400``) raised a bare ``OverflowError``
  naming neither the DAG nor the task;
* a record charged after a torn last line (a writer that crashed mid-write) shared that line and
  was skipped as unreadable: its usage was never counted;
* a templated ``ledger=`` was rendered for the gate but not for the settle callback, which closed
  nothing in the file the gate claimed in and charged a file named after the template;
* a cap Variable that could not be read (the secrets backend denied it) was ignored without a word.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.budget import read_usage
from airflow_gpu_dag.budget.charge import SettleBudgetClaim
from airflow_gpu_dag.budget.check import claim_budget
from airflow_gpu_dag.budget.ledger import FileBudgetLedger
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetUsage, evaluate
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.gpu.usage import UsageRecord
from airflow_gpu_dag.operators.budget import BudgetGateOperator

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)


@pytest.mark.parametrize("claim", [math.nan, math.inf, -3600.0, True, "1h"])
def test_a_claim_that_is_not_a_number_of_seconds_is_refused_naming_the_task(claim: object) -> None:
    with DAG("d", schedule=None), pytest.raises(ValueError, match="DAG 'd', task 'gate': claim_gpu_seconds="):
        BudgetGateOperator(
            task_id="gate",
            gpu_hours_per_pool_day=10,
            pool_to_cap="gpu",
            claim_gpu_seconds=claim,  # type: ignore[arg-type]
        )


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


@pytest.mark.parametrize("poke_interval", [0, -5, math.nan, math.inf, True])
def test_a_poke_interval_that_is_not_a_positive_number_is_refused(poke_interval: object) -> None:
    with DAG("d", schedule=None):
        fit = EmptyOperator(task_id="fit", pool="gpu_a100", executor_config=gpu_hints(gpus=1, duration="1h"))
        with pytest.raises(ValueError, match="DAG 'd', task 'fit__budget': poke_interval="):
            budget_gate(fit, gpu_hours_per_run=10, poke_interval=poke_interval)  # type: ignore[arg-type]


def test_a_cap_too_large_for_a_float_is_refused_naming_the_task() -> None:
    with DAG("d", schedule=None), pytest.raises(ValueError, match="DAG 'd', task 'gate': gpu_hours_per_run="):
        BudgetGateOperator(task_id="gate", gpu_hours_per_run=10**400)  # before: OverflowError
    assert BudgetCap.checked("here", gpu_hours_per_run=10**300).gpu_hours_per_run == 1e300


def _record(lease_id: str, hours: float) -> UsageRecord:
    return UsageRecord("train", "r1", "fit", 1, (0,), NOW - hours * 3600, NOW, pool="gpu", lease_id=lease_id)


def test_a_record_charged_after_a_torn_last_line_is_counted(tmp_path: Path) -> None:
    ledger = tmp_path / "usage.jsonl"
    book = FileBudgetLedger(ledger)
    book.record(_record("a", 1.0))
    with ledger.open("a", encoding="utf-8") as handle:
        handle.write('{"dag_id": "train", "run_id": "r1", "start": 17')  # a writer died mid-write
    book.record(_record("b", 2.0))
    book.settle("no|such|claim|-1", _record("c", 4.0))
    assert read_usage(str(ledger), "train", "r1", "gpu", NOW).run_gpu_hours == pytest.approx(7.0)  # before: 1


def test_a_templated_ledger_is_settled_in_the_file_the_gate_claimed_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where an unrendered relative-looking template would land
    template = str(tmp_path / "budgets" / "{{ dag.dag_id }}.jsonl")
    with DAG("train", schedule=None) as dag:
        fit = EmptyOperator(task_id="fit", pool="gpu_a100", executor_config=gpu_hints(gpus=2, duration="1h"))
        gate = budget_gate(fit, gpu_hours_per_run=10, ledger=template)
    context: dict[str, Any] = {"dag": dag, "run_id": "r1", "ti": SimpleNamespace(map_index=-1)}
    gate.render_template_fields(context)  # type: ignore[arg-type]
    assert gate.execute(context)["allowed"]
    rendered = str(tmp_path / "budgets" / "train.jsonl")
    assert read_usage(rendered, "train", "r1", "gpu_a100").run_claimed_hours == 2
    ti = SimpleNamespace(
        dag_id="train",
        run_id="r1",
        task_id="fit",
        map_index=-1,
        try_number=1,
        start_date=datetime.now(UTC) - timedelta(minutes=30),
        state="success",
    )
    (settle,) = [c for c in fit.on_success_callback if isinstance(c, SettleBudgetClaim)]
    settle({"ti": ti, "task": fit, "dag": dag, "run_id": "r1"})
    usage = read_usage(rendered, "train", "r1", "gpu_a100")
    assert usage.run_claimed_seconds == 0  # before: the claim stayed open (until its TTL)
    assert usage.run_gpu_hours == pytest.approx(1.0, abs=0.01)  # 2 GPUs x 30 min, charged here
    assert not list(tmp_path.rglob("*{{*"))  # nothing written to a file named after the template


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
