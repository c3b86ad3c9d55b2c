"""The watermark controller against an in-memory stand-in of the Airflow REST API."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_gpu_dag.core.policy.objective import key_weight
from airflow_gpu_dag.executor_config import duration_hint
from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.watermark.config import LeaderLockSpec, parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController, build_controller, describe, parse_state
from airflow_gpu_dag.watermark.sources import CapacityReading, PoolCapacity, SourceError

NOW = 1_800_000_000.0


class FakeRest:
    """Pools, task instances and Variables in memory, with the REST client's method names."""

    def __init__(self) -> None:
        self.pools: dict[str, dict[str, Any]] = {}
        self.tis: list[dict[str, Any]] = []
        self.variables: dict[str, str] = {}
        self.writes: list[tuple[str, int]] = []
        self.ti_error: Exception | None = None
        self.upstream: dict[str, list[str]] = {}  # task id -> upstream task ids (DAG "d")
        self.tasks_error: Exception | None = None

    def get_pool(self, name: str) -> dict[str, Any] | None:
        return dict(self.pools[name]) if name in self.pools else None

    def set_pool(
        self, name: str, slots: int, description: str, include_deferred: bool = False
    ) -> dict[str, Any]:
        self.pools[name] = {
            "name": name,
            "slots": slots,
            "description": description,
            "include_deferred": include_deferred,
        }
        self.writes.append((name, slots))
        return self.pools[name]

    def task_instances(self, pools: Any, states: Any) -> list[dict[str, Any]]:
        if self.ti_error:
            raise self.ti_error
        wanted = {None if s == "no_status" else s for s in states}
        return [t for t in self.tis if t["pool"] in set(pools) and t["state"] in wanted]

    def run_task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return [t for t in self.tis if t["dag_id"] == dag_id and t["dag_run_id"] == run_id]

    def upstream_task_ids(self, dag_id: str) -> dict[str, list[str]]:
        if self.tasks_error:
            raise self.tasks_error
        return dict(self.upstream)

    def get_variable(self, key: str) -> str | None:
        return self.variables.get(key)

    def create_variable(self, key: str, value: str, description: str = "") -> bool:
        if key in self.variables:
            return False
        self.variables[key] = value
        return True

    def put_variable(self, key: str, value: str, description: str = "") -> None:
        self.variables[key] = value


def ti(
    task_id: str,
    state: str | None,
    slots: int = 1,
    priority: int = 1,
    duration: float | None = 60.0,
    started: float | None = None,
    pool: str = "gpu",
    scheduled: float | None = None,
) -> dict[str, Any]:
    config = {"gpu_dag": {"duration_s": duration}} if duration is not None else {}
    return {
        "dag_id": "d",
        "dag_run_id": "r",
        "task_id": task_id,
        "map_index": -1,
        "state": state,
        "pool": pool,
        "pool_slots": slots,
        "priority_weight": priority,
        "executor_config": str(config),
        "logical_date": "2026-11-30T00:00:00Z",
        "start_date": datetime.fromtimestamp(started, UTC).isoformat() if started is not None else None,
        "scheduled_when": datetime.fromtimestamp(scheduled, UTC).isoformat()
        if scheduled is not None
        else None,
    }


class Source:
    kind = "fake"

    def __init__(self, value: int | Exception) -> None:
        self.value = value

    def read(self) -> CapacityReading:
        if isinstance(self.value, Exception):
            raise self.value
        return CapacityReading(self.value, f"fake {self.value}")


def controller(rest: FakeRest, source: Source, **pool: Any) -> WatermarkController:
    config = parse_config(
        {"pools": {"gpu": {"source": 0, **pool}}, "lease": {"lock_file": None, "variable": None}}
    )
    return WatermarkController(config, rest, {"gpu": source}, default_duration=60.0, clock=lambda: NOW)  # type: ignore[arg-type]


def test_pool_follows_capacity_and_is_created_when_missing() -> None:
    rest, source = FakeRest(), Source(4)
    ctl = controller(rest, source)
    [outcome] = ctl.tick()
    assert outcome.written and rest.pools["gpu"]["slots"] == 4
    assert "pool 4 of capacity 4" in rest.pools["gpu"]["description"]
    assert ctl.tick()[0].written is False  # nothing changed: no write
    source.value = 2
    ctl.tick()
    assert rest.writes == [("gpu", 4), ("gpu", 2)]


def test_reservation_holds_back_small_tasks_for_a_wide_one() -> None:
    rest = FakeRest()
    rest.tis = [
        ti("small_running_a", "running", started=NOW - 10, duration=60),
        ti("small_running_b", "running", started=NOW - 10, duration=60),
        ti("small_queued", "queued", duration=60),
        ti("wide", "scheduled", slots=4, priority=100, duration=600),
        ti("small_waiting", "scheduled", slots=1, priority=1, duration=600),
    ]
    ctl = controller(rest, Source(4))
    [outcome] = ctl.tick()
    decision = outcome.decision
    assert decision is not None and decision.reserved_for == "d/r/wide/-1"
    # C - w + b with b = 0: the long small task would delay the wide one, so nothing is let through
    assert rest.pools["gpu"]["slots"] == 0
    assert "reserving 4 slots for d/r/wide/-1" in rest.pools["gpu"]["description"]
    # once the slots drain, the pool returns to capacity and the wide task fits
    rest.tis = [t for t in rest.tis if t["state"] == "scheduled"]
    ctl.tick()
    assert rest.pools["gpu"]["slots"] == 4


def test_reservation_disabled_means_pool_equals_capacity() -> None:
    rest = FakeRest()
    rest.tis = [ti("a", "running", started=NOW), ti("wide", "scheduled", slots=4, priority=100)]
    controller(rest, Source(4), reservation=False).tick()
    assert rest.pools["gpu"]["slots"] == 4


def test_duration_hint_and_default_duration() -> None:
    assert duration_hint("{'gpu_dag': {'duration_s': 12.5}}") == 12.5
    assert duration_hint({"gpu_dag": {"duration_s": "7"}}) == 7.0
    for junk in ("", "{}", "__import__('os')", "{'gpu_dag': 3}", None, "{'gpu_dag': {'duration_s': -1}}"):
        assert duration_hint(junk) is None
    rest = FakeRest()
    rest.tis = [ti("a", "running", started=NOW - 5, duration=None), ti("b", "scheduled", duration=None)]
    ctl = controller(rest, Source(4))
    running, ready = ctl._tasks(NOW)
    assert running[0].expected_end == NOW - 5 + 60.0
    assert ready[0].duration == 60.0


def test_source_fault_ladder_is_written_to_the_description() -> None:
    rest, source = FakeRest(), Source(4)
    ctl = controller(rest, source, floor=1, stale_intervals=2)
    ctl.tick()
    source.value = SourceError("dcgm exporter down")
    ctl.tick()
    assert rest.pools["gpu"]["slots"] == 4
    assert (
        "source stale: fake failed 1/2: dcgm exporter down; last good 4 kept"
        in rest.pools["gpu"]["description"]
    )
    ctl.tick()
    ctl.tick()
    assert rest.pools["gpu"]["slots"] == 1
    assert "source floor:" in rest.pools["gpu"]["description"]
    assert parse_state(rest.pools["gpu"]["description"]) == (4, 3)


def test_restarted_controller_continues_the_ladder_from_the_description() -> None:
    rest, source = FakeRest(), Source(6)
    controller(rest, source, stale_intervals=2).tick()
    source.value = SourceError("down")
    controller(rest, source, stale_intervals=2).tick()  # "crash" after one failed tick
    assert rest.pools["gpu"]["slots"] == 6  # a fresh controller kept the last good value it read back
    restarted = controller(rest, source, stale_intervals=2, floor=0)
    restarted.tick()
    assert parse_state(rest.pools["gpu"]["description"]) == (6, 2)
    restarted.tick()
    assert rest.pools["gpu"]["slots"] == 0


def test_restart_restores_sizes_changed_behind_its_back() -> None:
    rest = FakeRest()
    rest.tis = [ti("a", "running", started=NOW, duration=100), ti("wide", "scheduled", slots=4, priority=9)]
    controller(rest, Source(4), backfill=False).tick()
    rest.pools["gpu"]["slots"] = 4  # e.g. someone reset it while no controller ran
    controller(rest, Source(4), backfill=False).tick()
    assert rest.pools["gpu"]["slots"] == 0


def test_unreadable_task_instances_leave_pools_alone(caplog: pytest.LogCaptureFixture) -> None:
    rest = FakeRest()
    rest.pools["gpu"] = {"name": "gpu", "slots": 3, "description": "", "include_deferred": False}
    rest.ti_error = RestError("GET /api/v2/...: HTTP 500")
    [outcome] = controller(rest, Source(4)).tick()
    assert outcome.size is None and outcome.error and rest.pools["gpu"]["slots"] == 3
    assert "pool sizes left unchanged" in caplog.text


def test_describe_and_parse_state_round_trip() -> None:
    text = describe(PoolCapacity(3, "stale", "x [y]", 2, 5), None, 3)
    assert parse_state(text) == (5, 2)
    assert parse_state("hand-written description") is None
    assert parse_state(None) is None


def test_two_controllers_with_a_lease_do_not_fight(tmp_path: Any) -> None:
    rest = FakeRest()
    clock = {"t": NOW}
    config = parse_config({"pools": {"gpu": {"source": 0, "source_timeout": "1s"}}, "interval": 10})
    config = type(config)(config.pools, config.interval, LeaderLockSpec(None, "lease", 30))
    one = build_controller(config, rest, "one", {"gpu": Source(4)}, clock=lambda: clock["t"])  # type: ignore[arg-type]
    two = build_controller(config, rest, "two", {"gpu": Source(2)}, clock=lambda: clock["t"])  # type: ignore[arg-type]
    assert one.tick() and not two.tick()
    clock["t"] += 5
    assert one.tick() and not two.tick()  # lease renewed; the pool claim still has 25 of 30 s
    assert json.loads(rest.variables["lease"])["holder"] == "one"
    assert rest.writes == [("gpu", 4)]
    clock["t"] += 31  # "one" stopped renewing (crashed)
    assert two.tick()
    assert not one.tick()  # lost its lease: it releases only pools it claimed last, none now
    assert rest.writes == [("gpu", 4), ("gpu", 2)]


def test_file_lock_lease_between_controllers(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    rest = FakeRest()
    raw = {
        "pools": {"gpu": {"source": 0}},
        "lease": {"lock_file": str(tmp_path / "wm.lock"), "variable": None},
    }
    config = parse_config(raw)
    one = build_controller(config, rest, "one", {"gpu": Source(4)})  # type: ignore[arg-type]
    two = build_controller(config, rest, "two", {"gpu": Source(2)})  # type: ignore[arg-type]
    assert one.tick() and not two.tick()
    assert "standing by" in caplog.text
    assert one.leader_lock is not None
    one.leader_lock.release()
    assert two.tick() and rest.pools["gpu"]["slots"] == 2
    assert two.leader_lock is not None
    two.leader_lock.release()


def test_backfill_with_nothing_to_backfill_keeps_the_reservation_closed() -> None:
    """Slots a wide task waits for are not re-opened just because nothing else is waiting yet."""
    rest = FakeRest()
    rest.tis = [ti("a", "running", started=NOW, duration=100), ti("wide", "scheduled", slots=4, priority=9)]
    controller(rest, Source(4)).tick()
    assert rest.pools["gpu"]["slots"] == 0


def test_a_task_scheduled_long_ago_starves_and_stops_backfill_behind_it() -> None:
    """``scheduled_when`` (when a task instance turned SCHEDULED) is its ready time: a task waiting the
    objective's ``overdue`` (8 h) since then, and since its key, lets no later work backfill."""
    hour = 3600.0
    rest = FakeRest()
    rest.tis = [
        ti("busy", "running", slots=3, started=NOW - 10, duration=2 * hour),
        ti("wide", "scheduled", slots=4, priority=key_weight(NOW - 10 * hour), scheduled=NOW - 60),
        ti("waiting", "scheduled", slots=2, priority=key_weight(NOW - 9 * hour), duration=hour),
        ti("quick", "scheduled", slots=1, priority=key_weight(NOW), duration=60, scheduled=NOW),
    ]
    controller(rest, Source(4)).tick()
    assert rest.pools["gpu"]["slots"] == 4  # "quick" backfills the free slot: its end cannot delay "wide"
    rest.tis[2]["scheduled_when"] = datetime.fromtimestamp(NOW - 8 * hour, UTC).isoformat()
    controller(rest, Source(4)).tick()
    assert rest.pools["gpu"]["slots"] == 0
    assert "d/r/waiting/-1 starving" in rest.pools["gpu"]["description"]


def _lookahead_state(rest: FakeRest) -> None:
    # "prep" (1 GPU) ends in 5 s; "wide" (4 GPUs, highest priority) waits for it, not scheduled yet;
    # a 600-s small task is ready and would take the slots "wide" needs when it turns ready
    rest.upstream = {"prep": [], "wide": ["prep"], "small_long": []}
    rest.tis = [
        ti("prep", "running", started=NOW - 5, duration=10),
        ti("wide", None, slots=4, priority=100, duration=600),
        ti("small_long", "scheduled", slots=1, priority=1, duration=600),
    ]


def test_lookahead_reserves_for_a_task_about_to_be_ready() -> None:
    rest = FakeRest()
    _lookahead_state(rest)
    [outcome] = controller(rest, Source(4)).tick()
    decision = outcome.decision
    assert decision is not None and decision.reserved_for == "d/r/wide/-1" and decision.lookahead
    assert decision.shadow_time == NOW + 5
    # C - w: the small task would delay "wide", and the slot "prep" frees stays closed until the next
    # tick admits "wide" (with the pool at 1, what runs, Airflow could hand it to the small task first)
    assert rest.pools["gpu"]["slots"] == 0
    assert "expected ready and its slots free at +5s" in rest.pools["gpu"]["description"]


def test_lookahead_off_lets_ready_work_take_the_slots() -> None:
    rest = FakeRest()
    _lookahead_state(rest)
    [outcome] = controller(rest, Source(4), lookahead=False).tick()
    assert outcome.decision is not None and outcome.decision.reserved_for is None
    assert rest.pools["gpu"]["slots"] == 4


def test_lookahead_waits_for_upstream_tasks_that_have_not_started() -> None:
    rest = FakeRest()
    _lookahead_state(rest)
    rest.tis[0]["state"] = None  # prep not started: "wide" is not about to be ready
    [outcome] = controller(rest, Source(4)).tick()
    assert outcome.decision is not None and outcome.decision.reserved_for is None
    assert rest.pools["gpu"]["slots"] == 4


def test_lookahead_read_failure_falls_back_to_ready_tasks(caplog: pytest.LogCaptureFixture) -> None:
    rest = FakeRest()
    _lookahead_state(rest)
    rest.tasks_error = RestError("GET /dags/d/tasks: 503", 503)
    with caplog.at_level(logging.WARNING):
        [outcome] = controller(rest, Source(4)).tick()
    assert outcome.written and rest.pools["gpu"]["slots"] == 4  # the tick still decides, without lookahead
    assert "cannot read the tasks about to be ready" in caplog.text


def test_backfill_strict_keeps_spare_slots_for_planned_work() -> None:
    """``backfill: true`` (EASY) lets a long task take the slot the reserved task leaves spare when its
    slots drain; ``backfill: strict`` lets through only work that ends before it can start."""

    def state(rest: FakeRest) -> None:
        rest.tis = [
            ti("r1", "running", slots=2, started=NOW - 10, duration=40),  # ends at NOW + 30
            ti("wide", "scheduled", slots=3, priority=100, duration=600),
            ti("long", "scheduled", slots=1, priority=5, duration=900),
        ]

    easy, strict = FakeRest(), FakeRest()
    state(easy)
    state(strict)
    controller(easy, Source(4)).tick()
    controller(strict, Source(4), backfill="strict").tick()
    assert easy.pools["gpu"]["slots"] == 3  # r1 + long: at +30 s wide finds its 3 of the 4
    assert strict.pools["gpu"]["slots"] == 1  # C - w: nothing starts


def test_backfill_setting_is_validated() -> None:
    from airflow_gpu_dag.watermark.config import ConfigError

    spec = parse_config({"pools": {"gpu": {"source": 4, "backfill": "strict"}}}).pools[0]
    assert spec.backfill and spec.strict_backfill
    assert not parse_config({"pools": {"gpu": {"source": 4, "backfill": False}}}).pools[0].backfill
    with pytest.raises(ConfigError, match=r"pools\.gpu\.backfill: expected true, false or strict"):
        parse_config({"pools": {"gpu": {"source": 4, "backfill": "sometimes"}}})
