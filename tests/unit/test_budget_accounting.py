"""GPU-hours that escaped the budget: each test is a way real usage went uncounted before.

* ``[gpu_dag] usage_ledger`` set: leases were still charged to ``<lease_dir>/usage.jsonl``, which no
  gate read;
* a retry ran with no claim: the retry callback closed the gate's claim, and the gate does not run
  again;
* a claim made before midnight (UTC) stopped counting against the pool's day while its task ran;
* a gate on a mapped task claimed one instance and let every instance run; a gate capping another
  pool than the task's claimed there while the task's usage was charged to its own pool.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import TaskDeferred

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.budget import read_usage
from airflow_gpu_dag.budget.charge import SettleBudgetClaim
from airflow_gpu_dag.budget.check import budget_ledger
from airflow_gpu_dag.budget.ledger import FileBudgetLedger, today
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.gpu.inventory import parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings
from airflow_gpu_dag.gpu.usage import UsageRecord


@pytest.fixture(autouse=True)
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)


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


def test_without_the_option_leases_stay_in_the_lease_directory(tmp_path: Path) -> None:
    settings = LeaseSettings(lease_dir=tmp_path)
    assert settings.usage_file == tmp_path / "usage.jsonl"


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


def test_a_mapped_task_cannot_be_gated(tmp_path: Path) -> None:
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    with DAG("mp", schedule=None):
        fit = GpuBashOperator.partial(task_id="fit", gpus=2, duration="1h").expand(bash_command=["a", "b"])
        with pytest.raises(
            ValueError, match="DAG 'mp', task 'fit': budget_gate\\(\\) cannot gate a mapped task"
        ):
            budget_gate(fit, gpu_hours_per_run=3, ledger=str(tmp_path / "usage.jsonl"))


def test_a_pool_cap_on_another_pool_than_the_tasks_is_refused(tmp_path: Path) -> None:
    with DAG("pm", schedule=None):
        fit = EmptyOperator(task_id="fit", executor_config=gpu_hints(gpus=4, duration="1h"))
        with pytest.raises(
            ValueError, match=r"task runs in pool 'default_pool'.*Fix: set the task's pool='gpu_a100'"
        ):
            budget_gate(fit, gpu_hours_per_pool_day=6, pool="gpu_a100", ledger=str(tmp_path / "u.jsonl"))
        inside = EmptyOperator(
            task_id="inside", pool="gpu_a100", executor_config=gpu_hints(gpus=4, duration="1h")
        )
        gate = budget_gate(
            inside, gpu_hours_per_pool_day=6, pool="gpu_a100", ledger=str(tmp_path / "u.jsonl")
        )
    assert gate.cap.pool == "gpu_a100"


def test_an_unreadable_claims_file_makes_gates_wait_instead_of_dropping_its_claims(tmp_path: Path) -> None:
    # Before: read as empty, so the next claim overwrote it and every open claim was forgotten.
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


def test_creating_the_shared_ledger_tables_is_retried_then_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes that create a new shared ledger at once all but one fail ("table already exists"): the
    creation is tried 5 times, 0.05 s x the attempt apart, and the last failure is raised."""
    from sqlalchemy.exc import OperationalError

    from airflow_gpu_dag.budget import shared

    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)  # tenacity's sleep
    failures = [OperationalError("CREATE TABLE", {}, Exception(f"already exists {n}")) for n in range(5)]

    class Meta:
        calls = 0

        def create_all(self, engine: object, checkfirst: bool) -> None:
            assert checkfirst
            Meta.calls += 1
            if failures:
                raise failures.pop(0)

    del failures[2:]  # two processes won the race first
    shared._create_tables(Meta(), None)
    assert Meta.calls == 3 and slept == pytest.approx([0.05, 0.1])
    Meta.calls, slept[:] = 0, []
    failures[:] = [OperationalError("CREATE TABLE", {}, Exception(f"already exists {n}")) for n in range(6)]
    with pytest.raises(OperationalError, match="already exists 4"):
        shared._create_tables(Meta(), None)
    assert Meta.calls == 5 and slept == pytest.approx([0.05, 0.1, 0.15, 0.2])
