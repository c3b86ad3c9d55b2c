"""Two controllers of one lease group never both write a pool: a controller that lost the Variable
lease does not act on a failed read of it, and one whose lease ran out during a slow tick writes nothing.
Either would otherwise be a split brain: two controllers sizing one pool."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.pool_claim.state import parse_pool_state
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import build_controller
from airflow_gpu_dag.watermark.leader_lock import FileLeaderLock
from airflow_gpu_dag.watermark.sources import CapacityReading
from tests.unit.watermark.conftest import (
    NOW,
    FakeRest,
    Source,
    ti,
)


class _BlipRest:
    """One controller's view of the shared in-memory API, whose Variable reads can fail."""

    def __init__(self, shared: FakeRest) -> None:
        self._shared = shared
        self.blip = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shared, name)

    def get_variable(self, key: str) -> Any:
        if self.blip:
            raise RestError("GET /variables/lease: 503 Service Unavailable")
        return self._shared.get_variable(key)


def _holder(rest: FakeRest, pool: str) -> str | None:
    state = parse_pool_state(rest.pools[pool]["description"])
    return state.holder if state is not None else None


def test_a_controller_that_lost_the_lease_stands_by_when_it_cannot_read_it() -> None:
    shared, clock = FakeRest(), {"t": NOW}
    config = parse_config(
        {
            "interval": 10,
            "pools": {"gpu": {"source": 0, "backfill": False}},
            "lease": {"lock_file": None, "variable": "lease", "ttl": 30},
        }
    )
    a_rest = _BlipRest(shared)
    a = build_controller(config, a_rest, "A", {"gpu": Source(4)}, clock=lambda: clock["t"])
    b = build_controller(config, _BlipRest(shared), "B", {"gpu": Source(4)}, clock=lambda: clock["t"])
    shared.tis = [ti("hold", "running", started=NOW - 10, duration=100), ti("wide", "scheduled", slots=4)]
    a.tick()
    assert a.active
    shared.variables["lease"] = json.dumps({"holder": "B", "expires": NOW + 30})  # handed over
    clock["t"] = NOW + 10
    a.tick()
    b.tick()
    assert not a.active and b.active and _holder(shared, "gpu") == "B"
    writes = len(shared.writes)
    clock["t"] = NOW + 15
    a_rest.blip = True  # A's own old lease (until NOW + 30) must not count: B holds the lease now
    assert a.tick() == []
    assert not a.active and len(shared.writes) == writes and _holder(shared, "gpu") == "B"


def test_a_tick_that_outlasts_the_lease_writes_nothing() -> None:
    rest, clock = FakeRest(), {"t": NOW}

    class SlowSource:
        kind = "fake"

        def __init__(self) -> None:
            self.delay = 0.0

        def read(self) -> CapacityReading:
            clock["t"] += self.delay  # answers within source_timeout, but slowly
            return CapacityReading(4, "fake 4")

    config = parse_config(
        {
            "interval": 10,
            "pools": {"p1": {"source": 0, "backfill": False}, "p2": {"source": 0, "backfill": False}},
            "lease": {"lock_file": None, "variable": "lease"},
        }
    )
    sources = {"p1": SlowSource(), "p2": SlowSource()}
    a = build_controller(config, rest, "A", sources, clock=lambda: clock["t"])
    rest.tis = [ti("wide", "scheduled", slots=4, pool="p1")]
    a.tick()
    ttl = a.leader_lock.variable_lease.ttl  # type: ignore[union-attr]
    clock["t"] = NOW + 10
    for source in sources.values():
        source.delay = ttl  # the tick outlasts the lease it renewed at its start
    writes = len(rest.writes)
    outcomes = a.tick()
    assert len(rest.writes) == writes, rest.writes
    assert {o.error for o in outcomes} == {"lease ran out"}


def test_the_claim_is_renewed_early_enough_for_a_tick_that_waits_on_its_sources() -> None:
    """Claims ran ``fail_open_after`` intervals and were renewed with 1.5 intervals left: a tick whose two
    sources took their 30-s timeouts wrote after the claim had lapsed, and the scheduler's watchdog opened
    the pool of a live controller (dropping its reservation). The margin now includes the sources' wait."""
    rest, clock = FakeRest(), {"t": NOW}
    config = parse_config(
        {
            "interval": 60,
            "pools": {
                "p1": {"source": 0, "backfill": False, "source_timeout": "30s"},
                "p2": {"source": 0, "backfill": False, "source_timeout": "30s"},
            },
            "lease": {"lock_file": None, "variable": None},
        }
    )
    assert config.source_wait() == 60 and config.fail_open_risk() is None  # 180 s > 60 + 60
    controller = build_controller(
        config, rest, "A", {"p1": Source(4), "p2": Source(4)}, clock=lambda: clock["t"]
    )
    rest.tis = [ti("wide", "scheduled", slots=4, pool="p1")]
    controller.tick()
    clock["t"] = NOW + 60
    controller.tick()  # 120 s left: the next write may come 60 s + 60 s of sources later
    state = parse_pool_state(rest.pools["p1"]["description"])
    assert state is not None and state.expires is not None and state.expires >= NOW + 60 + 180, state


def test_a_claim_shorter_than_a_tick_with_its_sources_is_reported() -> None:
    config = parse_config(
        {"interval": 10, "pools": {"gpu": {"source": 4}}, "lease": {"lock_file": None, "variable": None}}
    )
    risk = config.fail_open_risk()  # 3 x 10 s against 10 s + the 30-s default source timeout
    assert risk is not None and "(30 s)" in risk and "(40 s)" in risk and "fail_open_after to 6" in risk


def test_a_lock_file_removed_while_held_does_not_make_two_leaders(tmp_path: Path) -> None:
    """The lock file deleted while held (a /tmp cleaner, a person): a second controller created and
    locked a new file, and the first kept answering True from its orphaned handle: two leaders."""
    path = tmp_path / "wm.lock"
    first, second = FileLeaderLock(path), FileLeaderLock(path)
    assert first.acquire()
    os.unlink(path)
    assert second.acquire()  # a new file nobody held
    assert not first.acquire()  # the first stands by: the lock it holds is no longer the lock file
    assert not first.held
    second.release()
    assert first.acquire() and not second.acquire()
    os.unlink(path)
    assert first.acquire() and path.exists()  # nobody took it: the first takes the new file
    assert not second.acquire()
    first.release()
