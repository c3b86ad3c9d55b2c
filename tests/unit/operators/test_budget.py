"""Tests of ``airflow_gpu_dag.operators.budget``."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import TaskDeferred

from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetDecision
from airflow_gpu_dag.operators import budget as gate_module
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.triggers.budget import BudgetTrigger


@pytest.mark.usefixtures("_no_variables")
@pytest.mark.parametrize("claim", [math.nan, math.inf, -3600.0, True, "1h"])
def test_a_claim_that_is_not_a_number_of_seconds_is_refused_naming_the_task(claim: object) -> None:
    with DAG("d", schedule=None), pytest.raises(ValueError, match="DAG 'd', task 'gate': claim_gpu_seconds="):
        BudgetGateOperator(
            task_id="gate",
            gpu_hours_per_pool_day=10,
            pool_to_cap="gpu",
            claim_gpu_seconds=claim,  # type: ignore[arg-type]
        )


@pytest.mark.usefixtures("_no_variables")
def test_a_cap_too_large_for_a_float_is_refused_naming_the_task() -> None:
    with DAG("d", schedule=None), pytest.raises(ValueError, match="DAG 'd', task 'gate': gpu_hours_per_run="):
        BudgetGateOperator(task_id="gate", gpu_hours_per_run=10**400)  # before: OverflowError
    assert BudgetCap.checked("here", gpu_hours_per_run=10**300).gpu_hours_per_run == 1e300


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_hours_per_run": -1}, "gpu_hours_per_run=-1 is negative"),
        ({"gpu_hours_per_run": 0}, "gpu_hours_per_run=0 is zero; a GPU-hour budget must be > 0.*Fix"),
        ({"gpu_hours_per_pool_day": -2.5, "pool_to_cap": "gpu"}, "gpu_hours_per_pool_day=-2.5 is negative"),
        (
            {"gpu_hours_per_run": 1, "claim_gpu_seconds": 7200},
            "expected to use 2 GPU-hours .*could never pass",
        ),
        ({"gpu_hours_per_run": "ten"}, "is not a number of GPU-hours"),
        ({"gpu_hours_per_pool_day": 5}, "needs the pool"),
        ({}, "needs gpu_hours_per_run= or gpu_hours_per_pool_day="),
    ],
)
def test_bad_budgets_fail_at_parse_time(kwargs: dict, message: str) -> None:
    with DAG("b", schedule=None), pytest.raises(ValueError, match=r"DAG 'b', task 'gate': .*" + message):
        BudgetGateOperator(task_id="gate", **kwargs)


# -- parse time -------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_variables")
@pytest.mark.parametrize("poke_interval", [0, -1, math.nan, math.inf, True, "30", 10**400])
def test_a_poke_interval_that_is_not_a_positive_number_of_seconds_is_refused_with_the_fix(
    poke_interval: object,
) -> None:
    with (
        DAG("d", schedule=None),
        pytest.raises(
            ValueError,
            match=r"DAG 'd', task 'gate': poke_interval=.* is not a finite number of seconds > 0\. "
            r"Fix: pass e\.g\. poke_interval=30\.",
        ),
    ):
        BudgetGateOperator(task_id="gate", gpu_hours_per_run=10, poke_interval=poke_interval)  # type: ignore[arg-type]


def test_a_gate_outside_a_dag_is_named_by_its_task() -> None:
    with pytest.raises(ValueError, match=r"^task 'loose': claim_gpu_seconds=-1"):
        BudgetGateOperator(task_id="loose", gpu_hours_per_run=10, claim_gpu_seconds=-1)


def test_a_gate_defaults_to_its_own_id_and_a_claim_of_zero() -> None:
    with DAG("d", schedule=None):
        gate = BudgetGateOperator(task_id="fit__budget", gpu_hours_per_run=10, deferrable=False)
        other = BudgetGateOperator(
            task_id="g2", gpu_hours_per_run=10, gated_task_id="fit", claim_gpu_seconds=36000, deferrable=True
        )
    assert (gate.gated_task_id, gate.claim_gpu_seconds, gate.deferrable) == ("fit__budget", 0.0, False)
    assert (other.gated_task_id, other.claim_gpu_seconds, other.deferrable) == ("fit", 36000.0, True)
    assert "ledger" in BudgetGateOperator.template_fields
    assert gate.retries >= 1  # a resume that loses the race is retried, not failed


# -- run time, with a fake ledger -------------------------------------------------------------------------
def _gate(deferrable: bool, **kwargs: Any) -> tuple[BudgetGateOperator, dict[str, Any]]:
    with DAG("train", schedule=None) as dag:
        gate = BudgetGateOperator(
            task_id="fit__budget",
            gpu_hours_per_run=10,
            gpu_hours_per_pool_day=100,
            pool_to_cap="gpu_a100",
            gated_task_id="fit",
            claim_gpu_seconds=7200,
            ledger="/ledgers/usage.jsonl",
            poke_interval=0.01,
            deferrable=deferrable,
            **kwargs,
        )
    ti = SimpleNamespace(map_index=-1, dag_id="train", task_id="fit__budget")
    return gate, {"dag": dag, "run_id": "r1", "ti": ti}


def _claims(monkeypatch: pytest.MonkeyPatch, *answers: BudgetDecision) -> list[dict[str, Any]]:
    """``claim_budget`` answers ``answers`` in turn (the last one again and again); returns its calls."""
    calls: list[dict[str, Any]] = []

    def claim(cap: BudgetCap, **kwargs: Any) -> BudgetDecision:
        calls.append({"cap": cap, **kwargs})
        return answers[min(len(calls), len(answers)) - 1]

    monkeypatch.setattr(gate_module, "claim_budget", claim)
    return calls


ROOM = BudgetDecision(True, "run train/r1: 2.000 GPU-h claimed of 10")
FULL = BudgetDecision(False, "run train/r1 used 9.000 GPU-hours, cap 10; this task needs 2.000")


def test_a_gate_with_room_claims_for_its_gated_task_and_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _claims(monkeypatch, ROOM)
    gate, context = _gate(deferrable=True)
    assert gate.execute(context) == {"allowed": True, "reason": ROOM.reason, "waited": False}
    (call,) = calls
    assert call == {
        "cap": BudgetCap(10, 100, "gpu_a100"),
        "dag_id": "train",
        "run_id": "r1",
        "task_id": "fit",
        "map_index": -1,
        "gpu_seconds": 7200.0,
        "ledger": "/ledgers/usage.jsonl",
    }


@pytest.mark.parametrize(("map_index", "claimed"), [(3, 3), (None, -1), ("2", -1)])
def test_the_claim_is_keyed_by_the_map_index_when_it_is_one(
    monkeypatch: pytest.MonkeyPatch, map_index: object, claimed: int
) -> None:
    calls = _claims(monkeypatch, ROOM)
    gate, context = _gate(deferrable=True)
    context["ti"].map_index = map_index
    gate.execute(context)
    assert calls[0]["map_index"] == claimed


def test_a_full_budget_defers_to_a_trigger_that_asks_for_the_same_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _claims(monkeypatch, FULL)
    gate, context = _gate(deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        gate.execute(context)
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, BudgetTrigger)
    assert (trigger.dag_id, trigger.run_id, trigger.ledger, trigger.poke_interval) == (
        "train",
        "r1",
        "/ledgers/usage.jsonl",
        0.01,
    )
    assert trigger.request_gpu_seconds == 7200.0
    assert BudgetCap(**trigger.cap) == BudgetCap(10, 100, "gpu_a100")
    logged = capsys.readouterr().out  # the task logger writes through structlog to stdout
    assert FULL.reason in logged
    assert "gpu_dag_budget.run.train" in logged and "gpu_dag_budget.pool_day.gpu_a100" in logged


def test_a_gate_without_a_triggerer_checks_again_from_its_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _claims(monkeypatch, FULL, FULL, ROOM)
    gate, context = _gate(deferrable=False)
    assert gate.execute(context) == {"allowed": True, "reason": ROOM.reason, "waited": True}
    assert len(calls) == 3


def test_a_resumed_gate_claims_again_and_reports_the_triggers_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _claims(monkeypatch, ROOM)
    gate, context = _gate(deferrable=True)
    result = gate.execute_complete(context, {"status": "allowed", "reason": "cap raised to 20"})
    assert result == {"allowed": True, "reason": "cap raised to 20", "waited": True}
    assert len(calls) == 1 and calls[0]["task_id"] == "fit"
    assert gate.execute_complete(context, None)["reason"] == ROOM.reason
    assert gate.execute_complete(context, {"reason": ""})["reason"] == ROOM.reason


def test_a_resumed_gate_that_lost_the_race_defers_again(monkeypatch: pytest.MonkeyPatch) -> None:
    _claims(monkeypatch, FULL)
    gate, context = _gate(deferrable=True)
    with pytest.raises(TaskDeferred):
        gate.execute_complete(context, {"status": "allowed", "reason": "room"})


def test_a_resumed_gate_that_no_longer_defers_does_not_pass_without_a_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Resumed on a worker whose ``[operators] default_deferrable`` is off, a gate that lost the race
    to another gate must wait (or fail), never return "allowed" with no room claimed."""
    calls = _claims(monkeypatch, FULL, ROOM)
    gate, context = _gate(deferrable=False)
    result = gate.execute_complete(context, {"status": "allowed", "reason": "room"})
    assert len(calls) == 2 and result["allowed"] is True


# -- run time, with the file ledger -----------------------------------------------------------------------
@pytest.mark.usefixtures("_no_variables")
def test_two_gates_cannot_both_pass_when_only_one_fits(tmp_path: Path) -> None:
    ledger = str(tmp_path / "usage.jsonl")
    with DAG("train", schedule=None) as dag:
        gates = [
            BudgetGateOperator(
                task_id=f"{name}__budget",
                gpu_hours_per_run=1.5,
                gated_task_id=name,
                claim_gpu_seconds=3600,
                ledger=ledger,
                deferrable=True,
            )
            for name in ("a", "b")
        ]
    context = {"dag": dag, "run_id": "r1", "ti": SimpleNamespace(map_index=-1)}
    assert gates[0].execute(context)["allowed"] is True
    with pytest.raises(TaskDeferred):
        gates[1].execute(context)
    # another run of the DAG has its own per-run budget
    assert gates[1].execute({**context, "run_id": "r2"})["allowed"] is True


@pytest.mark.usefixtures("_no_variables")
def test_a_retried_gate_finds_its_own_claim_and_passes_again(tmp_path: Path) -> None:
    ledger = str(tmp_path / "usage.jsonl")
    with DAG("train", schedule=None) as dag:
        gate = BudgetGateOperator(
            task_id="fit__budget",
            gpu_hours_per_run=1,
            gated_task_id="fit",
            claim_gpu_seconds=3600,
            ledger=ledger,
        )
    context = {"dag": dag, "run_id": "r1", "ti": SimpleNamespace(map_index=-1)}
    assert gate.execute(context)["allowed"] is True
    assert gate.execute(context)["allowed"] is True


def test_a_gate_waiting_in_its_worker_checks_no_faster_than_the_triggers_minimum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tiny ``poke_interval`` must not make the worker read the ledger in a hot loop."""
    from airflow_gpu_dag.triggers.budget import MIN_POKE_INTERVAL

    slept: list[float] = []
    monkeypatch.setattr(gate_module.time, "sleep", slept.append)
    _claims(monkeypatch, FULL, FULL, ROOM)
    gate, context = _gate(deferrable=False)
    gate.poke_interval = 1e-9
    assert gate.execute(context)["allowed"] is True
    assert slept == [MIN_POKE_INTERVAL, MIN_POKE_INTERVAL]
