"""``airflow gpu-dag explain`` against an in-memory REST API whose pools were written by the real watermark
controller: why each waiting GPU task waits, its rank and predicted start, a finished run against its
plan, and every bad input with its exit code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_gpu_dag.cli.explain_report import (
    EXIT_API,
    EXIT_NO_CONTROLLER,
    EXIT_NOT_FOUND,
    EXIT_NOT_PROVIDER,
    ExplainError,
)
from airflow_gpu_dag.core.simulation.live import (
    DoneTask,
    LiveTask,
    PoolUse,
    compare_run,
    error_summary,
    plan_run,
    predict_live,
    wait_causes,
)
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, RestError
from airflow_gpu_dag.pool_claim.state import iso_time
from tests.unit.cli.conftest import NOW, FakeApi, report, reservation_state, run_cli_explain, tick


# -- a task waiting for a reservation -----------------------------------------------------------------
def test_a_task_behind_a_reservation_is_explained_with_rank_ahead_and_predicted_start() -> None:
    api = reservation_state()
    tick(api, NOW - 2)
    assert api.pools["gpu"]["slots"] == 0  # 4 - 4 held for wide: nothing else starts
    out = report(api, "evals")
    assert out["run_id"] == "e1" and out["warnings"] == []
    assert out["controller"]["gpu"]["status"] == "running"
    assert out["controller"]["gpu"]["decision"]["reserved_for"] == "train/t1/wide/-1"
    small = next(t for t in out["tasks"] if t["task_id"] == "small")
    assert small["reason"]["code"] == "waiting-for-reservation"
    assert "held for train/t1/wide/-1" in small["reason"]["text"]
    assert small["rank"] == 2 and small["queue_length"] == 2
    assert [a["task"] for a in small["ahead"]] == ["train/t1/wide/-1"]
    assert small["ahead"][0]["key"] == iso_time(NOW - 5 * 3600)  # the key of 'wide'
    # hold ends at NOW+90; the controller's next tick after it (ticks at NOW-2 + 5k) is NOW+93, when wide
    # starts for its 30 s; the 1-slot task does not fit beside it: it starts when wide ends
    assert small["predicted_start"] == pytest.approx(NOW + 123)
    assert small["predicted_end"] == pytest.approx(NOW + 243)
    report_task = next(t for t in out["tasks"] if t["task_id"] == "report")
    assert report_task["reason"]["code"] == "not-ready" and report_task["rank"] is None
    assert report_task["predicted_start"] == pytest.approx(NOW + 243)


def test_the_reserved_task_and_a_backfilled_one_are_told_apart() -> None:
    api = reservation_state()
    api.ti("evals", "e1", "quick", "scheduled", key_at=NOW + 30, duration=20, scheduled=NOW - 4)
    api.dag("evals", {"small": ["report"], "report": [], "quick": []})
    tick(api, NOW - 2)
    wide = report(api, "train", "t1", task="wide")["tasks"]
    assert [t["task_id"] for t in wide] == ["wide"]
    assert wide[0]["reason"]["code"] == "reserved" and wide[0]["rank"] == 1
    assert wide[0]["predicted_start"] == pytest.approx(NOW + 93)
    quick = report(api, "evals", task="quick")["tasks"][0]
    assert quick["reason"]["code"] == "backfill"  # 20 s end before the slots free at +90
    assert quick["predicted_start"] == pytest.approx(NOW)


def test_a_stale_controller_is_said_and_exits_6(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    api = reservation_state()
    tick(api, NOW - 2)
    later = NOW + 3 * 3600  # the claim (3 intervals) lapsed long ago
    out = report(api, "evals", now=later)
    assert out["controller"]["gpu"]["status"] == "stale"
    assert "has not ticked since its claim lapsed" in out["warnings"][0]
    small = next(t for t in out["tasks"] if t["task_id"] == "small")
    assert small["reason"]["code"] == "waiting-for-slots"  # no decision taken from a dead controller
    assert small["predicted_start"] is not None
    code = run_cli_explain(monkeypatch, api, ["evals", "-o", "json"], now=later)
    assert code == EXIT_NO_CONTROLLER
    captured = capsys.readouterr()
    assert json.loads(captured.out)["controller"]["gpu"]["status"] == "stale"
    assert "airflow gpu-dag watermark" in captured.err


def test_a_pool_no_controller_ever_managed_is_said() -> None:
    api = reservation_state()
    api.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool"}
    out = report(api, "evals")
    assert out["controller"]["gpu"]["status"] == "absent" and out["controller"]["gpu"]["capacity"] == 4
    assert "no watermark controller has ever managed it" in out["warnings"][0]
    small = next(t for t in out["tasks"] if t["task_id"] == "small")
    # Airflow alone: the 1 free slot goes to the small task now (wide needs 4)
    assert small["predicted_start"] == pytest.approx(NOW)


# -- bad input ------------------------------------------------------------------------------------------
def test_unknown_dag_run_or_task_exit_3_with_what_to_do() -> None:
    api = reservation_state()
    tick(api)
    cases = [
        (("nope", None, None), "DAG 'nope' does not exist"),
        (("evals", "e9", None), "has no run 'e9'. Its latest runs: e1"),
        (("evals", None, "smal"), "has no task 'smal'. Did you mean small?"),
    ]
    for (dag_id, run_id, task), said in cases:
        with pytest.raises(ExplainError, match=said) as err:
            report(api, dag_id, run_id, task)
        assert err.value.code == EXIT_NOT_FOUND
    api.dag("fresh", {"a": []})
    with pytest.raises(ExplainError, match="has no runs yet") as err:
        report(api, "fresh")
    assert err.value.code == EXIT_NOT_FOUND


def test_a_dag_on_a_stock_weight_rule_or_without_gpu_tasks_exits_5() -> None:
    api = reservation_state()
    api.dag("evals", {"small": ["report"], "report": []}, rule="downstream")
    with pytest.raises(ExplainError, match="does not use the provider's weight rule") as err:
        report(api, "evals")
    assert err.value.code == EXIT_NOT_PROVIDER and "CRITICAL_PATH_WEIGHT_RULE" in str(err.value)
    cpu = FakeApi()
    cpu.dag("etl", {"load": []}, pool="default_pool")
    cpu.run("etl", "r", NOW - 60)
    cpu.ti("etl", "r", "load", "running", pool="default_pool", start=NOW - 30, cpu=True)
    with pytest.raises(ExplainError, match="has no GPU task") as err:
        report(cpu, "etl")
    assert err.value.code == EXIT_NOT_PROVIDER


def test_an_api_server_that_cannot_be_reached_or_refuses_the_login_exits_4() -> None:
    client = AirflowRestClient("http://127.0.0.1:9", "admin", "secret", timeout=2.0)
    try:
        with pytest.raises(ExplainError, match="cannot reach the api-server") as err:
            report(client, "evals")  # type: ignore[arg-type]
    finally:
        client.close()
    assert err.value.code == EXIT_API and "secret" not in str(err.value)
    api = reservation_state()
    api.down = RestError("POST /auth/token: HTTP 401", 401)
    with pytest.raises(ExplainError, match="refused the connection's login") as err:
        report(api, "evals")
    assert err.value.code == EXIT_API


def test_the_command_prints_a_table_and_exit_codes_scripts_rely_on(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    api = reservation_state()
    tick(api, NOW - 2)
    assert run_cli_explain(monkeypatch, api, ["evals", "e1"]) == 0
    out = capsys.readouterr().out
    assert "evals/e1/small/-1 (scheduled, pool gpu, 1 slot(s), key" in out
    assert "why: waiting for a reservation: 4 slots of pool gpu are held for train/t1/wide/-1" in out
    assert "ahead: train/t1/wide/-1" in out and "rank 2 of 2 waiting" in out
    assert run_cli_explain(monkeypatch, api, ["evals", "--task", "small", "-o", "plain"]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert plain[0].split("\t")[:3] == ["task", "state", "pool"]
    assert plain[1].split("\t")[0] == "evals/e1/small/-1" and "waiting-for-reservation" in plain[1]
    assert run_cli_explain(monkeypatch, api, ["nope"]) == EXIT_NOT_FOUND
    assert "airflow gpu-dag explain: DAG 'nope' does not exist" in capsys.readouterr().err


# -- the core pieces ----------------------------------------------------------------------------------------
def test_predictions_follow_the_controllers_ticks_and_airflow_alone_without_one() -> None:
    tasks = [
        LiveTask("a", "ra", "gpu", 3, 5, 50.0, "holding"),
        LiveTask("w", "rb", "gpu", 4, 100, 30.0, "waiting"),
        LiveTask("s", "rc", "gpu", 1, 10, 80.0, "waiting"),
        LiveTask("n", "rc", "gpu", 1, 10, 20.0, "later", ("s",)),
    ]
    held = predict_live(1000.0, tasks, {"gpu": 4}, interval=5.0, last_tick=997.0)
    # 'a' ends at 1050; the tick after it is at 1052 (997 + 11 x 5): 'w' starts then; 's' would run past
    # 1050, so it is not backfilled and starts when 'w' ends
    assert (held["w"].start, held["w"].end) == (1052.0, 1082.0)
    assert (held["s"].start, held["n"].start) == (1082.0, 1162.0)
    alone = predict_live(1000.0, tasks, {"gpu": 4}, reservation=False)
    assert alone["s"].start == 1000.0 and alone["w"].start == 1080.0  # greedy: 's' takes the free slot
    assert "x" not in predict_live(1000.0, [LiveTask("x", "r", "gpu", 9, 1, 1.0, "waiting")], {"gpu": 4})


def test_tasks_holding_slots_free_them_to_the_reserved_task_not_to_the_next_one() -> None:
    """Two 1-slot tasks hold 2 of 4 slots and end in 2 s; 'wide' (4) waits, reserved for, and a 1-slot
    task behind it. The controller, seeing the two run, keeps the pool at C - w: when they end, their
    slots stay closed until its next tick starts 'wide' (not the 1-slot task)."""
    tasks = [
        LiveTask("h0", "t", "gpu", 1, 5, 2.1, "holding"),
        LiveTask("h1", "t", "gpu", 1, 5, 2.1, "holding"),
        LiveTask("wide", "t", "gpu", 4, 100, 7.0, "waiting"),
        LiveTask("ev", "s", "gpu", 1, 5, 21.0, "waiting"),
    ]
    out = predict_live(36.3, tasks, {"gpu": 4}, interval=5.0, last_tick=34.5)
    assert out["h0"].end == pytest.approx(38.4)
    assert (out["wide"].start, out["ev"].start) == (pytest.approx(39.5), pytest.approx(46.5))


def test_wait_causes_split_a_wait_by_what_the_pool_was_doing() -> None:
    me = DoneTask("me", "gpu", 2, 10, 60.0, start=200.0, end=260.0)
    pool = [
        PoolUse("full", "gpu", 3, 50, 0.0, 130.0),  # leaves 1 free: not enough until 130
        PoolUse("wide", "gpu", 4, 90, 170.0, 250.0, waiting_since=100.0),  # held for until it started
        PoolUse("low", "gpu", 4, 1, None, None, waiting_since=50.0),  # lower weight: not a reservation
    ]
    # 100-130 the pool is full; 130-170 'wide' (ahead, 4 slots) waits: its slots are held; from 170 it
    # holds them: full again
    assert wait_causes(me, 100.0, 4, pool) == {
        "waited_for_slots": 60.0,
        "waited_for_reservation": 40.0,
        "scheduler": 0.0,
    }
    assert sum(wait_causes(me, 100.0, None, pool).values()) == 100.0  # unlimited pool: never full


def test_error_summary_is_median_and_p90_of_absolute_errors() -> None:
    plan = plan_run(0.0, [LiveTask(str(i), "r", "gpu", 1, 1, 10.0, "later") for i in range(10)], {"gpu": 10})
    done = [DoneTask(str(i), "gpu", 1, 1, 10.0, float(i), 10.0 + 2 * i) for i in range(10)]
    summary = error_summary(compare_run(0.0, done, plan, {"gpu": 10}))
    assert summary == {
        "tasks": 10,
        "start_error_s": {"median": 4.0, "p90": 8.0},
        "end_error_s": {"median": 8.0, "p90": 16.0},
    }
    assert error_summary([])["start_error_s"] == {"median": None, "p90": None}
