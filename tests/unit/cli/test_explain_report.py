"""Tests of ``airflow_gpu_dag.cli.explain_report``: the report ``airflow gpu-dag explain`` prints, built on
the in-memory REST API of ``tests/unit/cli/conftest.py`` (``test_explain.py`` has the reservation story,
the stale and absent controllers and the command's output; ``test_plan.py`` a finished run's causes)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import yaml

from airflow_gpu_dag.cli.explain_report import (
    AHEAD_SHOWN,
    EXIT_API,
    EXIT_CODES,
    EXIT_NOT_FOUND,
    EXIT_NOT_PROVIDER,
    ExplainError,
    build_report,
)
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH, ReservationGate, key_weight
from airflow_gpu_dag.core.policy.reasons import CODES, Reason
from airflow_gpu_dag.pool_claim.state import PoolState, iso_time, with_state
from airflow_gpu_dag.watermark.durations import ControllerHistory
from tests.unit.cli.conftest import (
    NOW,
    OURS,
    ROOT,
    FakeApi,
    finished_state,
    iso,
    report,
    reservation_state,
    tick,
)

#: The holder a hand-written claim names.
HOLDER = "host-a:42:cafe"


def _managed(api: FakeApi, state: PoolState, slots: int = 4, name: str = "gpu") -> None:
    """Pool ``name`` of ``slots`` slots whose description ends with ``state`` (as a controller writes it)."""
    api.pools[name] = {"name": name, "slots": slots, "description": with_state("gpu-dag watermark", state)}


def _reserving_for(task: str) -> Reason:
    """The decision of a controller that ticked at NOW-2 and holds 4 slots of ``gpu`` for ``task``."""
    return Reason("reserving", "gpu", 4, NOW - 2, task=task, slots=4, free=1, until=NOW + 90)


def _entry(out: dict[str, Any], task_id: str) -> dict[str, Any]:
    return next(t for t in out["tasks"] if t["task_id"] == task_id)


class _Answering(FakeApi):
    """A REST API whose ``GET /dags/{id}`` answers ``status`` with ``body``."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__()
        self.status, self.body = status, body

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if isinstance(self.body, str):
            return httpx.Response(self.status, text=self.body)
        return httpx.Response(self.status, json=self.body)


# -- errors ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "said"),
    [
        (
            403,
            "DAG 'evals': the api-server refused the connection's login (HTTP 403). Fix the login/password",
        ),
        (
            500,
            "DAG 'evals': the api-server answered an error (GET /api/v2/dags/evals: HTTP 500). Check the "
            "api-server's log.",
        ),
    ],
)
def test_an_error_status_of_the_api_server_exits_4_with_what_to_fix(status: int, said: str) -> None:
    """An answer other than 200 or 404 is not 'the DAG does not exist': a refused login says to fix the
    connection, any other error to read the api-server's log."""
    with pytest.raises(ExplainError) as err:
        report(_Answering(status, {"detail": "no"}), "evals")
    assert err.value.code == EXIT_API
    assert str(err.value).startswith(said)


@pytest.mark.parametrize("body", [["a", "list"], "<html>proxy error</html>"])
def test_an_answer_that_is_not_a_json_object_exits_4(body: Any) -> None:
    with pytest.raises(ExplainError) as err:
        report(_Answering(200, body), "evals")
    assert err.value.code == EXIT_API
    assert str(err.value) == "DAG 'evals': GET /api/v2/dags/evals did not answer a JSON object"


def test_an_unknown_run_of_a_dag_without_runs_says_it_has_none() -> None:
    api = FakeApi()
    api.dag("fresh", {"a": []})
    with pytest.raises(ExplainError) as err:
        report(api, "fresh", "manual__1")
    assert err.value.code == EXIT_NOT_FOUND
    assert str(err.value) == "DAG 'fresh' has no run 'manual__1'. It has no runs."


def test_an_unknown_task_without_a_close_match_lists_the_first_ten_tasks_of_the_dag() -> None:
    api = FakeApi()
    api.dag("wide", {f"t{i:02d}": [] for i in range(12)})
    api.run("wide", "r", NOW - 60)
    with pytest.raises(ExplainError) as err:
        report(api, "wide", task="zzzzzz")
    assert err.value.code == EXIT_NOT_FOUND
    tasks = ", ".join(f"t{i:02d}" for i in range(10))
    assert str(err.value) == f"DAG 'wide' has no task 'zzzzzz'. Its tasks: {tasks}."


def test_a_dag_off_the_provider_is_told_which_weight_rules_its_tasks_use() -> None:
    api = FakeApi()
    api.dags["stock"] = [
        {"task_id": "a", "downstream_task_ids": [], "weight_rule": "downstream", "pool": "gpu"},
        {"task_id": "b", "downstream_task_ids": [], "weight_rule": "absolute", "pool": "gpu"},
    ]
    api.run("stock", "r", NOW - 60)
    with pytest.raises(ExplainError) as err:
        report(api, "stock")
    assert err.value.code == EXIT_NOT_PROVIDER
    assert "(its tasks use: absolute, downstream)" in str(err.value)


def test_the_exit_codes_are_the_ones_docs_cli_md_lists() -> None:
    """``EXIT_CODES`` and the table of docs/cli.md ("Exit codes of explain") name the same codes; 2 is
    argparse's."""
    docs = (ROOT / "docs" / "cli.md").read_text()
    section = docs.split("### Exit codes of explain", 1)[1].split("\n#", 1)[0]
    listed = {int(code) for code in re.findall(r"^\| (\d) \|", section, flags=re.MULTILINE)}
    assert listed - {2} == set(EXIT_CODES) == {0, 3, 4, 5, 6}


# -- the run and its GPU tasks -----------------------------------------------------------------------------
def test_without_a_run_id_the_dags_latest_run_is_explained() -> None:
    api = reservation_state()
    api.run("evals", "e0", NOW - 3000, state="success")  # an older run
    out = report(api, "evals")
    assert (out["dag_id"], out["run_id"], out["run_state"], out["now"]) == ("evals", "e1", "running", NOW)


def test_a_task_in_a_gpu_pool_a_managed_pool_or_with_gpus_declared_is_a_gpu_task_and_no_other() -> None:
    """A task is a GPU task by its pool's name (``gpu_*``), by a pool a controller manages (whatever its
    name) or by its ``gpu_hints(gpus=...)``; a CPU task of the run is not explained."""
    api = FakeApi()
    api.dag("mixed", {"named": [], "managed": [], "hinted": [], "cpu": []})
    api.run("mixed", "r", NOW - 60)
    _managed(api, PoolState(capacity=2), slots=2, name="shared")
    api.pools["default_pool"] = {"name": "default_pool", "slots": 128, "description": ""}
    api.ti("mixed", "r", "named", "scheduled", pool="gpu_a100", cpu=True)
    api.ti("mixed", "r", "managed", "scheduled", pool="shared", cpu=True)
    api.ti("mixed", "r", "hinted", "scheduled", pool="default_pool", slots=1)
    api.ti("mixed", "r", "cpu", "scheduled", pool="default_pool", cpu=True)
    out = report(api, "mixed")
    assert sorted(t["task_id"] for t in out["tasks"]) == ["hinted", "managed", "named"]
    assert sorted(out["controller"]) == ["default_pool", "gpu_a100", "shared"]


def test_a_pool_that_does_not_exist_has_no_size_and_no_capacity() -> None:
    api = FakeApi()
    api.dag("d", {"a": []}, pool="gpu_x")
    api.run("d", "r", NOW - 60)
    api.ti("d", "r", "a", "scheduled", pool="gpu_x", cpu=True)
    pool = report(api, "d")["controller"]["gpu_x"]
    assert (pool["status"], pool["size"], pool["capacity"], pool["decision"]) == ("absent", None, None, None)


def test_the_report_is_json_and_yaml_ready() -> None:
    """The module promises a JSON-ready report: ``-o json`` and ``-o yaml`` print it as built."""
    live = reservation_state()
    tick(live, NOW - 2)
    for out in (report(live, "evals"), report(live, "train"), report(finished_state(), "pipe")):
        assert json.loads(json.dumps(out)) == out
        assert yaml.safe_load(yaml.safe_dump(out)) == out


# -- the pools' controllers --------------------------------------------------------------------------------
def test_a_running_controller_is_reported_with_its_decision_claim_and_interval() -> None:
    api = reservation_state()
    why = _reserving_for("train/t1/wide/-1")
    _managed(api, PoolState(capacity=4, holder=HOLDER, expires=NOW + 15, interval=5.0, why=why), slots=0)
    out = report(api, "evals")
    decision = {
        "code": "reserving",
        "meaning": CODES["reserving"],
        "reserved_for": "train/t1/wide/-1",
        "slots": 4,
        "until": iso_time(NOW + 90),
        "at": iso_time(NOW - 2),
    }
    assert out["controller"] == {
        "gpu": {
            "status": "running",
            "capacity": 4,
            "size": 0,
            "interval": 5.0,
            "decision": decision,
            "claim_expires": iso_time(NOW + 15),
            "message": f"pool gpu: a watermark controller decides its size ({HOLDER})",
        }
    }
    assert out["warnings"] == []
    assert _entry(out, "small")["decision"] == decision  # the decision that concerns each waiting task
    assert _entry(out, "report")["decision"] == decision


def test_a_decision_that_holds_no_slots_names_no_task_it_is_reserved_for() -> None:
    api = reservation_state()
    why = Reason("next-slot", "gpu", 4, NOW - 2, task="evals/e1/small/-1", slots=1)
    _managed(api, PoolState(capacity=4, holder=HOLDER, expires=NOW + 15, interval=5.0, why=why))
    decision = report(api, "evals")["controller"]["gpu"]["decision"]
    assert (decision["code"], decision["reserved_for"], decision["until"]) == ("next-slot", None, None)
    assert decision["meaning"] == CODES["next-slot"]


def test_a_stopped_controller_is_a_warning_and_airflow_alone_admits_the_tasks() -> None:
    """A pool state without a claim (released, or failed open) is ``stopped``: its capacity is the
    state's, its old decision explains nothing, and each waiting task waits for slots."""
    api = reservation_state()
    _managed(api, PoolState(last_good=4, capacity=4), slots=4)
    out = report(api, "evals")
    pool = out["controller"]["gpu"]
    assert (pool["status"], pool["capacity"], pool["size"], pool["claim_expires"]) == ("stopped", 4, 4, None)
    stopped = (
        "pool gpu: no watermark controller runs (it stopped, or the pool failed open): Airflow admits its "
        "tasks alone and holds no slots for wide tasks. Start it: airflow gpu-dag watermark"
    )
    assert pool["message"] == stopped and out["warnings"] == [stopped]
    small = _entry(out, "small")
    assert small["reason"] == {
        "code": "waiting-for-slots",
        "text": "waiting for free slots of pool gpu (1 task(s) ahead); no watermark controller decides "
        "this pool now",
    }
    assert "decision" not in small


def test_a_claim_that_expires_at_the_moment_asked_has_lapsed() -> None:
    api = reservation_state()
    _managed(api, PoolState(capacity=4, holder=HOLDER, expires=NOW, interval=5.0), slots=0)
    out = report(api, "evals")
    assert out["controller"]["gpu"]["status"] == "stale"
    assert out["warnings"][0].startswith(
        f"pool gpu: its watermark controller ({HOLDER}) has not ticked since its claim lapsed at "
        f"{iso_time(NOW)}"
    )


def test_a_claim_further_ahead_than_any_controller_writes_is_stale_not_running() -> None:
    """The scheduler's watchdog fails such a pool open (``PoolState.claimed``); explain must not call its
    controller running meanwhile."""
    api = reservation_state()
    _managed(api, PoolState(capacity=4, holder=HOLDER, expires=NOW + 400 * 86400, interval=5.0), slots=0)
    assert report(api, "evals")["controller"]["gpu"]["status"] == "stale"


# -- a task that has not finished --------------------------------------------------------------------------
def test_a_running_task_is_explained_by_the_slots_it_holds_and_ends_when_its_history_says() -> None:
    api = reservation_state()
    tick(api, NOW - 2)
    hold = report(api, "train", task="hold")["tasks"]
    assert [t["task_id"] for t in hold] == ["hold"]
    assert hold[0]["reason"] == {"code": "running", "text": "running: it holds 3 slot(s) of pool gpu"}
    assert hold[0]["rank"] is None and "decision" not in hold[0]
    # started at NOW-10 for its 100 s: it ends at NOW+90
    assert (hold[0]["start"], hold[0]["predicted_start"], hold[0]["predicted_end"]) == (
        NOW - 10,
        NOW - 10,
        NOW + 90,
    )


def test_a_queued_task_holds_its_slots_but_has_no_start_yet() -> None:
    api = reservation_state()
    api.ti("evals", "e1", "queued_one", "queued", slots=2, duration=40)
    api.dag("evals", {"small": ["report"], "report": [], "queued_one": []})
    entry = report(api, "evals", task="queued_one")["tasks"][0]
    assert entry["reason"] == {"code": "queued", "text": "queued: it holds 2 slot(s) of pool gpu"}
    assert entry["start"] is None and entry["predicted_start"] is None
    assert entry["predicted_end"] == NOW + 40  # its whole duration from now


def test_a_running_task_has_no_task_ahead_of_it() -> None:
    """A running task is out of its pool's queue: no task is ahead of it (``explain`` would print
    ``ahead: train/t1/wide/-1`` under the running 'hold')."""
    api = reservation_state()
    tick(api, NOW - 2)
    hold = report(api, "train", task="hold")["tasks"][0]
    assert (hold["ahead"], hold["ahead_count"]) == ([], 0)


def test_at_most_five_tasks_ahead_are_listed_most_urgent_first_with_the_count_of_all() -> None:
    api = FakeApi()
    api.dag("mine", {"late": []})
    api.dag("other", {f"o{i}": [] for i in range(7)})
    api.run("mine", "m", NOW - 60)
    api.pools["gpu"] = {"name": "gpu", "slots": 0, "description": ""}  # full: nothing starts
    for i in range(7):  # keys NOW-700 .. NOW-100: all ahead of 'late' (key NOW)
        api.ti("other", "o", f"o{i}", "scheduled", slots=1 + i % 2, key_at=NOW - 100 * (7 - i))
    api.ti("mine", "m", "late", "scheduled", key_at=NOW)
    late = report(api, "mine")["tasks"][0]
    assert (late["rank"], late["queue_length"], late["ahead_count"]) == (8, 8, 7)
    assert len(late["ahead"]) == AHEAD_SHOWN
    assert late["ahead"][0] == {
        "task": "other/o/o0/-1",
        "run": "other/o",
        "priority_weight": key_weight(NOW - 700),
        "key": iso_time(NOW - 700),
        "slots": 1,
    }
    assert [a["task"] for a in late["ahead"]] == [f"other/o/o{i}/-1" for i in range(5)]
    assert [a["slots"] for a in late["ahead"]] == [1, 2, 1, 2, 1]


def test_a_key_is_read_with_the_epoch_given_and_a_stock_weight_has_none() -> None:
    api = reservation_state()
    api.ti("evals", "e1", "stock", "scheduled", weight=7, scheduled=NOW - 4)
    api.dag("evals", {"small": ["report"], "report": [], "stock": []})
    shifted = build_report(
        api,
        "evals",
        history=ControllerHistory(api, 60.0, clock=lambda: 0.0),
        now=NOW,
        gate=ReservationGate(gap=4 * 3600, overdue=8 * 3600),
        epoch=DEFAULT_EPOCH + 3600,
    )
    assert _entry(report(api, "evals"), "small")["key"] == iso_time(NOW + 60)
    assert _entry(shifted, "small")["key"] == iso_time(NOW + 60 + 3600)
    assert _entry(shifted, "stock")["key"] is None and _entry(shifted, "stock")["priority_weight"] == 7


def test_a_task_wider_than_its_pool_is_said_never_to_start() -> None:
    api = FakeApi()
    api.dag("big", {"huge": []})
    api.run("big", "b", NOW - 60)
    api.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool"}
    api.ti("big", "b", "huge", "scheduled", slots=9, scheduled=NOW - 50)
    huge = report(api, "big")["tasks"][0]
    assert huge["reason"]["code"] == "waiting-for-slots"
    assert huge["reason"]["text"].endswith("; it needs more slots than pool gpu has (4): it never starts")
    assert (huge["predicted_start"], huge["predicted_end"], huge["planned_start"]) == (None, None, None)


def test_a_task_after_one_that_never_starts_is_not_said_to_need_more_slots_than_its_pool() -> None:
    """'after' asks 1 slot of a pool of 4; it never starts because 'huge' (9 slots) before it never
    does: its reason must not say that it needs more slots than the pool has."""
    api = FakeApi()
    api.dag("big", {"huge": ["after"], "after": []})
    api.run("big", "b", NOW - 60)
    api.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool"}
    api.ti("big", "b", "huge", "scheduled", slots=9, key_at=NOW - 100, scheduled=NOW - 50)
    api.ti("big", "b", "after", None, slots=1, key_at=NOW)
    after = _entry(report(api, "big"), "after")
    assert after["predicted_start"] is None
    assert "it needs more slots than pool gpu has" not in after["reason"]["text"]
    assert after["reason"]["text"].endswith(
        "it comes after a task that needs more slots than its pool has: it never starts"
    )


def test_a_task_waiting_to_retry_is_not_said_to_wait_for_its_upstream_tasks() -> None:
    """'train' failed once and waits to be retried; its upstream 'prep' succeeded."""
    api = FakeApi()
    api.dag("d", {"prep": ["train"], "train": []})
    api.run("d", "r", NOW - 600)
    api.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool"}
    api.ti("d", "r", "prep", "success", key_at=NOW - 600, start=NOW - 600, end=NOW - 540)
    api.ti("d", "r", "train", "up_for_retry", key_at=NOW - 540, start=NOW - 500, end=NOW - 400)
    train = _entry(report(api, "d"), "train")
    assert train["state"] == "up_for_retry"
    assert "upstream tasks have not all ended" not in train["reason"]["text"]
    assert train["reason"] == {
        "code": "not-ready",
        "text": "up_for_retry: not ready yet (it failed and waits for its retry delay)",
    }


def test_tasks_are_listed_by_their_start_or_predicted_start_and_a_task_not_ready_says_so() -> None:
    """'b' runs since NOW-10, 'c' waits and starts now, 'a' (after 'c') when 'c' ends: listed b, c, a,
    neither in the order of the task instances (a, c, b) nor by name."""
    api = FakeApi()
    api.dag("d", {"c": ["a"], "a": [], "b": []})
    api.run("d", "r", NOW - 60)
    api.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool"}
    api.ti("d", "r", "a", None, key_at=NOW + 10, duration=30)
    api.ti("d", "r", "c", "scheduled", key_at=NOW - 10, duration=20, scheduled=NOW - 5)
    api.ti("d", "r", "b", "running", key_at=NOW - 50, duration=100, start=NOW - 10)
    out = report(api, "d")
    assert [t["task_id"] for t in out["tasks"]] == ["b", "c", "a"]
    a = out["tasks"][2]
    assert a["reason"] == {
        "code": "not-ready",
        "text": "none: not ready yet (its upstream tasks have not all ended)",
    }
    assert (a["rank"], a["predicted_start"], a["predicted_end"]) == (None, NOW + 20, NOW + 50)


# -- finished tasks against the plan -----------------------------------------------------------------------
def test_a_finished_task_is_explained_by_its_main_cause_or_as_planned() -> None:
    api = FakeApi()
    api.dag("d", {"prep": ["train"], "train": []})
    api.run("d", "r", NOW - 600, state="success")
    api.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool"}
    api.ti("d", "r", "prep", "success", key_at=NOW - 600, start=NOW - 600, end=NOW - 540)
    api.ti("d", "r", "train", "failed", key_at=NOW - 540, start=NOW - 540, end=NOW - 420)
    out = report(api, "d")
    prep, train = out["tasks"]
    assert prep["reason"] == {"code": "as-planned", "text": "it started as planned (within a second)"}
    assert prep["main_cause"] is None and (prep["start_error_s"], prep["end_error_s"]) == (0, 0)
    assert train["state"] == "failed" and train["main_cause"] == "ran_longer"
    assert train["reason"] == {"code": "ran_longer", "text": "it ran longer than its estimate"}
    assert train["causes"]["ran_longer"] == 60 and train["end_error_s"] == 60
    assert out["plan_error"]["tasks"] == 2  # a failed run is finished too


def test_the_plan_error_is_given_for_a_finished_run_asked_as_a_whole_only() -> None:
    api = finished_state()
    one = report(api, "pipe", task="train")
    assert [t["task_id"] for t in one["tasks"]] == ["train"] and "plan_error" not in one
    api.runs[("pipe", "p1")]["state"] = "running"
    assert "plan_error" not in report(api, "pipe")


def test_the_pools_are_read_over_the_span_of_the_run_for_the_causes_of_the_waits() -> None:
    """For the causes, each GPU pool's task instances are asked that started before the run's last end
    and ended after its start."""
    api = finished_state()
    t0 = NOW - 3600
    report(api, "pipe")
    assert api.pages_asked == [
        [("pool", "gpu"), ("start_date_lte", iso(t0 + 270)), ("end_date_gte", iso(t0))]
    ]


def test_the_plan_starts_when_the_run_was_queued_when_it_has_not_started() -> None:
    api = FakeApi()
    api.dag("d", {"a": []})
    api.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool"}
    api.runs[("d", "r")] = {
        "dag_id": "d",
        "dag_run_id": "r",
        "state": "queued",
        "start_date": None,
        "queued_at": iso(NOW - 30),
        "run_after": iso(NOW - 30),
    }
    api.ti("d", "r", "a", None, duration=60)
    assert report(api, "d")["tasks"][0]["planned_start"] == NOW - 30
    del api.runs[("d", "r")]["queued_at"]
    assert report(api, "d")["tasks"][0]["planned_start"] == NOW  # nothing known: from now


def test_rules_of_the_provider_are_recognised_by_their_module_path() -> None:
    """Any weight rule of ``airflow_gpu_dag.priority_strategy`` (not only the critical-path one) makes the
    DAG one of the provider's."""
    api = reservation_state()
    api.dag("evals", {"small": ["report"], "report": []}, rule=OURS.replace("CriticalPath", "Packing"))
    assert report(api, "evals")["run_id"] == "e1"
