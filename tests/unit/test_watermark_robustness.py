"""The watermark controller under faults it got wrong before, each with the state it must keep.

* one failed read of the lease Variable (a REST blip) counted as "lease lost": every pool was
  released to its capacity and the reservation dropped for an interval;
* the pools' claim was dated from the tick's start, before the sources were read: a slow source
  left a claim already expired when written, and the scheduler's watchdog reopened a reserved pool.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_dag.pool_claim.state import parse_pool_state
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController, build_controller
from airflow_gpu_dag.watermark.sources import CapacityReading
from tests.unit.test_watermark_controller import NOW, FakeRest, Source, ti


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


class SlowSource:
    """A source whose read takes ``seconds`` of the controller's clock."""

    kind = "fake"

    def __init__(self, clock: dict[str, float], seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def read(self) -> CapacityReading:
        self.clock["t"] += self.seconds
        return CapacityReading(4, "fake 4")


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
    # Before: httpx's timeout applied to each read, so a server sending a byte now and then held the
    # tick, and the controller's lock with it, for as long as it kept sending.
    import time

    from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
    from tests.unit.test_rest_deadline import TrickleServer

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
