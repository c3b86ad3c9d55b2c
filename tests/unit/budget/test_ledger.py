"""GPU-hours that escaped the budget: each test is a way real usage went uncounted before.

* ``[gpu_dag] usage_ledger`` set: leases were still charged to ``<lease_dir>/usage.jsonl``, which no
  gate read;
* a retry ran with no claim: the retry callback closed the gate's claim, and the gate does not run
  again;
* a claim made before midnight (UTC) stopped counting against the pool's day while its task ran;
* a gate on a mapped task claimed one instance and let every instance run; a gate capping another
  pool than the task's claimed there while the task's usage was charged to its own pool."""

from __future__ import annotations

import contextlib
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


# -- the file ledger's own promises ----------------------------------------------------------------------
def _claim(
    task: str, hours: float, now: float = NOW, pool: str | None = "gpu", ttl: float = 86400
) -> BudgetClaim:
    return BudgetClaim("d", "r1", task, hours * 3600, pool, today(now), now, now + ttl)


def test_today_is_the_utc_day_of_an_epoch_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14: the local day is already the next one
    time.tzset()
    try:
        assert today(0) == "1970-01-01"
        assert today(86400 - 0.001) == "1970-01-01"
        assert today(86400) == "1970-01-02"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_an_explicit_ledger_path_wins_over_the_configured_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_gpu_dag.budget.ledger import usage_ledger_path

    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(tmp_path / "configured.jsonl"))
    assert usage_ledger_path(tmp_path / "mine.jsonl") == str(tmp_path / "mine.jsonl")
    assert usage_ledger_path(None) == str(tmp_path / "configured.jsonl")
    assert usage_ledger_path("") == str(tmp_path / "configured.jsonl")  # an empty name is no name


def test_summarise_without_a_pool_counts_no_pool_usage_nor_pool_claims() -> None:
    from airflow_gpu_dag.budget.ledger import summarise

    no_pool = UsageRecord("d", "r1", "fit", 1, (0,), NOW - 3600, NOW, pool=None)
    claims = [_claim("a", 2.0, pool=None), _claim("b", 1.0, pool="gpu")]
    usage = summarise([no_pool], claims, "d", "r1", None, NOW)
    assert (usage.pool_day_gpu_seconds, usage.pool_day_claimed_seconds) == (0.0, 0.0)
    assert (usage.run_gpu_hours, usage.run_claimed_hours) == (1.0, 3.0)  # the run's own, of any pool


def test_summarise_counts_only_todays_share_of_the_pool_and_other_runs_claims(ledger: str) -> None:
    from airflow_gpu_dag.budget.ledger import summarise
    from airflow_gpu_dag.gpu.usage import UsageLedger

    other_run = BudgetClaim("train", "r9", "fit", 3600, "gpu", today(NOW), NOW, NOW + 60)
    other_pool = BudgetClaim("train", "r9", "fit2", 7200, "other", today(NOW), NOW, NOW + 60)
    usage = summarise(UsageLedger(ledger).read(), [other_run, other_pool], "train", "r1", "gpu", NOW)
    assert usage.pool_day_claimed_hours == 1.0  # r9's claim in the pool counts, the other pool's not
    assert usage.run_claimed_seconds == 0.0  # neither is r1's
    assert usage.pool_day_gpu_hours == pytest.approx(7.0)


def test_a_gate_that_claims_again_finds_its_own_claim_even_when_the_cap_is_now_reached(
    tmp_path: Path,
) -> None:
    """A retried gate must pass on the claim it holds, not be blocked by it."""
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    cap = BudgetCap(gpu_hours_per_pool_day=3, pool="gpu")
    assert book.claim(cap, _claim("fit", 3.0), NOW).allowed  # the whole day's cap
    again = book.claim(cap, _claim("fit", 3.0), NOW + 60)
    assert again.allowed and "already claimed 3.000 GPU-h" in again.reason
    assert len(book._claims(None)) == 1
    assert not book.claim(cap, _claim("eval", 0.5), NOW + 60).allowed


def test_a_claim_counts_until_it_expires_and_is_dropped_by_the_next_write(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    cap = BudgetCap(gpu_hours_per_pool_day=3, pool="gpu")
    assert book.claim(cap, _claim("fit", 2.0, ttl=600), NOW).allowed
    assert book.usage("x", "y", "gpu", NOW + 599.9).pool_day_claimed_hours == 2.0
    assert book.usage("x", "y", "gpu", NOW + 600).pool_day_claimed_seconds == 0  # expired at its TTL
    assert book.claim(cap, _claim("eval", 2.0, now=NOW + 600), NOW + 600).allowed
    assert set(book._claims(None)) == {_claim("eval", 2.0).claim_id}  # the expired one pruned


def test_a_refused_claim_writes_nothing(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    decision = book.claim(BudgetCap(gpu_hours_per_run=1), _claim("fit", 2.0, pool=None), NOW)
    assert not decision.allowed and "this DAG run used 0.000 GPU-hours, cap 1" in decision.reason
    assert not book.claims_path.exists()


def test_a_ledger_in_a_folder_that_does_not_exist_yet_is_created_on_the_first_claim(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "budgets" / "2026" / "usage.jsonl")
    assert book.claim(BudgetCap(gpu_hours_per_run=10), _claim("fit", 1.0), NOW).allowed
    assert book.claims_path.is_file() and book.lock_path.is_file()
    assert repr(book) == f"FileBudgetLedger({str(tmp_path / 'budgets' / '2026' / 'usage.jsonl')!r})"


def test_claims_of_unicode_runs_are_kept_and_settled(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "données" / "usage.jsonl")
    claim = BudgetClaim("modèle_训练", "manual__été", "fit·1", 3600, "gpu", today(NOW), NOW, NOW + 60)
    assert book.claim(BudgetCap(gpu_hours_per_run=10), claim, NOW).allowed
    assert book.usage("modèle_训练", "manual__été", "gpu", NOW).run_claimed_hours == 1.0
    assert book.settle(claim.claim_id) and book._claims(None) == {}


def test_a_claims_file_that_is_not_utf8_is_refused_as_unreadable(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    book.claims_path.write_bytes(b'{"d|r|fit|-1": "\xff\xfe"}')
    decision = book.claim(BudgetCap(gpu_hours_per_run=10), _claim("eval", 1.0), NOW)
    assert not decision.allowed and str(book.claims_path) in decision.reason and "Fix:" in decision.reason
    assert book.claims_path.read_bytes() == b'{"d|r|fit|-1": "\xff\xfe"}'  # not overwritten


def test_reading_usage_with_an_unreadable_claims_file_raises_naming_the_file_and_the_fix(
    tmp_path: Path,
) -> None:
    from airflow_gpu_dag.budget.ledger import BudgetLedgerError

    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    book.claims_path.mkdir()  # not even a file
    with pytest.raises(BudgetLedgerError, match=r"usage\.jsonl\.claims\.json cannot be read .*Fix: repair"):
        book.usage("d", "r1", "gpu", NOW)


def test_a_malformed_claim_on_file_is_skipped_and_the_others_still_count(tmp_path: Path) -> None:
    import json

    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    good = _claim("fit", 2.0)
    book.claims_path.write_text(
        json.dumps({good.claim_id: good.to_dict(), "x": {"dag_id": "d"}, "y": "not a claim", "z": None})
    )
    assert book.usage("x", "y", "gpu", NOW).pool_day_claimed_hours == 2.0


def test_a_nan_claim_on_file_blocks_the_pool_instead_of_being_read_as_zero(tmp_path: Path) -> None:
    """NaN in the claims file (JSON allows it) must not make every gate of the pool pass."""
    import json

    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    broken = {**_claim("fit", 1.0).to_dict(), "gpu_seconds": float("nan")}
    book.claims_path.write_text(json.dumps({"d|r1|fit|-1": broken}))
    assert not book.claim(BudgetCap(gpu_hours_per_pool_day=100, pool="gpu"), _claim("eval", 1.0), NOW).allowed


def test_settling_an_unknown_claim_records_the_usage_and_writes_no_claims_file(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    record = UsageRecord("d", "r1", "fit", 1, (0, 1), NOW - 3600, NOW, pool="gpu", lease_id="l1")
    assert book.settle("d|r1|fit|-1", record) is False
    assert not book.claims_path.exists()
    assert book.usage("d", "r1", "gpu", NOW).run_gpu_hours == 2.0


def test_settling_closes_an_expired_claim_and_keeps_the_others_as_they_are(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    cap = BudgetCap(gpu_hours_per_run=100)
    expired, other = _claim("fit", 1.0, ttl=10), _claim("eval", 1.0, ttl=10)
    assert book.claim(cap, expired, NOW).allowed and book.claim(cap, other, NOW).allowed
    assert book.settle(expired.claim_id)  # long after its TTL: closed all the same
    assert set(book._claims(None)) == {other.claim_id}  # expired too, but not this settle's to drop
    assert book.settle(expired.claim_id) is False  # settled twice: no open claim the second time


def test_recording_is_idempotent_by_lease_id_and_records_without_one_all_count(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    leased = UsageRecord("d", "r1", "fit", 1, (0,), NOW - 3600, NOW, lease_id="l1")
    anonymous = UsageRecord("d", "r1", "fit", 1, (0,), NOW - 3600, NOW)
    for _ in range(2):
        book.record(leased)
        book.record(anonymous)
    assert book.usage("d", "r1", None, NOW).run_gpu_hours == 3.0  # l1 once, the anonymous one twice


def test_charged_matches_the_task_instance_and_any_try_when_none_is_given(tmp_path: Path) -> None:
    book = FileBudgetLedger(tmp_path / "usage.jsonl")
    book.record(UsageRecord("d", "r1", "fit", 2, (0,), NOW - 60, NOW, map_index=3, lease_id="l"))
    assert book.charged("d", "r1", "fit", 3, 2) and book.charged("d", "r1", "fit", 3, None)
    assert not book.charged("d", "r1", "fit", 3, 1)  # another try
    assert not book.charged("d", "r1", "fit", -1, None)  # another map index
    assert not book.charged("d", "r2", "fit", 3, None)
    assert not FileBudgetLedger(tmp_path / "nothing.jsonl").charged("d", "r1", "fit", 3, None)


def test_read_usage_of_a_ledger_whose_file_does_not_exist_yet_is_zero(tmp_path: Path) -> None:
    usage = read_usage(str(tmp_path / "usage.jsonl"), "d", "r1", "gpu", NOW)
    assert (usage.run_gpu_seconds, usage.pool_day_gpu_seconds, usage.day) == (0.0, 0.0, "2026-11-30")
    assert not (tmp_path / "usage.jsonl").exists()  # a read does not create the ledger


def _claim_racing(path: str, task: str, barrier: Any, results: Any) -> None:
    """Claim 2 of a 3 GPU-h run cap; the ledger read waits (up to 0.5 s) for the other claimant."""
    import threading

    original = FileBudgetLedger._records

    def records(self: FileBudgetLedger) -> list[UsageRecord]:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=0.5)  # both get here only if the lock let both in
        return original(self)

    book = FileBudgetLedger(path)
    book._records = records.__get__(book)  # type: ignore[method-assign]
    try:
        cap = BudgetCap(gpu_hours_per_run=3)
        allowed: object = book.claim(cap, _claim(task, 2.0, pool=None), NOW).allowed
    except Exception as err:  # reported, not lost in the thread or process
        allowed = repr(err)
    results.put((task, allowed))


def test_two_processes_claiming_at_once_cannot_both_pass_when_only_one_fits(tmp_path: Path) -> None:
    import multiprocessing

    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(2), context.Queue()
    path = str(tmp_path / "usage.jsonl")
    workers = [context.Process(target=_claim_racing, args=(path, t, barrier, results)) for t in ("a", "b")]
    for worker in workers:
        worker.start()
    outcomes = dict(results.get(timeout=20) for _ in workers)
    for worker in workers:
        worker.join(timeout=20)
    assert sorted(outcomes.values(), key=str) == [False, True], outcomes
    assert len(FileBudgetLedger(path)._claims(None)) == 1


def test_two_threads_claiming_at_once_cannot_both_pass_when_only_one_fits(tmp_path: Path) -> None:
    import queue
    import threading

    barrier, results = threading.Barrier(2), queue.Queue()
    path = str(tmp_path / "usage.jsonl")
    threads = [threading.Thread(target=_claim_racing, args=(path, t, barrier, results)) for t in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    outcomes = dict(results.get(timeout=1) for _ in threads)
    assert sorted(outcomes.values(), key=str) == [False, True], outcomes
