"""Defects found while reviewing this stop's audits (each test fails on the code before its fix)."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.gpu.inventory import MAX_INVENTORY_GPUS, InventoryError, parse_inventory


def test_a_static_inventory_of_an_absurd_gpu_count_is_refused_not_built() -> None:
    # Before: "99999999999999999999xa100" built one device object per GPU, so the scheduler (whose
    # weights read the inventory) hung until it ran out of memory.
    with pytest.raises(InventoryError, match=f"more than {MAX_INVENTORY_GPUS} GPUs"):
        parse_inventory("99999999999999999999xa100")
    with pytest.raises(InventoryError, match="more than"):
        parse_inventory(f"{MAX_INVENTORY_GPUS}xa100,1xh100")
    assert len(parse_inventory("8xa100:80GiB,8xh100").devices) == 16


def test_a_lease_record_appended_after_a_torn_line_is_read(tmp_path) -> None:
    # Before: UsageLedger.append wrote the record onto a torn last line (a writer that crashed
    # mid-write), and the reader skipped the joined line: the lease's usage was never counted.
    from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord

    path = tmp_path / "usage.jsonl"
    ledger = UsageLedger(path)
    first = _record(UsageRecord, "lease-1")
    ledger.append(first)
    with path.open("ab") as handle:
        handle.write(b'{"lease_id": "torn", "gpu_sec')
    ledger.append(_record(UsageRecord, "lease-2"))
    assert [r.lease_id for r in ledger.read()] == ["lease-1", "lease-2"]


def _record(cls, lease_id: str):
    return cls("d", "r", "t", 1, (0,), 100.0, 160.0, lease_id=lease_id)


def test_a_window_in_a_fixed_offset_zone_reads_back_from_its_hint() -> None:
    # Before: tz=timezone(timedelta(hours=2)) was accepted, its hint stored "UTC+02:00", which no
    # ZoneInfo reads: the plan and the critical-path page dropped the window without a word.
    from datetime import UTC, datetime, timedelta, timezone

    from airflow_gpu_dag.core.model.windows import parse_window, seconds_until_open, window_from_hint

    window = parse_window("22:00", "06:00", timezone(timedelta(hours=2)))
    back = window_from_hint(window.to_hint())
    assert back == window
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)  # 14:00 at +02:00: opens in 8 h
    assert seconds_until_open(back, now) == seconds_until_open(window, now) == 8 * 3600
    minus = parse_window("01:00", "02:00", "UTC-05:30")
    assert minus.tz.utcoffset(None) == -timedelta(hours=5, minutes=30)


def test_a_zone_without_a_readable_name_is_refused_at_parse_time() -> None:
    from datetime import datetime, timedelta, tzinfo

    from airflow_gpu_dag.core.model.windows import parse_window

    class Odd(tzinfo):
        def utcoffset(self, dt: datetime | None) -> timedelta:
            return timedelta(hours=1)

        def dst(self, dt: datetime | None) -> timedelta:
            return timedelta(0)

        def __repr__(self) -> str:
            return "Odd()"

    with pytest.raises(ValueError, match="IANA name"):
        parse_window("22:00", "06:00", Odd())


def test_a_hand_edited_capacity_beyond_any_pool_is_unknown_not_written_back() -> None:
    # Before: a description whose state said "capacity": 1e12 made the watchdog write 10**12 slots:
    # the UPDATE overflows Airflow's int column, and its one transaction then opened no pool at all.
    import json

    from airflow_gpu_dag.pool_claim.state import MAX_POOL_SLOTS, parse_pool_state
    from airflow_gpu_dag.pool_claim.watchdog import expired_pools

    def description(capacity: object) -> str:
        state = {
            "last_good": 4,
            "failures": 0,
            "capacity": capacity,
            "lease": "l",
            "holder": "h",
            "expires": 10.0,
        }
        return f"gpu-dag watermark: pool 0 of capacity 4 | x [gpu-dag-state {json.dumps(state)}]"

    assert parse_pool_state(description(1e12)).capacity is None
    assert parse_pool_state(description(MAX_POOL_SLOTS)).capacity == MAX_POOL_SLOTS
    (huge,) = expired_pools([("gpu", 0, description(1e12))], now=100.0)
    assert huge.unsized and huge.capacity == 0  # kept at its size, said so: not opened to 10**12
    (fine,) = expired_pools([("gpu", 0, description(4))], now=100.0)
    assert fine.capacity == 4 and not fine.unsized
