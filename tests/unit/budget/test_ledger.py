"""GPU-hours that escaped the budget: each test is a way real usage went uncounted before.

* ``[gpu_dag] usage_ledger`` set: leases were still charged to ``<lease_dir>/usage.jsonl``, which no
  gate read;
* a retry ran with no claim: the retry callback closed the gate's claim, and the gate does not run
  again;
* a claim made before midnight (UTC) stopped counting against the pool's day while its task ran;
* a gate on a mapped task claimed one instance and let every instance run; a gate capping another
  pool than the task's claimed there while the task's usage was charged to its own pool."""

from __future__ import annotations

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
from airflow_gpu_dag.budget.ledger import FileBudgetLedger, today
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.gpu.usage import UsageRecord
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from tests.unit.usage_ledgers import NOW


def _ctx(run_id: str = "r1") -> dict:
    return {"dag": SimpleNamespace(dag_id="rt"), "run_id": run_id, "ti": SimpleNamespace(map_index=-1)}


def _ti(try_number: int, hours: float, state: str) -> SimpleNamespace:
    return SimpleNamespace(
        dag_id="rt",
        run_id="r1",
        task_id="fit",
        map_index=-1,
        try_number=try_number,
        start_date=datetime.now(UTC) - timedelta(hours=hours),
        state=state,
    )


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_retry_runs_under_its_gates_claim(tmp_path: Path) -> None:
    # Cap 3 GPU-h per run; fit and eval each 2 GPUs x 1 h. fit's first try fails after 15 min.
    ledger = str(tmp_path / "usage.jsonl")
    with DAG("rt", schedule=None):
        hints = gpu_hints(gpus=2, duration="1h")
        fit = EmptyOperator(task_id="fit", pool="gpu_default", retries=2, executor_config=hints)
        ev = EmptyOperator(task_id="eval", pool="gpu_default", executor_config=hints)
        fit_gate = budget_gate(fit, gpu_hours_per_run=3, ledger=ledger)
        eval_gate = budget_gate(ev, gpu_hours_per_run=3, ledger=ledger)
    assert fit_gate.execute(_ctx())["allowed"]
    (on_retry,) = [c for c in fit.on_retry_callback if isinstance(c, SettleBudgetClaim)]
    on_retry({"ti": _ti(1, 0.25, "up_for_retry")})
    usage = read_usage(ledger, "rt", "r1", None)
    assert usage.run_gpu_hours == pytest.approx(0.5, abs=0.01)  # the failed try is charged ...
    assert usage.run_claimed_hours == pytest.approx(2.0)  # ... and the retry keeps its claim
    with pytest.raises(TaskDeferred):  # 0.5 used + 2 claimed + 2 asked > 3: eval waits
        eval_gate.execute(_ctx())
    (on_success,) = [c for c in fit.on_success_callback if isinstance(c, SettleBudgetClaim)]
    on_success({"ti": _ti(2, 1.0, "success")})
    usage = read_usage(ledger, "rt", "r1", None)
    assert (round(usage.run_gpu_hours, 2), usage.run_claimed_hours) == (2.5, 0)
    on_retry({"ti": _ti(1, 0.25, "up_for_retry")})  # a callback run twice charges the try once
    assert read_usage(ledger, "rt", "r1", None).run_gpu_hours == pytest.approx(2.5, abs=0.01)


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_a_claim_made_before_midnight_counts_while_its_task_runs(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    cap = BudgetCap(gpu_hours_per_pool_day=10, pool="gpu")
    late = datetime(2026, 11, 30, 23, 50, tzinfo=UTC).timestamp()
    first = BudgetClaim("d1", "r1", "fit", 8 * 3600, "gpu", today(late), late, late + 86400)
    assert book.claim(cap, first, late).allowed
    after_midnight = datetime(2026, 12, 1, 0, 5, tzinfo=UTC).timestamp()
    second = BudgetClaim(
        "d2", "r2", "fit", 8 * 3600, "gpu", today(after_midnight), after_midnight, after_midnight + 86400
    )
    decision = book.claim(cap, second, after_midnight)
    assert not decision.allowed  # 8 claimed (still running) + 8 > 10
    assert book.usage("x", "y", "gpu", after_midnight).pool_day_claimed_seconds == 8 * 3600
    book.settle(
        first.claim_id, UsageRecord("d1", "r1", "fit", 1, (0, 1, 2, 3), late, late + 7200, pool="gpu")
    )
    # once settled, only what it used after midnight counts today: 4 GPUs x 1h50m
    assert book.usage("x", "y", "gpu", late + 7300).pool_day_gpu_hours == pytest.approx(4 * (110 / 60))


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_an_unreadable_claims_file_makes_gates_wait_instead_of_dropping_its_claims(tmp_path: Path) -> None:
    # Read as empty, the file would be overwritten by the next claim and every open claim forgotten.
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    cap = BudgetCap(gpu_hours_per_pool_day=10, pool="gpu")
    now = datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()
    held = BudgetClaim("d1", "r1", "fit", 8 * 3600, "gpu", today(now), now, now + 86400)
    assert book.claim(cap, held, now).allowed
    damaged = book.claims_path.read_text()[:-5]
    book.claims_path.write_text(damaged)
    other = BudgetClaim("d2", "r2", "fit", 1 * 3600, "gpu", today(now), now, now + 86400)
    decision = book.claim(cap, other, now)
    assert not decision.allowed and "cannot be read" in decision.reason and "Fix: repair" in decision.reason
    assert book.claims_path.read_text() == damaged  # nothing overwritten
    record = UsageRecord("d1", "r1", "fit", 1, (0,), now, now + 60, pool="gpu", lease_id="x")
    with pytest.raises(RuntimeError, match="cannot be read"):
        book.settle(held.claim_id, record)
    assert [r.lease_id for r in book._records()] == ["x"]  # the usage is recorded all the same


def _record(lease_id: str, hours: float) -> UsageRecord:
    return UsageRecord("train", "r1", "fit", 1, (0,), NOW - hours * 3600, NOW, pool="gpu", lease_id=lease_id)


@pytest.mark.usefixtures("_no_variables")
def test_a_record_charged_after_a_torn_last_line_is_counted(tmp_path: Path) -> None:
    ledger = tmp_path / "usage.jsonl"
    book = FileBudgetLedger(ledger)
    book.record(_record("a", 1.0))
    with ledger.open("a", encoding="utf-8") as handle:
        handle.write('{"dag_id": "train", "run_id": "r1", "start": 17')  # a writer died mid-write
    book.record(_record("b", 2.0))
    book.settle("no|such|claim|-1", _record("c", 4.0))
    assert read_usage(str(ledger), "train", "r1", "gpu", NOW).run_gpu_hours == pytest.approx(7.0)  # before: 1


@pytest.mark.usefixtures("_no_variables")
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


@pytest.mark.usefixtures("_deferring")
def test_read_usage_sums_by_run_and_pool_day(ledger: str) -> None:
    usage = read_usage(ledger, "train", "r1", "gpu", now=NOW)
    assert usage.run_gpu_hours == pytest.approx(3.0)
    assert usage.pool_day_gpu_hours == pytest.approx(7.0)  # r1 3h + r2 4h today; yesterday not counted
    assert usage.day == "2026-11-30"
    assert read_usage(None, "train", "r1", "gpu").run_gpu_seconds == 0.0
    assert read_usage(ledger + ".missing", "train", "r1", "gpu").pool_day_gpu_seconds == 0.0


@pytest.mark.usefixtures("_deferring")
def test_budget_gate_claims_the_tasks_expected_use_and_settles_it(tmp_path: Path, monkeypatch) -> None:
    from airflow_gpu_dag.budget.charge import SettleBudgetClaim
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)
    ledger = str(tmp_path / "usage.jsonl")
    with DAG("claims", schedule=None):
        fit = GpuBashOperator(task_id="fit", bash_command="true", gpus=2, duration="1h")
        gate = budget_gate(fit, gpu_hours_per_run=3, ledger=ledger)
    assert (gate.gated_task_id, gate.claim_gpu_seconds) == ("fit", 7200)
    settles = [cb for cb in fit.on_success_callback if isinstance(cb, SettleBudgetClaim)]
    assert (
        len(settles) == 1 and settles[0] in fit.on_failure_callback and settles[0] in fit.on_skipped_callback
    )
    context = {"dag": SimpleNamespace(dag_id="claims"), "run_id": "r1", "ti": SimpleNamespace(map_index=-1)}
    assert gate.execute(context)["allowed"]
    assert read_usage(ledger, "claims", "r1", None).run_claimed_hours == 2
    with pytest.raises(TaskDeferred):  # a second task of 2 GPU-hours does not fit in what is left
        BudgetGateOperator(
            task_id="g2", gpu_hours_per_run=3, ledger=ledger, gated_task_id="other", claim_gpu_seconds=7200
        ).execute(context)
    # the task ends without a lease record: charged GPUs x its run time, the claim is closed
    started = datetime.now(UTC) - timedelta(minutes=30)
    ti = SimpleNamespace(
        dag_id="claims", run_id="r1", task_id="fit", map_index=-1, try_number=1, start_date=started
    )
    settles[0]({"ti": ti})
    usage = read_usage(ledger, "claims", "r1", None)
    assert usage.run_claimed_seconds == 0 and usage.run_gpu_hours == pytest.approx(1.0, abs=0.01)
    with DAG("too_big", schedule=None):
        big = GpuBashOperator(task_id="big", bash_command="true", gpus=4, duration="2h")
        with pytest.raises(
            ValueError, match=r"DAG 'too_big', task 'big__budget': the gated task is expected to use 8"
        ):
            budget_gate(big, gpu_hours_per_run=4)
