"""Audit of GPU inventory, leases and the REST hook: each test failed on the code before its fix."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory, InventoryError, parse_inventory
from airflow_gpu_dag.gpu.lease import LeaseManager, LeaseOwner, LeaseSettings, LeaseTableCorrupt
from airflow_gpu_dag.hooks import airflow_api
from airflow_gpu_dag.hooks.airflow_api import CONN_TYPE, AirflowApiHook
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient


# -- inventory ----------------------------------------------------------------------------------
def test_a_static_inventory_with_one_uuid_on_two_gpus_is_refused(tmp_path: Path) -> None:
    # Before: accepted; leases match devices by UUID, so a lease of GPU 0 marked GPU 1 (the last
    # device with that UUID) as held and GPU 0 was handed to every task that asked.
    spec = {
        "gpus": [
            {"index": 0, "type": "a100", "uuid": "GPU-x"},
            {"index": 1, "type": "a100", "uuid": "GPU-x"},
            {"index": 2, "type": "a100", "uuid": "GPU-y"},
        ]
    }
    with pytest.raises(InventoryError, match=r"UUIDs must be unique.*GPU-x"):
        parse_inventory(json.dumps(spec))
    with pytest.raises(InventoryError, match="UUIDs must be unique"):
        GpuInventory((GpuDevice(0, "a100", uuid="GPU-x"), GpuDevice(1, "a100", uuid="GPU-x")))
    # devices without a UUID (a static inventory) are still fine
    assert (
        parse_inventory('{"gpus": [{"index": 0, "type": "a100"}, {"index": 1, "type": "a100"}]}').count == 2
    )


@pytest.mark.parametrize("spec", ["2xa100:0GiB", '{"gpus": [{"index": 0, "type": "a100", "memory": 0}]}'])
def test_a_static_gpu_with_no_memory_at_all_is_refused(spec: str) -> None:
    # Before: accepted and shown as "#0 a100 -" (as if the size were unknown), while every memory
    # request was then impossible on the host.
    with pytest.raises(InventoryError, match="must be more than 0"):
        parse_inventory(spec)
    # no free memory right now is a real state (a full GPU)
    device = parse_inventory('{"gpus": [{"index": 0, "type": "a100", "memory": "80GiB", "free_memory": 0}]}')
    assert device.device(0).free_mib == 0


# -- leases -------------------------------------------------------------------------------------
def _table_with(m: LeaseManager, record: dict[str, Any]) -> None:
    m.dir.mkdir(parents=True, exist_ok=True)
    m.table_path.write_text(json.dumps({"version": 1, "leases": {record["lease_id"]: record}}))


def _foreign_record(now: float, **changes: Any) -> dict[str, Any]:
    """A lease of GPU 0 held by a process in another pid namespace (a worker container sharing the
    lease directory): only its heartbeat tells whether it is alive."""
    record: dict[str, Any] = {
        "lease_id": "foreign",
        "devices": [0],
        "uuids": [None],
        "owner": {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1, "try_number": 1},
        "holder": {"pid": 4242, "start": "1", "host": "elsewhere", "boot_id": None, "pidns": "other"},
        "processes": [],
        "acquired_at": now,
        "heartbeat_at": now,
        "ttl_s": 0.5,
    }
    record.update(changes)
    return record


def test_a_dead_lease_written_before_the_clock_was_set_back_is_reclaimed_within_the_ttl(
    tmp_path: Path,
) -> None:
    # The clock was set back an hour after the holder's last heartbeat, then the holder died. Before,
    # its heartbeat stayed "in the future" and the GPU was held for an hour plus the ttl, not the ttl.
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=0.5, heartbeat_s=0.1, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    ahead = time.time() + 3600
    _table_with(m, _foreign_record(ahead, acquired_at=ahead - 10, heartbeat_at=ahead))
    assert m.try_acquire(GpuRequest(1)) is None  # not at once: a live holder renews within the ttl
    time.sleep(0.8)
    lease = m.try_acquire(GpuRequest(1))
    assert lease is not None and lease.devices == (0,)
    reclaimed = [r for r in m.ledger.read() if r.outcome == "reclaimed"]
    assert [r.lease_id for r in reclaimed] == ["foreign"]


def test_a_live_holder_keeps_its_lease_when_the_clock_was_set_back(tmp_path: Path) -> None:
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=60, heartbeat_s=5, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    lease = m.acquire(GpuRequest(1), LeaseOwner(task_id="a", dag_id="d"))
    table = json.loads(m.table_path.read_text())
    table["leases"][lease.lease_id]["heartbeat_at"] = time.time() + 3600
    m.table_path.write_text(json.dumps(table))
    assert m.reclaim_stale() == []
    assert lease.heartbeat() and not lease.lost
    assert m.try_acquire(GpuRequest(1)) is None


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ({"heartbeat_at": None}, "'heartbeat_at' is not a number"),
        ({"acquired_at": None}, "'acquired_at' is not a number"),
        ({"heartbeat_at": float("nan")}, "'heartbeat_at' is not a number"),
        ({"ttl_s": float("inf")}, "'ttl_s' is not a number"),
    ],
)
def test_a_lease_record_with_a_null_or_non_finite_time_is_a_corrupt_table(
    tmp_path: Path, damage: dict[str, Any], reason: str
) -> None:
    # Before: null passed the check and every allocation on the host crashed with TypeError (past the
    # operators' `except LeaseError`); NaN/Infinity made the lease never stale: held for ever.
    m = LeaseManager(
        LeaseSettings(lease_dir=tmp_path / "leases", ttl_s=0.5, heartbeat_s=0.1, poll_s=0.05),
        parse_inventory("1xa100:80GiB"),
    )
    _table_with(m, _foreign_record(time.time() - 60, **damage))
    with pytest.raises(LeaseTableCorrupt, match="remove or repair") as err:
        m.try_acquire(GpuRequest(1))
    assert reason in str(err.value)


# -- the REST hook ------------------------------------------------------------------------------
SECRET = "h0st-pa55-SECRET"
PASSWORD = "pa55-w0rd-SECRET"
TOKEN = "tok-eyJhbGciOi-SECRET"


def test_credentials_in_the_connection_host_are_not_sent_nor_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: host "http://admin:<secret>@api:8080" stayed in the base URL: every message of the
    # Test button and the controller showed the password, and httpx sent it as Basic auth, which
    # replaced the bearer token on every call (401 for ever).
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("Authorization")
        seen.append((str(request.url), auth))
        if request.url.path == airflow_api.HEALTH_PATH:
            return httpx.Response(200, json={"metadatabase": {"status": "healthy"}})
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": TOKEN})
        if request.url.path == "/api/v2/pools":
            if auth != f"Bearer {TOKEN}":
                return httpx.Response(401, json={"detail": "Not authenticated"})
            return httpx.Response(200, json={"pools": []})
        return httpx.Response(404)

    def client(*args: Any, **kwargs: Any) -> AirflowRestClient:
        return AirflowRestClient(*args, transport=httpx.MockTransport(handler), **kwargs)

    monkeypatch.setattr(airflow_api, "AirflowRestClient", client)
    conn = {
        "conn_type": CONN_TYPE,
        "host": f"http://admin:{SECRET}@api:8080",
        "login": "admin",
        "password": PASSWORD,
    }
    monkeypatch.setenv("AIRFLOW_CONN_HOSTCREDS", json.dumps(conn))
    hook = AirflowApiHook("hostcreds")
    assert hook.get_client().base_url == "http://api:8080"
    ok, message = hook.test_connection()
    assert ok, message
    assert SECRET not in message and PASSWORD not in message
    assert all(SECRET not in url for url, _ in seen)
    assert seen[-1][1] == f"Bearer {TOKEN}"
    # the connection failing is no different: the message names the URL without the password
    monkeypatch.setenv("AIRFLOW_CONN_HOSTCREDS", json.dumps({**conn, "host": f"http://admin:{SECRET}@api:x"}))
    ok, message = AirflowApiHook("hostcreds").test_connection()
    assert not ok and "port that is not a number" in message
    assert SECRET not in message


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "1e20", "-5"])
def test_a_usage_line_with_a_time_that_is_not_a_moment_is_skipped(tmp_path: Path, bad: str) -> None:
    """A ledger line with ``"end": NaN`` (or Infinity, 1e20) was read as a record, and every budget summary
    (GPU-seconds per pool and day) then raised: such a line is skipped like any malformed one."""
    from airflow_gpu_dag.gpu.usage import UsageLedger, gpu_seconds_by_pool_day

    path = tmp_path / "usage.jsonl"
    good = {"dag_id": "d", "run_id": "r", "task_id": "t", "devices": [0], "start": 1_796_040_000.0}
    path.write_text(
        json.dumps({**good, "end": 1_796_040_060.0, "pool": "gpu", "lease_id": "a"})
        + "\n"
        + json.dumps({**good, "lease_id": "b", "pool": "gpu"})[:-1]
        + f', "end": {bad}}}\n'
    )
    records = UsageLedger(path).read()
    assert [r.lease_id for r in records] == ["a"]
    assert gpu_seconds_by_pool_day(records) == {("gpu", "2026-11-30"): 60.0}
