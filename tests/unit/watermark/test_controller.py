"""The watermark controller against an in-memory stand-in of the Airflow REST API."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu_dag.core.policy.objective import DEFAULT_OBJECTIVE, OBJECTIVES, key_weight
from airflow_gpu_dag.executor_config import duration_hint
from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.pool_claim.state import parse_pool_state
from airflow_gpu_dag.watermark.config import LeaderLockSpec, parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController, build_controller, describe, parse_state
from airflow_gpu_dag.watermark.sources import CapacityReading, PoolCapacity, SourceError
from tests.unit.watermark.conftest import (
    FUZZ_SETTINGS,
    FUZZ_VALUES,
    NOW,
    TASK_INSTANCES,
    FakeRest,
    Source,
    controller,
    mock_rest_client,
    ti,
)


def _lookahead_state(rest: FakeRest) -> None:
    # "prep" (1 GPU) ends in 5 s; "wide" (4 GPUs, highest priority) waits for it, not scheduled yet;
    # a 600-s small task is ready and would take the slots "wide" needs when it turns ready
    rest.upstream = {"prep": [], "wide": ["prep"], "small_long": []}
    rest.tis = [
        ti("prep", "running", started=NOW - 5, duration=10),
        ti("wide", None, slots=4, priority=100, duration=600),
        ti("small_long", "scheduled", slots=1, priority=1, duration=600),
    ]


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
    objective's gate overdue (36 h for ``fair``, the default) since then, and since its key, lets no
    later work backfill."""
    hour = 3600.0
    overdue = OBJECTIVES[DEFAULT_OBJECTIVE].gate_overdue
    rest = FakeRest()
    rest.tis = [
        ti("busy", "running", slots=3, started=NOW - 10, duration=2 * hour),
        ti("wide", "scheduled", slots=4, priority=key_weight(NOW - overdue - 2 * hour), scheduled=NOW - 60),
        ti("waiting", "scheduled", slots=2, priority=key_weight(NOW - overdue - hour), duration=hour),
        ti("quick", "scheduled", slots=1, priority=key_weight(NOW), duration=60, scheduled=NOW),
    ]
    controller(rest, Source(4)).tick()
    assert rest.pools["gpu"]["slots"] == 4  # "quick" backfills the free slot: its end cannot delay "wide"
    rest.tis[2]["scheduled_when"] = datetime.fromtimestamp(NOW - overdue, UTC).isoformat()
    controller(rest, Source(4)).tick()
    assert rest.pools["gpu"]["slots"] == 0
    assert "d/r/waiting/-1 starving" in rest.pools["gpu"]["description"]


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


# -- The watermark controller under faults it got wrong before, each with the state it must keep.


def _reserving_rest(rest: FakeRest) -> FakeRest:
    rest.tis = [
        ti("small_running", "running", started=NOW - 10, duration=600),
        ti("wide", "scheduled", slots=4, priority=100, duration=600),
        ti("small_waiting", "scheduled", slots=1, duration=600),
    ]
    return rest


class FlakyVariables(FakeRest):
    failing = False

    def get_variable(self, key: str) -> str | None:
        if self.failing:
            raise RuntimeError("503 Service Unavailable on GET /variables")
        return super().get_variable(key)


class SlowSource:
    """A source whose read takes ``seconds`` of the controller's clock."""

    kind = "fake"

    def __init__(self, clock: dict[str, float], seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def read(self) -> CapacityReading:
        self.clock["t"] += self.seconds
        return CapacityReading(4, "fake 4")


def test_one_failed_lease_read_keeps_the_reservation_until_the_lease_runs_out() -> None:
    rest = _reserving_rest(FlakyVariables())
    clock = {"t": NOW}
    config = parse_config(
        {"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": "lease", "ttl": "3m"}}
    )
    ctl = build_controller(config, rest, holder="h1", sources={"gpu": Source(4)}, clock=lambda: clock["t"])
    ctl.preflight()
    ctl.tick()
    assert rest.pools["gpu"]["slots"] == 0  # 0 of 4 free: held back for the 4-slot task
    rest.failing = True
    clock["t"] += 60
    ctl.tick()
    assert ctl.active and rest.pools["gpu"]["slots"] == 0  # not released for one failed read
    clock["t"] += 200  # past our lease's 3 minutes: no longer ours for sure
    ctl.tick()
    assert not ctl.active and rest.pools["gpu"]["slots"] == 4  # released to its capacity


def test_the_claim_runs_from_the_write_not_from_the_start_of_the_tick() -> None:
    rest = _reserving_rest(FakeRest())
    clock = {"t": NOW}
    config = parse_config(
        {"interval": 10, "pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}}
    )
    source: Any = SlowSource(clock, 25.0)  # e.g. an overloaded Prometheus, under its 30 s timeout
    ctl = WatermarkController(config, rest, {"gpu": source}, default_duration=60.0, clock=lambda: clock["t"])
    ctl.tick()
    state = parse_pool_state(rest.pools["gpu"]["description"])
    assert rest.pools["gpu"]["slots"] == 0
    assert state.expires is not None and state.expires >= clock["t"] + config.fail_open_window() - 1e-6


def test_a_controller_back_from_a_freeze_leaves_a_pool_another_group_took_over() -> None:
    # A freezes past its claim, B (another lease, another size) takes the pool over at its start;
    # before, A came back and both wrote every tick: the pool flipped between 4 and 8.
    rest = FakeRest()
    clock = {"t": NOW}

    def config(variable: str, gpus: int) -> Any:
        return parse_config(
            {
                "interval": 60,
                "lease": {"lock_file": None, "variable": variable},
                "pools": {"gpu": {"source": gpus}},
            }
        )

    a = build_controller(
        config("team_a", 4), rest, holder="A", sources={"gpu": Source(4)}, clock=lambda: clock["t"]
    )
    a.preflight()
    a.tick()
    assert rest.pools["gpu"]["slots"] == 4
    clock["t"] += 400  # longer than A's claim (3 x 60 s)
    b = build_controller(
        config("team_b", 8), rest, holder="B", sources={"gpu": Source(8)}, clock=lambda: clock["t"]
    )
    assert b.preflight().taken_over == ["gpu"]
    sizes = []
    for _ in range(3):
        b.tick()
        (outcome,) = a.tick()
        sizes.append(rest.pools["gpu"]["slots"])
        clock["t"] += 60
    assert sizes == [8, 8, 8]
    assert not outcome.written and "managed by another watermark controller (variable:team_b" in (
        outcome.error or ""
    )


def test_a_last_good_value_of_another_source_configuration_is_not_restored() -> None:
    # The pool moves to another source (config v2), which fails at start: before, the 8 GPUs the old
    # source measured were restored from the pool description and kept for stale_intervals ticks.
    from airflow_gpu_dag.watermark.sources import SourceError

    rest = FakeRest()

    def run(source_config: Any, source: Source) -> WatermarkController:
        config = parse_config(
            {
                "pools": {"gpu": {"source": source_config, "stale_intervals": 3, "floor": 0}},
                "lease": {"lock_file": None, "variable": None},
            }
        )
        return WatermarkController(config, rest, {"gpu": source}, default_duration=60.0, clock=lambda: NOW)  # type: ignore[dict-item]

    old = run({"type": "file", "path": "/run/gpus-v1"}, Source(8))
    old.tick()
    old.shutdown()
    assert "last_good" in rest.pools["gpu"]["description"]
    (outcome,) = run(
        {"type": "file", "path": "/run/gpus-v2"}, Source(SourceError("connection refused"))
    ).tick()
    assert (outcome.capacity.status, rest.pools["gpu"]["slots"]) == ("floor", 0)
    # the same configuration restarted does continue from its saved value
    same = run({"type": "file", "path": "/run/gpus-v2"}, Source(4))
    same.tick()
    same.shutdown()
    (again,) = run({"type": "file", "path": "/run/gpus-v2"}, Source(SourceError("connection refused"))).tick()
    assert (again.capacity.status, rest.pools["gpu"]["slots"]) == ("stale", 4)


def test_a_tick_on_a_trickling_api_server_ends_by_the_clients_timeout(tmp_path: Any) -> None:
    # httpx's timeout applies to each read: the client's timeout bounds the whole tick, or a server
    # sending a byte now and then holds the tick, and the controller's lock with it, while it sends.
    import time

    from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
    from tests.unit.hooks.conftest import TrickleServer

    config = parse_config(
        {
            "pools": {"gpu": {"source": 4}, "gpu2": {"source": 2}},
            "lease": {"lock_file": str(tmp_path / "wm.lock"), "variable": None},
        }
    )
    with TrickleServer() as server:
        client = AirflowRestClient(server.url, token="t", timeout=1.0)
        controller = build_controller(config, client, clock=lambda: NOW)
        started = time.monotonic()
        outcomes = controller.tick()
        took = time.monotonic() - started
        controller.shutdown()
        client.close()
        assert server.wait_closed()
    assert took < 1.0 + 3.0, f"the tick took {took:.1f}s"
    assert [o.pool for o in outcomes] == ["gpu", "gpu2"]
    assert all(o.size is None and o.error and "ReadTimeout" in o.error for o in outcomes)


pool_bodies = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "slots": FUZZ_VALUES,
            "description": st.one_of(
                FUZZ_VALUES,
                st.builds(lambda v: f"x [gpu-dag-state {json.dumps(v, default=str)}]", FUZZ_VALUES),
                st.just('[gpu-dag-state {"last_good": 1e400, "failures": "many", "capacity": -1}]'),
            ),
            "include_deferred": FUZZ_VALUES,
        },
    ),
)


class GarbageRest(FakeRest):
    def __init__(self, tis: list[Any], pool: Any) -> None:
        super().__init__()
        self.tis = tis
        self.pool = pool

    def get_pool(self, name: str) -> Any:
        return self.pools.get(name, self.pool)

    def task_instances(self, pools: Any, states: Any) -> list[Any]:
        return list(self.tis)

    def run_task_instances(self, dag_id: str, run_id: str) -> list[Any]:
        return list(self.tis)

    def upstream_task_ids(self, dag_id: str) -> dict[str, list[str]]:
        return {"t": ["u"]}


# -- the REST client on a broken api-server ----------------------------------------------------------------


@FUZZ_SETTINGS
@given(TASK_INSTANCES, pool_bodies, st.integers(min_value=0, max_value=16), st.booleans())
def test_a_tick_never_raises_on_malformed_task_instances_or_pools(
    tis: list[Any], pool: Any, gpus: int, backfill: bool
) -> None:
    rest = GarbageRest(tis, pool)
    config = parse_config(
        {
            "pools": {"gpu": {"source": 0, "backfill": backfill}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    controller = WatermarkController(
        config, rest, {"gpu": Source(gpus)}, default_duration=60.0, clock=lambda: NOW
    )  # type: ignore[arg-type,dict-item]
    for _ in range(2):
        for outcome in controller.tick():
            assert outcome.size is None or 0 <= outcome.size <= outcome.capacity.gpus
    for name, slots in rest.writes:
        assert name == "gpu" and isinstance(slots, int) and 0 <= slots <= gpus
        state = parse_pool_state(rest.pools[name]["description"])
        assert state is not None and state.capacity == gpus


def test_ten_thousand_task_instances_in_one_answer() -> None:
    rest = FakeRest()
    rest.tis = [ti("hold", "running", started=NOW - 10, duration=100)] + [
        ti(f"t_{i}_ünï", "scheduled", slots=1 + i % 3, priority=i % 7) for i in range(10_000)
    ]
    config = parse_config({"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}})
    controller = WatermarkController(
        config, rest, {"gpu": Source(8)}, default_duration=60.0, clock=lambda: NOW
    )  # type: ignore[arg-type]
    (outcome,) = controller.tick()
    assert outcome.error is None and outcome.size is not None and 0 <= outcome.size <= 8


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b"[]",
        b'{"task_instances": "nope"}',
        b'{"task_instances": [1, "x", null, {"pool": "gpu", "state": "running", "pool_slots": 1e999}]}',
        b'{"slots": "NaN", "description": {"x": 1}}',
        b"",
    ],
)
def test_garbage_answers_cost_the_tick_not_the_loop(body: bytes) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    rest = mock_rest_client(handler)
    config = parse_config({"pools": {"gpu": {"source": 0}}, "lease": {"lock_file": None, "variable": None}})
    controller = WatermarkController(
        config, rest, {"gpu": Source(4)}, default_duration=60.0, clock=lambda: NOW
    )  # type: ignore[dict-item]
    outcomes = controller.tick()
    assert [o.pool for o in outcomes] == ["gpu"]
    assert outcomes[0].size is None or 0 <= outcomes[0].size <= 4


class _FinishedRuns(FakeRest):
    """FakeRest that also lists finished DAG runs (``GET /dags/~/dagRuns``)."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[dict[str, Any]] = []

    def pages(self, path: str, key: str, params: Any = ()) -> list[dict[str, Any]]:
        assert (path, key) == ("/dags/~/dagRuns", "dag_runs")
        return list(self.finished)


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_tick_sends_the_plan_error_of_a_run_that_finished_since_the_last(
    dry_run: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import airflow_gpu_dag.watermark.plan_quality as plan_quality

    sent: list[tuple[str, Any, Any]] = []
    monkeypatch.setattr(plan_quality.metrics, "plan_error", lambda dag, s, e: sent.append((dag, s, e)))
    rest = _FinishedRuns()
    ctl = controller(rest, Source(4))
    ctl.dry_run = dry_run
    error = {
        "tasks": 2,
        "start_error_s": {"median": 1.0, "p90": 2.0},
        "end_error_s": {"median": 3.0, "p90": 4.0},
    }
    ctl.plan_errors.report = lambda dag_id, run_id: {"controller": {"gpu": {}}, "plan_error": error}
    ctl.tick()
    end = datetime.fromtimestamp(NOW + 1, UTC).isoformat()
    rest.finished.append({"dag_id": "pipe", "dag_run_id": "r1", "state": "success", "end_date": end})
    ctl.tick()
    ctl.tick()
    assert sent == ([] if dry_run else [("pipe", error["start_error_s"], error["end_error_s"])])


# -- direct checks of the controller's promises (docstrings and docs/watermarks.md) -----------------


class FakeLock:
    """A leader lock whose answers the test sets; records its releases."""

    def __init__(self, acquire: bool = True, may_write: bool = True) -> None:
        self.answer, self.writable, self.releases = acquire, may_write, 0

    def acquire(self) -> bool:
        return self.answer

    def may_write(self) -> bool:
        return self.writable

    def describe(self) -> str:
        return "fake lease"

    def release(self) -> None:
        self.releases += 1


class NoWait(threading.Event):
    """A stop event whose wait between ticks returns at once (no 60-s interval in a unit test)."""

    def wait(self, timeout: float | None = None) -> bool:
        return self.is_set()


class AnyAnswer(FakeRest):
    """A REST API that ignores the pool and state filters of the task-instance list."""

    def task_instances(self, pools: Any, states: Any) -> list[Any]:
        return list(self.tis)


class PoolsDown(FakeRest):
    """Pools that cannot be read while ``down`` is set."""

    down = False

    def get_pool(self, name: str) -> dict[str, Any] | None:
        if self.down:
            raise RestError("GET /api/v2/pools/gpu: HTTP 503")
        return super().get_pool(name)


class FailingWrites(FakeRest):
    """Pool writes that fail while ``failing`` is set."""

    failing = True

    def set_pool(
        self, name: str, slots: int, description: str, include_deferred: bool = False
    ) -> dict[str, Any]:
        if self.failing:
            raise RestError("PATCH /api/v2/pools/gpu: HTTP 500")
        return super().set_pool(name, slots, description, include_deferred)


def _two_pools(rest: FakeRest, **gpu: Any) -> WatermarkController:
    config = parse_config(
        {
            "pools": {"gpu": {"source": 0, **gpu}, "gpu2": {"source": 0}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    sources: Any = {"gpu": Source(4), "gpu2": Source(4)}
    return WatermarkController(config, rest, sources, default_duration=60.0, clock=lambda: NOW)  # type: ignore[arg-type]


def _claimed_pool(lease: str, holder: str, expires: float) -> dict[str, Any]:
    claim = (lease, holder, expires)
    text = describe(PoolCapacity(4, "ok", "fake 4", 0, 4), None, 2, claim, 60.0)
    return {"name": "gpu", "slots": 2, "description": text, "include_deferred": False}


def test_describe_writes_the_claim_and_interval_into_the_state() -> None:
    text = describe(PoolCapacity(3, "ok", "fake 3", 0, 3), None, 3, ("variable:l", "h1", NOW + 180), 60.0)
    state = parse_pool_state(text)
    assert text.startswith("gpu-dag watermark: pool 3 of capacity 3 | source ok: fake 3")
    assert state is not None
    assert (state.lease, state.holder, state.expires, state.interval) == ("variable:l", "h1", NOW + 180, 60.0)
    assert (state.capacity, state.last_good, state.failures, state.why) == (3, 3, 0, None)


def test_describe_without_a_claim_leaves_the_pool_unclaimed() -> None:
    state = parse_pool_state(describe(PoolCapacity(2, "ok", "x", 0, 2), None, 2))
    assert state is not None and state.lease is None and state.holder is None
    assert not state.claimed(NOW)


def test_a_first_tick_on_unreadable_pools_writes_nothing_and_the_next_tick_does() -> None:
    rest = PoolsDown()
    rest.down = True
    ctl = controller(rest, Source(4))
    [outcome] = ctl.tick()
    assert outcome.size is None and not outcome.written and (outcome.error or "").startswith("pools: ")
    assert "HTTP 503" in (outcome.error or "") and rest.writes == [] and not ctl.active
    rest.down = False
    [outcome] = ctl.tick()
    assert outcome.written and ctl.active and rest.writes == [("gpu", 4)]


def test_a_failed_pool_write_is_reported_and_retried_at_the_next_tick() -> None:
    rest = FailingWrites()
    ctl = controller(rest, Source(4))
    [outcome] = ctl.tick()
    assert not outcome.written and outcome.size == 4 and "HTTP 500" in (outcome.error or "")
    rest.failing = False
    [outcome] = ctl.tick()
    assert outcome.written and outcome.error is None and rest.pools["gpu"]["slots"] == 4


def test_an_outcome_reports_the_size_the_pool_had_before() -> None:
    rest = FakeRest()
    rest.pools["gpu"] = {"name": "gpu", "slots": 7, "description": "", "include_deferred": False}
    [outcome] = controller(rest, Source(4)).tick()
    assert (outcome.previous, outcome.size, outcome.written) == (7, 4, True)


def test_a_pool_whose_other_group_claim_lapsed_is_taken_over() -> None:
    """Only a live claim of another group keeps the controller off a pool; a lapsed one is no owner."""
    rest = FakeRest()
    rest.pools["gpu"] = _claimed_pool("variable:team_b", "B", NOW - 1)
    [outcome] = controller(rest, Source(4)).tick()
    assert outcome.written and outcome.error is None and rest.pools["gpu"]["slots"] == 4
    state = parse_pool_state(rest.pools["gpu"]["description"])
    assert state is not None and state.lease != "variable:team_b" and state.claimed(NOW)


def test_a_live_claim_of_the_same_group_does_not_stop_a_write() -> None:
    """A replica of the same lease group (a standby that took over) writes over its predecessor's claim."""
    rest = FakeRest()
    ctl = controller(rest, Source(4))
    rest.pools["gpu"] = _claimed_pool(ctl.group, "another-replica", NOW + 100)
    [outcome] = ctl.tick()
    assert outcome.written and rest.pools["gpu"]["slots"] == 4
    assert pool_holder(rest) == ctl.holder


def pool_holder(rest: FakeRest) -> str | None:
    state = parse_pool_state(rest.pools["gpu"]["description"])
    return None if state is None else state.holder


def test_another_groups_live_claim_names_the_other_group_and_the_fix() -> None:
    rest = FakeRest()
    rest.pools["gpu"] = _claimed_pool("variable:team_b", "B", NOW + 100)
    [outcome] = controller(rest, Source(4)).tick()
    assert outcome.size is None and not outcome.written and rest.writes == []
    error = outcome.error or ""
    assert "variable:team_b" in error and "controller B" in error and "Fix:" in error


def test_a_dry_run_writes_nothing_and_says_what_it_would_write() -> None:
    rest = FakeRest()
    rest.tis = [ti("hold", "running", started=NOW - 10, duration=100), ti("wide", "scheduled", slots=4)]
    ctl = controller(rest, Source(4), backfill=False)
    ctl.dry_run = True
    [outcome] = ctl.tick()
    assert outcome.would_write and not outcome.written and outcome.size == 0
    assert ctl.release("stopped") == [] and rest.writes == [] and rest.pools == {}


def test_a_dry_run_controller_takes_no_lease(tmp_path: Any) -> None:
    config = parse_config(
        {"pools": {"gpu": {"source": 4}}, "lease": {"lock_file": str(tmp_path / "no" / "such" / "dir" / "x")}}
    )
    ctl = build_controller(config, FakeRest(), "h", {"gpu": Source(4)}, dry_run=True)  # type: ignore[arg-type]
    assert ctl.leader_lock is None and ctl.dry_run


def test_a_standby_controller_neither_reads_nor_writes_pools() -> None:
    rest = PoolsDown()
    rest.down = True  # a standby must not even read the pools
    ctl = controller(rest, Source(4))
    ctl.leader_lock = FakeLock(acquire=False)  # type: ignore[assignment]
    assert ctl.tick() == [] and not ctl.active and rest.writes == []


def test_losing_the_lease_writes_the_claimed_pools_back_to_their_capacity() -> None:
    rest = FakeRest()
    rest.tis = [ti("hold", "running", started=NOW - 10, duration=100), ti("wide", "scheduled", slots=4)]
    ctl = controller(rest, Source(4), backfill=False)
    lock = FakeLock()
    ctl.leader_lock = lock  # type: ignore[assignment]
    ctl.tick()
    assert rest.pools["gpu"]["slots"] == 0 and ctl.active
    lock.answer = False
    assert ctl.tick() == []
    assert not ctl.active and rest.pools["gpu"]["slots"] == 4
    state = parse_pool_state(rest.pools["gpu"]["description"])
    assert state is not None and not state.claimed(NOW)


def test_shutdown_of_an_inactive_controller_writes_nothing_but_gives_up_the_lease() -> None:
    rest = FakeRest()
    ctl = controller(rest, Source(4))
    lock = FakeLock()
    ctl.leader_lock = lock  # type: ignore[assignment]
    ctl.shutdown()
    assert rest.writes == [] and lock.releases == 1 and ctl.released == []


def test_shutdown_of_an_active_controller_records_the_pools_it_released() -> None:
    rest = FakeRest()
    rest.tis = [ti("hold", "running", started=NOW - 10, duration=100), ti("wide", "scheduled", slots=4)]
    ctl = controller(rest, Source(4), backfill=False)
    ctl.tick()
    ctl.shutdown("test over")
    assert ctl.released == ["gpu"] and not ctl.active and rest.pools["gpu"]["slots"] == 4
    assert "test over" in rest.pools["gpu"]["description"]


def test_run_with_stop_already_set_ticks_never_but_still_stops_cleanly() -> None:
    ctl = controller(FakeRest(), Source(4))
    lock = FakeLock()
    ctl.leader_lock = lock  # type: ignore[assignment]
    stop = threading.Event()
    stop.set()
    ctl.run(stop)
    assert ctl.ticks == 0 and lock.releases == 1


def test_run_calls_on_tick_with_each_ticks_outcomes_until_stopped() -> None:
    rest = FakeRest()
    ctl = controller(rest, Source(4))
    stop, seen = NoWait(), []

    def on_tick(outcomes: list[Any]) -> None:
        seen.append([o.pool for o in outcomes])
        if len(seen) == 2:
            stop.set()

    ctl.run(stop, on_tick=on_tick)
    assert seen == [["gpu"], ["gpu"]] and ctl.ticks == 2
    assert ctl.released == ["gpu"] and not ctl.active  # the clean stop failed open


def test_run_survives_a_tick_that_raises_and_still_fails_open(caplog: pytest.LogCaptureFixture) -> None:
    rest = FakeRest()
    ctl = controller(rest, Source(4))
    ctl.tick()  # active, the pool claimed

    def boom() -> list[Any]:
        raise RuntimeError("bug in a tick")

    ctl.tick = boom  # type: ignore[method-assign]
    ctl.run(max_ticks=1)
    assert "watermark tick failed" in caplog.text
    assert ctl.released == ["gpu"]


def test_run_survives_an_on_tick_callback_that_raises(caplog: pytest.LogCaptureFixture) -> None:
    ctl = controller(FakeRest(), Source(4))
    stop, calls = NoWait(), []

    def on_tick(outcomes: list[Any]) -> None:
        calls.append(1)
        if len(calls) == 2:
            stop.set()
        raise OSError("heartbeat file: disk full")

    ctl.run(stop, on_tick=on_tick)
    assert len(calls) == 2 and "watermark tick failed" in caplog.text


def test_run_with_max_ticks_zero_runs_no_tick() -> None:
    rest = FakeRest()
    ctl = controller(rest, Source(4))
    ctl.run(max_ticks=0)
    assert ctl.ticks == 0 and rest.writes == []


def test_deferred_task_instances_hold_slots_only_in_include_deferred_pools() -> None:
    rest = AnyAnswer()
    rest.tis = [
        ti("def_a", "deferred", started=NOW - 5, pool="gpu"),
        ti("def_b", "deferred", started=NOW - 5, pool="gpu2"),
        ti("run_b", "running", started=NOW - 5, pool="gpu2"),
    ]
    running, ready = _two_pools(rest, include_deferred=True)._tasks(NOW)
    assert sorted(t.key for t in running) == ["d/r/def_a/-1", "d/r/run_b/-1"] and ready == []


def test_task_instances_of_unmanaged_pools_are_ignored() -> None:
    rest = AnyAnswer()
    rest.tis = [
        ti("elsewhere", "running", slots=3, started=NOW - 5, pool="cpu"),
        ti("w", "scheduled", slots=2, pool="other_gpu"),
        ti("mine", "scheduled", slots=1),
    ]
    running, ready = controller(rest, Source(4))._tasks(NOW)
    assert running == [] and [t.key for t in ready] == ["d/r/mine/-1"]


def test_one_unreadable_task_instance_is_skipped_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    rest = AnyAnswer()
    rest.tis = [None, ti("a", "running", started=NOW - 5), "garbage", ti("b", "scheduled", slots=2)]  # type: ignore[list-item]
    with caplog.at_level(logging.WARNING):
        running, ready = controller(rest, Source(4))._tasks(NOW)
    assert [t.key for t in running] == ["d/r/a/-1"] and [t.key for t in ready] == ["d/r/b/-1"]
    assert "skipped 2 unreadable task instance(s)" in caplog.text


def test_a_finished_task_instance_in_the_answer_holds_no_slots() -> None:
    """The REST answer is checked for the pool; a state it did not ask for must not hold slots either."""
    rest = AnyAnswer()
    rest.tis = [
        ti("done", "success", slots=3, started=NOW - 100, duration=1000),
        ti("retry", "up_for_retry", slots=1, started=NOW - 100, duration=1000),
        ti("wide", "scheduled", slots=4, priority=100),
    ]
    running, _ = controller(rest, Source(4))._tasks(NOW)
    assert running == []


def _pending_state(rest: FakeRest, up_state: str | None, up_pool: str) -> None:
    rest.upstream = {"up": [], "wide": ["up"]}
    rest.tis = [
        ti("up", up_state, slots=1, duration=30, pool=up_pool, started=NOW - 10),
        ti("wide", None, slots=4, priority=100, duration=600),
    ]


@pytest.mark.parametrize(
    ("up_state", "up_pool", "ready_at", "after"),
    [
        ("success", "gpu", NOW, ()),
        ("upstream_failed", "gpu", NOW, ()),
        ("running", "gpu", NOW + 20, ()),
        ("scheduled", "gpu", NOW, ("d/r/up/-1",)),
        ("scheduled", "cpu_pool", NOW + 30, ()),
    ],
)
def test_lookahead_ready_time_follows_each_upstream_state(
    up_state: str, up_pool: str, ready_at: float, after: tuple[str, ...]
) -> None:
    rest = FakeRest()
    _pending_state(rest, up_state, up_pool)
    [task] = controller(rest, Source(4))._pending(NOW)
    assert (task.key, task.ready_at, task.after) == ("d/r/wide/-1", ready_at, after)


@pytest.mark.parametrize(
    ("up_state", "up_pool"),
    [(None, "gpu"), ("up_for_retry", "gpu"), ("up_for_reschedule", "gpu"), ("scheduled", "gpu2")],
)
def test_lookahead_skips_a_task_whose_upstream_has_not_started(up_state: str | None, up_pool: str) -> None:
    """Not started, up for retry, or waiting in another managed pool: when it turns ready is unknown."""
    rest = FakeRest()
    _pending_state(rest, up_state, up_pool)
    assert "d/r/wide/-1" not in [t.key for t in _two_pools(rest)._pending(NOW)]


def test_lookahead_reads_nothing_for_pools_without_reservation_or_lookahead() -> None:
    for pool in ({"reservation": False}, {"lookahead": False}):
        rest = FakeRest()
        _lookahead_state(rest)
        rest.ti_error = rest.tasks_error = RestError("must not be called")
        assert controller(rest, Source(4), **pool)._pending(NOW) == []


def test_one_malformed_task_instance_of_a_run_does_not_cost_the_lookahead() -> None:
    class JunkInRun(FakeRest):
        def run_task_instances(self, dag_id: str, run_id: str) -> list[Any]:
            return [*super().run_task_instances(dag_id, run_id), None]

    rest = JunkInRun()
    _lookahead_state(rest)
    [outcome] = controller(rest, Source(4)).tick()
    assert outcome.decision is not None and outcome.decision.reserved_for == "d/r/wide/-1"


def test_a_late_restore_does_not_replace_a_capacity_measured_since() -> None:
    """First tick: pools unreadable, the source reads 2. Next tick the old description (6) must not
    replace that newer measurement as the last good value."""
    rest = PoolsDown()
    controller(rest, Source(6)).tick()  # an earlier controller saved last good 6
    rest.down = True
    source = Source(2)
    ctl = controller(rest, source, stale_intervals=3)
    [first] = ctl.tick()
    assert first.capacity.gpus == 2 and first.error
    rest.down, source.value = False, SourceError("exporter down")
    [outcome] = ctl.tick()
    assert (outcome.capacity.status, outcome.capacity.last_good) == ("stale", 2)
    assert rest.pools["gpu"]["slots"] == 2


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -5.0])
def test_a_bad_default_duration_is_refused_with_its_name(bad: float) -> None:
    config = parse_config({"pools": {"gpu": {"source": 4}}, "lease": {"lock_file": None, "variable": None}})
    with pytest.raises(ValueError, match="default_duration"):
        WatermarkController(config, FakeRest(), {"gpu": Source(4)}, default_duration=bad)  # type: ignore[arg-type,dict-item]
