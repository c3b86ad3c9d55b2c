"""Tests of ``airflow_gpu_dag.triggers.budget``."""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import threading
from typing import Any

import pytest

from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetDecision
from airflow_gpu_dag.triggers import budget as trigger_module
from airflow_gpu_dag.triggers.budget import BudgetTrigger
from tests.unit.triggers.conftest import first_event

#: Every test takes the deferring path (a deployment with a triggerer).
pytestmark = pytest.mark.usefixtures("_deferring")


def test_budget_trigger_fires_when_cap_is_raised(ledger: str, monkeypatch) -> None:
    calls = {"n": 0}

    def variable(key: str) -> float | None:
        calls["n"] += 1
        assert key == "gpu_dag_budget.run.train"
        return None if calls["n"] < 3 else 10.0  # the operator raises the cap on the 3rd check

    monkeypatch.setattr(gate_module, "_variable_float", variable)
    trigger = BudgetTrigger("train", "r1", BudgetCap(gpu_hours_per_run=3).to_dict(), ledger, 0.05)

    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    payload = asyncio.run(asyncio.wait_for(first(), 20))
    assert payload["status"] == "allowed" and calls["n"] == 3
    assert "within budget" in payload["reason"]


def _decisions(monkeypatch: pytest.MonkeyPatch, *answers: object) -> list[dict[str, Any]]:
    """``check_budget`` answers ``answers`` in turn (an exception is raised); returns its calls."""
    calls: list[dict[str, Any]] = []
    queue = list(answers)

    def check(cap: BudgetCap, dag_id: str, run_id: str, ledger: object, **kwargs: Any) -> BudgetDecision:
        calls.append(
            {
                "cap": cap,
                "dag_id": dag_id,
                "run_id": run_id,
                "ledger": ledger,
                "thread": threading.get_ident(),
            }
            | kwargs
        )
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[return-value]

    monkeypatch.setattr(gate_module, "check_budget", check)
    return calls


def _trigger(poke_interval: float = 0.01, request: float = 0.0) -> BudgetTrigger:
    cap = BudgetCap(gpu_hours_per_run=3, gpu_hours_per_pool_day=10, pool="gpu_a100").to_dict()
    return BudgetTrigger("train", "r1", cap, "/ledgers/usage.jsonl", poke_interval, request)


def test_the_trigger_serializes_to_its_own_class_and_every_argument() -> None:
    trigger = _trigger(poke_interval=12, request=7200)
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    assert getattr(importlib.import_module(module), name) is BudgetTrigger
    again = BudgetTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert kwargs == {
        "dag_id": "train",
        "run_id": "r1",
        "cap": {"gpu_hours_per_run": 3, "gpu_hours_per_pool_day": 10, "pool": "gpu_a100"},
        "ledger": "/ledgers/usage.jsonl",
        "poke_interval": 12.0,
        "request_gpu_seconds": 7200.0,
    }
    json.dumps(kwargs)  # what the triggerer stores must be plain JSON


def test_the_trigger_asks_for_the_gated_tasks_request_and_passes_on_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _decisions(monkeypatch, BudgetDecision(True, "run train/r1: 1.0 of 3 GPU-h, room for 2.000"))
    payload = first_event(_trigger(request=7200))
    assert payload == {"status": "allowed", "reason": "run train/r1: 1.0 of 3 GPU-h, room for 2.000"}
    (call,) = calls
    assert (call["dag_id"], call["run_id"], call["ledger"], call["request_gpu_seconds"]) == (
        "train",
        "r1",
        "/ledgers/usage.jsonl",
        7200.0,
    )
    assert call["cap"] == BudgetCap(3, 10, "gpu_a100")


def test_the_ledger_is_read_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blocking ledger read (a file lock, a SQL database) must not hold the triggerer's loop."""
    calls = _decisions(monkeypatch, BudgetDecision(True, "ok"))
    loop_thread: list[int] = []

    async def first() -> dict[str, Any]:
        loop_thread.append(threading.get_ident())
        async for event in _trigger().run():
            return event.payload
        raise AssertionError("no event")

    asyncio.run(asyncio.wait_for(first(), 20))
    assert calls[0]["thread"] != loop_thread[0]


def test_a_failing_check_is_logged_and_tried_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _decisions(
        monkeypatch,
        OSError("ledger lock busy"),
        BudgetDecision(False, "run train/r1 used 3.000 GPU-hours, cap 3"),
        BudgetDecision(True, "within budget"),
    )
    payload = first_event(_trigger())
    assert payload["status"] == "allowed" and len(calls) == 3
    logged = capsys.readouterr().out  # the trigger's logger writes through structlog to stdout
    assert "budget check failed (ledger lock busy); retrying" in logged
    assert "GPU budget still reached: run train/r1 used 3.000 GPU-hours, cap 3" in logged


def test_the_trigger_never_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """It only reads: the resumed gate claims, so a trigger that fired cannot hold room twice."""

    def no_claim(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trigger claimed")

    monkeypatch.setattr(gate_module, "claim_budget", no_claim)
    _decisions(monkeypatch, BudgetDecision(True, "ok"))
    assert first_event(_trigger())["status"] == "allowed"


@pytest.mark.parametrize("poke_interval", [0, -5, math.nan])
def test_a_poke_interval_of_zero_or_less_does_not_re_read_the_ledger_in_a_tight_loop(
    monkeypatch: pytest.MonkeyPatch, poke_interval: float
) -> None:
    _decisions(
        monkeypatch,
        BudgetDecision(False, "cap reached"),
        BudgetDecision(False, "cap reached"),
        BudgetDecision(True, "ok"),
    )
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, *args: Any) -> None:
        waits.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(trigger_module.asyncio, "sleep", sleep)
    assert first_event(_trigger(poke_interval=poke_interval))["status"] == "allowed"
    assert waits == [trigger_module.MIN_POKE_INTERVAL] * 2


def test_the_trigger_waits_its_poke_interval_between_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    _decisions(monkeypatch, BudgetDecision(False, "cap reached"), BudgetDecision(True, "ok"))
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, *args: Any) -> None:
        waits.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(trigger_module.asyncio, "sleep", sleep)
    first_event(_trigger(poke_interval=45))
    assert waits == [45.0]


def test_a_trigger_against_a_real_ledger_fires_when_the_run_has_room(ledger: str) -> None:
    """Run r1 of ``train`` used 3 GPU-h in the sample ledger: under a cap of 4 a 1-GPU-h request fits."""
    from airflow_gpu_dag.budget import check as budget_check

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(budget_check, "_variable_float", lambda key: None)
        trigger = BudgetTrigger("train", "r1", BudgetCap(gpu_hours_per_run=4).to_dict(), ledger, 0.01, 3600)
        assert first_event(trigger)["status"] == "allowed"
