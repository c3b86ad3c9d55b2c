"""GPU-hour budget: usage from the lease ledger, caps, the gate and its trigger."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.budget.check import claim_budget
from airflow_gpu_dag.budget.ledger import BudgetLedger, FileBudgetLedger, today
from airflow_gpu_dag.budget.shared import SqlBudgetLedger
from airflow_gpu_dag.core.model.budget import (
    BudgetCap,
    BudgetClaim,
    BudgetDecision,
    BudgetUsage,
    claim_id,
    evaluate,
)
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


# -- caps: validated where the DAG file builds them ------------------------------------------------------
WHERE = "DAG 'train', task 'fit__budget'"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (0, "gpu_hours_per_run=0 is zero"),
        (-0.0, "gpu_hours_per_run=-0.0 is zero"),
        (-1, "gpu_hours_per_run=-1 is negative"),
        (math.nan, "gpu_hours_per_run=nan is not a number of GPU-hours"),
        (math.inf, "gpu_hours_per_run=inf is not a number of GPU-hours"),
        (True, "gpu_hours_per_run=True is not a number of GPU-hours"),
        ("40", "gpu_hours_per_run='40' is not a number of GPU-hours"),
    ],
)
def test_a_cap_that_is_not_a_positive_number_is_refused_naming_the_task_and_the_fix(
    value: object, words: str
) -> None:
    with pytest.raises(ValueError) as caught:
        BudgetCap.checked(WHERE, gpu_hours_per_run=value)
    message = str(caught.value)
    assert message.startswith(f"{WHERE}: {words}")
    assert "gpu_hours_per_run=40" in message  # the fix


def test_a_cap_too_large_for_a_float_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a number of GPU-hours"):
        BudgetCap.checked(WHERE, gpu_hours_per_pool_day=10**400, pool="gpu")


def test_a_gate_without_any_cap_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"^DAG 'train', task 'fit__budget': a budget gate needs gpu_hours_per_run="
    ):
        BudgetCap.checked(WHERE)


@pytest.mark.parametrize("pool", [None, ""])
def test_a_per_day_cap_without_a_pool_is_refused_with_the_fix(pool: str | None) -> None:
    with pytest.raises(ValueError, match=r"gpu_hours_per_pool_day needs the pool it caps; pass pool="):
        BudgetCap.checked(WHERE, gpu_hours_per_pool_day=10, pool=pool)


def test_a_checked_cap_keeps_its_numbers_as_floats_and_its_pool() -> None:
    cap = BudgetCap.checked(WHERE, gpu_hours_per_run=4, gpu_hours_per_pool_day=0.5, pool="gpu_a100")
    assert cap == BudgetCap(4.0, 0.5, "gpu_a100")
    assert cap.to_dict() == {"gpu_hours_per_run": 4.0, "gpu_hours_per_pool_day": 0.5, "pool": "gpu_a100"}
    assert BudgetCap.checked(WHERE, gpu_hours_per_run=1e-6).gpu_hours_per_run == 1e-6  # tiny but > 0


def test_a_numpy_cap_computed_in_a_dag_file_is_read_as_its_number() -> None:
    """GPU counts accept NumPy's numbers (``GpuRequest``); a cap computed the same way is a number too."""
    np = pytest.importorskip("numpy")
    cap = BudgetCap.checked(WHERE, gpu_hours_per_run=np.int64(40))
    assert cap.gpu_hours_per_run == 40.0


# -- parse time: a request larger than a cap ----------------------------------------------------------------
def test_a_request_larger_than_a_cap_is_a_parse_time_error_naming_the_cap_and_the_fix() -> None:
    cap = BudgetCap(gpu_hours_per_run=40, gpu_hours_per_pool_day=10, pool="gpu")
    with pytest.raises(ValueError) as caught:
        cap.check_request(12 * 3600, WHERE)
    message = str(caught.value)
    assert message.startswith(f"{WHERE}: the gated task is expected to use 12 GPU-hours")
    assert "gpu_hours_per_pool_day=10, so its gate could never pass" in message
    assert "Fix: raise the cap to at least 12" in message


def test_a_request_exactly_the_cap_is_accepted_at_parse_time() -> None:
    BudgetCap(gpu_hours_per_run=4).check_request(4 * 3600, WHERE)
    BudgetCap(gpu_hours_per_pool_day=4, pool="gpu").check_request(0, WHERE)
    assert evaluate(BudgetCap(gpu_hours_per_run=4), BudgetUsage(0, 0, "d"), 4 * 3600).allowed


def test_a_request_the_gate_would_pass_on_an_empty_ledger_is_not_refused_at_parse_time() -> None:
    """0.1 + 0.2 GPU-hours against a cap of 0.3: ``evaluate`` passes it (it allows 1e-9 h of rounding),
    so the parse-time check must not call the gate one that 'could never pass'."""
    cap = BudgetCap(gpu_hours_per_run=0.3)
    request = (0.1 + 0.2) * 3600
    assert evaluate(cap, BudgetUsage(0, 0, "d"), request).allowed
    cap.check_request(request, WHERE)


def test_the_parse_time_fix_names_a_cap_above_the_one_that_refused() -> None:
    """8 GPUs x 18000.01 s is 40.00002 GPU-hours: the cap of 40 refuses it, and the fix must name more."""
    with pytest.raises(ValueError) as caught:
        BudgetCap(gpu_hours_per_run=40).check_request(8 * 18000.01, WHERE)
    match = re.search(r"raise the cap to at least ([0-9.e+]+)", str(caught.value))
    assert match is not None and float(match.group(1)) > 40


# -- evaluate: the arithmetic of docs/edges.md, "Budget cap" ------------------------------------------------
def test_a_request_that_exactly_fills_what_is_left_passes() -> None:
    usage = BudgetUsage(3 * 3600, 0, "d", run_claimed_seconds=1800)
    assert evaluate(BudgetCap(gpu_hours_per_run=4), usage, 1800).allowed
    assert not evaluate(BudgetCap(gpu_hours_per_run=4), usage, 1801).allowed


def test_float_rounding_in_the_usage_does_not_block_an_exact_fit() -> None:
    usage = BudgetUsage(0.1 * 3600, 0, "d", run_claimed_seconds=0.2 * 3600)
    assert evaluate(BudgetCap(gpu_hours_per_run=0.6), usage, 0.3 * 3600).allowed


def test_a_cap_already_reached_blocks_even_a_request_of_nothing() -> None:
    usage = BudgetUsage(0, 5 * 3600, "2026-11-30", pool_day_claimed_seconds=5 * 3600)
    decision = evaluate(BudgetCap(gpu_hours_per_pool_day=10, pool="gpu"), usage)
    assert not decision.allowed
    assert decision.reason == "pool 'gpu' used 5.000 + 5.000 claimed GPU-hours on 2026-11-30, cap 10 per day"


def test_the_run_cap_is_reported_before_the_pool_cap_when_both_block() -> None:
    usage = BudgetUsage(9 * 3600, 9 * 3600, "d")
    decision = evaluate(BudgetCap(gpu_hours_per_run=2, gpu_hours_per_pool_day=3, pool="gpu"), usage)
    assert not decision.allowed and decision.reason.startswith("this DAG run used 9.000 GPU-hours, cap 2")


def test_the_pool_cap_blocks_when_the_run_cap_has_room() -> None:
    usage = BudgetUsage(0, 3 * 3600, "d")
    decision = evaluate(BudgetCap(gpu_hours_per_run=100, gpu_hours_per_pool_day=3.5, pool="gpu"), usage, 3600)
    assert not decision.allowed and decision.reason.startswith("pool 'gpu' used 3.000 GPU-hours on d")
    assert decision.reason.endswith("cap 3.5 per day; this task needs 1.000")


def test_claims_of_the_run_do_not_count_against_the_pool_and_back() -> None:
    cap = BudgetCap(gpu_hours_per_run=1, gpu_hours_per_pool_day=1, pool="gpu")
    assert evaluate(cap, BudgetUsage(0, 0, "d", run_claimed_seconds=1800), 1800).allowed
    assert evaluate(cap, BudgetUsage(0, 0, "d", pool_day_claimed_seconds=1800), 1800).allowed
    both = BudgetUsage(0, 0, "d", run_claimed_seconds=1800, pool_day_claimed_seconds=1800)
    assert not evaluate(cap, both, 1801).allowed


def test_an_allowed_decision_says_what_was_used_and_needed() -> None:
    usage = BudgetUsage(1800, 7200, "2026-11-30", pool_day_claimed_seconds=3600)
    decision = evaluate(BudgetCap(gpu_hours_per_pool_day=10, pool="gpu"), usage, 900)
    assert decision == BudgetDecision(
        True,
        "within budget (run 0.500 GPU-h, pool 'gpu' 2.000 + 1.000 claimed GPU-h on 2026-11-30; "
        "this task needs 0.250)",
    )


@pytest.mark.parametrize("nan_field", ["run_gpu_seconds", "run_claimed_seconds"])
def test_a_nan_in_the_run_usage_blocks_the_run_cap(nan_field: str) -> None:
    usage = BudgetUsage(
        **{"run_gpu_seconds": 0.0, "pool_day_gpu_seconds": 0.0, "day": "d", nan_field: math.nan}
    )
    assert not evaluate(BudgetCap(gpu_hours_per_run=10), usage, 60).allowed


def test_a_nan_cap_built_without_checking_blocks() -> None:
    assert not evaluate(BudgetCap(gpu_hours_per_run=math.nan), BudgetUsage(0, 0, "d")).allowed


def test_no_cap_at_all_allows() -> None:
    assert evaluate(BudgetCap(), BudgetUsage(10**9, 10**9, "d"), 10**9).allowed


def test_usage_reads_in_hours() -> None:
    usage = BudgetUsage(5400, 7200, "d", run_claimed_seconds=900, pool_day_claimed_seconds=36)
    assert (usage.run_gpu_hours, usage.pool_day_gpu_hours) == (1.5, 2.0)
    assert (usage.run_claimed_hours, usage.pool_day_claimed_hours) == (0.25, 0.01)


# -- claims as data -------------------------------------------------------------------------------------
def test_a_claim_round_trips_through_its_dict_and_json() -> None:
    claim = BudgetClaim(
        "träin", "manual__2026-11-30T12:00:00+00:00", "fit", 7200.5, None, "2026-11-30", 1.5, 2.5, 3
    )
    assert BudgetClaim.from_dict(json.loads(json.dumps(claim.to_dict()))) == claim
    assert claim.claim_id == "träin|manual__2026-11-30T12:00:00+00:00|fit|3"


def test_a_claim_without_a_map_index_is_the_unmapped_task() -> None:
    data = _claim("fit").to_dict()
    del data["map_index"]
    restored = BudgetClaim.from_dict(data)
    assert restored.map_index == -1 and restored.claim_id == claim_id("train", "r9", "fit")


def test_the_instances_of_a_mapped_task_have_one_claim_each() -> None:
    ids = {claim_id("d", "r", "t", i) for i in (-1, 0, 1)}
    assert len(ids) == 3 and claim_id("d", "r", "t") == "d|r|t|-1"


def test_a_claim_written_with_numbers_as_strings_is_read_as_numbers() -> None:
    data = {
        **_claim("fit").to_dict(),
        "gpu_seconds": "3600",
        "created": "1",
        "expires": "2",
        "map_index": "4",
    }
    restored = BudgetClaim.from_dict(data)
    assert (restored.gpu_seconds, restored.created, restored.expires, restored.map_index) == (
        3600.0,
        1.0,
        2.0,
        4,
    )


def test_a_claim_missing_a_field_is_refused() -> None:
    data = _claim("fit").to_dict()
    del data["gpu_seconds"]
    with pytest.raises(KeyError, match="gpu_seconds"):
        BudgetClaim.from_dict(data)
