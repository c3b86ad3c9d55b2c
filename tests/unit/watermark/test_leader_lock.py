"""Two controllers of one lease group never both write a pool: a controller that lost the Variable
lease does not act on a failed read of it, and one whose lease ran out during a slow tick writes nothing.
Either would otherwise be a split brain: two controllers sizing one pool."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.pool_claim.state import parse_pool_state
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import build_controller
from airflow_gpu_dag.watermark.leader_lock import (
    CombinedLeaderLock,
    FileLeaderLock,
    VariableLeaderLock,
    default_holder_id,
)
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


# -- the lock file, the Variable lease and both, directly ----------------------------------------------------
class _FlakyStore:
    """A :class:`FakeRest`'s Variables whose calls can be made to fail (a REST blip)."""

    def __init__(self) -> None:
        self.rest = FakeRest()
        self.fail_reads = False
        self.fail_writes = False
        self.puts: list[str] = []

    def get_variable(self, key: str) -> str | None:
        if self.fail_reads:
            raise RestError("GET /api/v2/variables/lease: 503 Service Unavailable")
        return self.rest.get_variable(key)

    def create_variable(self, key: str, value: str, description: str = "") -> bool:
        if self.fail_writes:
            raise RestError("POST /api/v2/variables: 503 Service Unavailable")
        return self.rest.create_variable(key, value, description)

    def put_variable(self, key: str, value: str, description: str = "") -> None:
        if self.fail_writes:
            raise RestError("PATCH /api/v2/variables/lease: 503 Service Unavailable")
        self.puts.append(value)
        self.rest.put_variable(key, value, description)


def _lease(store: Any, holder: str, clock: dict[str, float], ttl: float = 30) -> VariableLeaderLock:
    return VariableLeaderLock(store, "lease", holder, ttl=ttl, clock=lambda: clock["t"])


def test_default_holder_ids_name_the_host_and_process_and_differ_between_controllers() -> None:
    import socket

    first, second = default_holder_id(), default_holder_id()
    host, pid, tag = first.rsplit(":", 2)
    assert host == socket.gethostname() and pid == str(os.getpid()) and len(tag) == 8
    assert first != second  # two controllers of one process (tests, restarts) are still told apart


def test_a_lock_file_in_a_missing_directory_is_created_and_names_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "run" / "locks" / "wm.lock"
    lock = FileLeaderLock(path)
    assert lock.check() is None and not lock.held
    assert lock.acquire() and lock.held
    assert path.read_text() == f"{os.getpid()}\n"
    lock.release()
    assert not lock.held


def test_the_lock_file_keeps_only_the_current_holders_pid(tmp_path: Path) -> None:
    """The file is opened for appending: a holder's pid must replace the last one, not follow it."""
    path = tmp_path / "wm.lock"
    path.write_text("12345\nleft over by a crashed controller\n")
    lock = FileLeaderLock(path)
    assert lock.acquire()
    assert path.read_text() == f"{os.getpid()}\n"
    lock.release()


def test_releasing_a_lock_that_is_not_held_does_nothing(tmp_path: Path) -> None:
    lock = FileLeaderLock(tmp_path / "wm.lock")
    lock.release()
    lock.release()
    assert not lock.held and lock.acquire()
    lock.release()
    lock.release()
    assert not lock.held


def test_of_many_controllers_racing_for_the_lock_file_exactly_one_wins(tmp_path: Path) -> None:
    import threading

    locks = [FileLeaderLock(tmp_path / "wm.lock") for _ in range(8)]
    barrier = threading.Barrier(len(locks))
    won: list[bool] = [False] * len(locks)

    def race(i: int) -> None:
        barrier.wait()
        won[i] = locks[i].acquire()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(locks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(won) == 1
    for lock in locks:
        lock.release()


def test_a_lock_file_whose_directory_is_a_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("")
    lock = FileLeaderLock(tmp_path / "not-a-dir" / "wm.lock")
    problem = lock.check()
    assert problem is not None and "not-a-dir" in problem
    assert lock.acquire() is False and not lock.held  # stands by, does not raise


def test_a_lock_file_replaced_while_held_is_taken_again(tmp_path: Path) -> None:
    """Replaced (``mv`` of another file over it) rather than deleted: nobody holds the new file, so the
    holder re-takes it and stays the only leader."""
    path = tmp_path / "wm.lock"
    first, second = FileLeaderLock(path), FileLeaderLock(path)
    assert first.acquire()
    other = tmp_path / "other"
    other.write_text("")
    os.replace(other, path)
    assert first.acquire() and first.held
    assert path.read_text() == f"{os.getpid()}\n"  # it re-took the file at the path
    assert not second.acquire()
    first.release()
    assert second.acquire()
    second.release()


def test_a_new_lease_is_created_and_held_until_its_ttl_runs_out() -> None:
    store, clock = FakeRest(), {"t": NOW}
    lease = _lease(store, "a", clock)
    assert lease.acquire() and lease.current_holder == "a"
    assert json.loads(store.variables["lease"]) == {"holder": "a", "expires": NOW + 30}
    assert lease.held_until == NOW + 30 and lease.still_ours()
    clock["t"] = NOW + 29.9
    assert lease.still_ours()
    clock["t"] = NOW + 30  # the instant it expires a standby may take it: not ours any more
    assert not lease.still_ours()


def test_renewing_a_held_lease_moves_its_expiry() -> None:
    store, clock = FakeRest(), {"t": NOW}
    lease = _lease(store, "a", clock)
    assert lease.acquire()
    clock["t"] = NOW + 20
    assert lease.acquire() and lease.held_until == NOW + 50
    assert json.loads(store.variables["lease"])["expires"] == NOW + 50


def test_our_own_expired_lease_is_taken_again_when_nobody_took_it() -> None:
    store, clock = FakeRest(), {"t": NOW}
    lease = _lease(store, "a", clock)
    assert lease.acquire()
    clock["t"] = NOW + 100
    assert not lease.still_ours()
    assert lease.acquire() and lease.still_ours() and lease.held_until == NOW + 130


def test_the_loser_of_a_race_to_create_the_lease_stands_by() -> None:
    """Two standbys saw no Variable; the other one's create stuck first: ours answers 409 (False)."""
    store, clock = FakeRest(), {"t": NOW}

    class LateStore:
        def get_variable(self, key: str) -> str | None:
            value = store.get_variable(key)
            if value is None:  # the other standby creates it between our read and our create
                store.variables[key] = json.dumps({"holder": "b", "expires": NOW + 30})
            return value

        create_variable = store.create_variable
        put_variable = store.put_variable

    lease = _lease(LateStore(), "a", clock)
    assert lease.acquire() is False
    assert lease.current_holder == "b" and lease.held_until is None and not lease.still_ours()
    assert json.loads(store.variables["lease"])["holder"] == "b"  # not overwritten


def test_a_write_that_did_not_stick_is_not_ours() -> None:
    """The REST API has no compare-and-swap: the read-back decides who won."""
    store, clock = FakeRest(), {"t": NOW}
    store.variables["lease"] = json.dumps({"holder": "b", "expires": NOW - 1})

    class Overwritten:
        get_variable = store.get_variable
        create_variable = store.create_variable

        def put_variable(self, key: str, value: str, description: str = "") -> None:
            store.put_variable(key, value, description)
            store.variables[key] = json.dumps({"holder": "c", "expires": NOW + 30})  # c wrote last

    lease = _lease(Overwritten(), "a", clock)
    assert lease.acquire() is False and lease.current_holder == "c" and lease.held_until is None


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "[]",
        "null",
        '"a string"',
        '{"holder": "b"}',
        '{"expires": 9e99}',
        '{"holder": "b", "expires": "soon"}',
        '{"holder": "b", "expires": NaN}',
        '{"holder": "b", "expires": [1]}',
        "\udcff not utf-8",
    ],
)
def test_an_unreadable_lease_counts_as_expired(raw: str) -> None:
    store, clock = FakeRest(), {"t": NOW}
    store.variables["lease"] = raw
    lease = _lease(store, "a", clock)
    assert lease.acquire() and json.loads(store.variables["lease"])["holder"] == "a"


def test_another_holders_live_lease_is_not_touched() -> None:
    store, clock = FakeRest(), {"t": NOW}
    value = json.dumps({"holder": "b", "expires": NOW + 1})
    store.variables["lease"] = value
    lease = _lease(store, "a", clock)
    assert not lease.acquire() and lease.current_holder == "b"
    lease.release()  # not ours: release must leave it alone
    assert store.variables["lease"] == value


def test_release_expires_our_lease_so_a_standby_takes_over_at_once() -> None:
    store, clock = FakeRest(), {"t": NOW}
    a, b = _lease(store, "a", clock), _lease(store, "b", clock)
    assert a.acquire() and not b.acquire()
    a.release()
    assert a.held_until is None and not a.still_ours()
    assert json.loads(store.variables["lease"]) == {"holder": "a", "expires": 0}
    assert b.acquire()  # no wait for the ttl


def test_release_survives_an_unreachable_api_and_still_stops_acting() -> None:
    store, clock = _FlakyStore(), {"t": NOW}
    lease = _lease(store, "a", clock)
    assert lease.acquire()
    store.fail_reads = True
    lease.release()  # logged, not raised: shutdown must go on
    assert not lease.still_ours()
    store.fail_reads, store.fail_writes = False, True
    lease.release()
    assert not lease.still_ours()


def test_a_failed_renewal_raises_and_keeps_the_lease_we_already_hold() -> None:
    store, clock = _FlakyStore(), {"t": NOW}
    lease = _lease(store, "a", clock)
    assert lease.acquire()
    clock["t"] = NOW + 10
    store.fail_writes = True
    with pytest.raises(RestError):
        lease.acquire()
    assert lease.held_until == NOW + 30 and lease.still_ours()  # what we wrote before still stands


def test_combined_lock_without_either_lock_always_acts() -> None:
    lock = CombinedLeaderLock(None, None)
    assert lock.acquire() and lock.may_write() and lock.describe() == "no lease"
    lock.release()


def test_combined_lock_asks_the_variable_only_once_the_host_lock_is_ours(tmp_path: Path) -> None:
    path = tmp_path / "wm.lock"
    other = FileLeaderLock(path)
    assert other.acquire()
    store, clock = FakeRest(), {"t": NOW}
    lock = CombinedLeaderLock(FileLeaderLock(path), _lease(store, "a", clock))
    assert not lock.acquire()
    assert "lease" not in store.variables  # the standby of this host did not touch the Variable
    other.release()
    assert lock.acquire() and lock.may_write()
    assert lock.describe() == f"lock file {path}, variable lease held by a"
    lock.release()
    assert json.loads(store.variables["lease"])["expires"] == 0 and other.acquire()
    other.release()


def test_combined_lock_acts_through_a_rest_blip_only_while_its_lease_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, clock = _FlakyStore(), {"t": NOW}
    lock = CombinedLeaderLock(None, _lease(store, "a", clock))
    store.fail_reads = True
    assert not lock.acquire()  # never held: stand by
    assert "standing by" in caplog.text
    store.fail_reads = False
    assert lock.acquire()
    store.fail_reads = True
    clock["t"] = NOW + 10
    assert lock.acquire() and lock.may_write()
    assert "acting this tick" in caplog.text
    clock["t"] = NOW + 30
    assert not lock.acquire() and not lock.may_write()
