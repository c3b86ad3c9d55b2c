"""Tests of ``airflow_gpu_dag.watermark.lifecycle``."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.pool_claim.state import PoolState, human_part, with_state
from airflow_gpu_dag.watermark.config import PoolSpec, SourceSpec, parse_config
from airflow_gpu_dag.watermark.controller import build_controller
from airflow_gpu_dag.watermark.lifecycle import CREATED_DESCRIPTION, PreflightError, preflight
from tests.unit.watermark.conftest import (
    INTERVAL,
    NOW,
    FakeRest,
    Source,
    claim_controller,
    pool_state,
    reserving,
)


class NoCreate(FakeRest):
    """Pools can be read but not created (a user without the permission), except ``allowed``."""

    def __init__(self, allowed: set[str]) -> None:
        super().__init__()
        self.allowed = allowed
        self.deleted: list[str] = []

    def set_pool(self, name: str, slots: int, description: str, include_deferred: bool = False) -> Any:
        if name not in self.pools and name not in self.allowed:
            raise RestError(f"POST /api/v2/pools: HTTP 403 forbidden ({name})", 403)
        return super().set_pool(name, slots, description, include_deferred)

    def request(self, method: str, path: str, **_: Any) -> None:
        assert method == "DELETE"
        name = path.rsplit("/", 1)[-1]
        self.deleted.append(name)
        self.pools.pop(name, None)


# -- clean stop ------------------------------------------------------------------------------------------
def test_a_clean_stop_writes_the_pool_back_to_its_capacity_and_drops_the_claim() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = claim_controller(rest, clock)
    reserving(rest)
    controller.run(threading.Event(), max_ticks=1)
    assert rest.writes == [("gpu", 0), ("gpu", 4)]
    released = pool_state(rest)
    assert released.capacity == 4 and released.expires is None and released.holder is None
    description = rest.pools["gpu"]["description"]
    assert "released at" in description and "controller me stopped (the pool had 0 slots)" in description
    # the critical-path page reads no reservation from a released pool
    from airflow_gpu_dag.plugins.critical_path_page.data import parse_pool_description

    assert parse_pool_description(description) == (4, 0, None)
    assert controller.released == ["gpu"] and not controller.active


def test_losing_the_lease_releases_only_the_pools_it_wrote_last() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    lease = {"lock_file": None, "variable": "lease", "ttl": 30}
    config = parse_config(
        {"interval": INTERVAL, "pools": {"gpu": {"source": 0, "backfill": False}}, "lease": lease}
    )
    one = build_controller(config, rest, "one", {"gpu": Source(4)}, clock=lambda: clock["t"])  # type: ignore[arg-type]
    reserving(rest)
    assert one.tick() and rest.pools["gpu"]["slots"] == 0
    # an operator hands the lease to another controller, which has not written the pool yet
    rest.variables["lease"] = json.dumps({"holder": "two", "expires": NOW + 1000})
    assert one.tick() == [] and not one.active
    assert rest.pools["gpu"]["slots"] == 4 and pool_state(rest).expires is None  # failed open by "one"


def test_dry_run_writes_nothing() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    config = parse_config({"interval": INTERVAL, "pools": {"gpu": {"source": 0, "backfill": False}}})
    controller = build_controller(
        config, rest, "me", {"gpu": Source(4)}, clock=lambda: clock["t"], dry_run=True
    )  # type: ignore[arg-type]
    reserving(rest)
    assert controller.leader_lock is None
    report = controller.preflight()
    assert report.missing == ["gpu"] and report.created == []
    (outcome,) = controller.tick()
    assert outcome.size == 0 and outcome.would_write and not outcome.written
    controller.shutdown()
    assert rest.writes == [] and rest.variables == {} and rest.pools == {}


# -- start-up checks ---------------------------------------------------------------------------------------
def test_a_pool_managed_by_another_controller_group_is_refused_and_nothing_is_written() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    other = claim_controller(rest, clock, lease={"lock_file": None, "variable": "lease_a"})
    other.tick()
    writes = list(rest.writes)
    mine = claim_controller(rest, clock, lease={"lock_file": None, "variable": "lease_b"}, holder="b")
    with pytest.raises(PreflightError) as err:
        mine.preflight()
    message = str(err.value)
    assert "'gpu'" in message and "variable:lease_a" in message and "variable:lease_b" in message
    assert "same lease" in message and "Nothing was written" in message
    assert rest.writes == writes and rest.variables == {}
    # a standby of the same group is fine, and so is the other group's pool once its claim lapsed
    claim_controller(rest, clock, lease={"lock_file": None, "variable": "lease_a"}, holder="a2").preflight()
    clock["t"] += 3 * INTERVAL + 1
    assert mine.preflight().taken_over == ["gpu"]


def test_a_pool_that_cannot_be_created_is_a_clear_error_and_leaves_nothing_behind() -> None:
    rest = NoCreate(allowed={"gpu_a"})
    config = parse_config({"pools": {"gpu_a": {"source": 2}, "gpu_b": {"source": 2}}})
    controller = build_controller(config, rest, "me", {"gpu_a": Source(2), "gpu_b": Source(2)})  # type: ignore[arg-type]
    with pytest.raises(PreflightError) as err:
        controller.preflight()
    message = str(err.value)
    assert "'gpu_b' does not exist and cannot be created" in message and "HTTP 403" in message
    assert "airflow pools set gpu_b" in message and "deleted again" in message
    assert rest.deleted == ["gpu_a"] and rest.pools == {} and rest.variables == {}


def test_missing_pools_are_created_closed_and_claimed_until_the_first_tick() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = claim_controller(rest, clock)
    assert controller.preflight().created == ["gpu"]
    assert rest.pools["gpu"]["slots"] == 0
    assert human_part(rest.pools["gpu"]["description"]) == CREATED_DESCRIPTION
    created = pool_state(rest)
    assert (created.lease, created.holder, created.capacity) == (controller.group, "me", None)
    assert created.expires == NOW + 3 * INTERVAL
    # another group's controller starting meanwhile is refused: two would fight over the new pool
    other = claim_controller(rest, clock, lease={"lock_file": None, "variable": "lease_b"}, holder="b")
    with pytest.raises(PreflightError, match="managed by another watermark controller"):
        other.preflight()
    controller.tick()
    assert rest.pools["gpu"]["slots"] == 4 and pool_state(rest).capacity == 4


def test_a_clean_stop_before_the_first_tick_drops_the_claim_of_the_pool_it_created() -> None:
    rest, clock = FakeRest(), {"t": NOW}
    controller = claim_controller(rest, clock)
    controller.preflight()
    rest.ti_error = RestError("GET /api/v2/dags/~/dagRuns/~/taskInstances: HTTP 503", 503)
    (outcome,) = controller.tick()  # the first tick cannot size it: nothing written
    assert not outcome.written and rest.writes == [("gpu", 0)] and pool_state(rest).holder == "me"
    controller.shutdown("stopped by SIGTERM")
    assert controller.released == [] and rest.pools["gpu"]["slots"] == 0
    after = pool_state(rest)
    assert after.expires is None and after.holder is None
    assert (
        "released at" in rest.pools["gpu"]["description"]
        and "stopped by SIGTERM" in rest.pools["gpu"]["description"]
    )


class _RacingRest(FakeRest):
    """Another controller creates each pool between this one's read and its create (HTTP 409)."""

    def __init__(self, description: str) -> None:
        super().__init__()
        self.rival_description = description
        self.deleted: list[str] = []

    def set_pool(
        self, name: str, slots: int, description: str, include_deferred: bool = False
    ) -> dict[str, Any]:
        if name not in self.pools:
            self.pools[name] = {"name": name, "slots": 0, "description": self.rival_description}
            raise RestError(f"POST /api/v2/pools: HTTP 409 pool {name} already exists", 409)
        return super().set_pool(name, slots, description, include_deferred)

    def request(self, method: str, path: str, **kwargs: Any) -> None:
        self.deleted.append(path)


def _specs(*names: str) -> dict[str, PoolSpec]:
    return {n: PoolSpec(n, SourceSpec("static", {"gpus": 4})) for n in names}


def test_a_pool_created_meanwhile_by_a_replica_of_the_same_group_is_not_an_error() -> None:
    """Two replicas of one controller (one lease Variable) start together: both read the pool as
    missing, one creates it and the other's create gets HTTP 409. That replica starts, keeping the
    pools, instead of refusing ("cannot be created ... let the controller's API user create pools")
    and deleting the pools it had created."""
    rival = with_state(CREATED_DESCRIPTION, PoolState(lease="variable:L", holder="B", expires=NOW + 180))
    rest = _RacingRest(rival)
    report = preflight(rest, _specs("gpu_a", "gpu_b"), "variable:L", NOW, holder="A", claim_for=180)  # type: ignore[arg-type]
    assert report.created == [] and rest.deleted == []
    assert set(rest.pools) == {"gpu_a", "gpu_b"}


def test_a_pool_created_meanwhile_by_another_group_names_that_group() -> None:
    rival = with_state(CREATED_DESCRIPTION, PoolState(lease="variable:other", holder="B", expires=NOW + 180))
    rest = _RacingRest(rival)
    with pytest.raises(PreflightError, match=r"variable:other.*managed by another watermark"):
        preflight(rest, _specs("gpu_a"), "variable:L", NOW, holder="A", claim_for=180)  # type: ignore[arg-type]
