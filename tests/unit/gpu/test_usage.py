"""Tests of ``airflow_gpu_dag.gpu.usage``."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_gpu_dag.gpu.usage import (
    UsageLedger,
    UsageRecord,
    gpu_seconds_by_dag_run,
    gpu_seconds_by_pool_day,
)


def _record(cls, lease_id: str):
    return cls("d", "r", "t", 1, (0,), 100.0, 160.0, lease_id=lease_id)


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()


def test_a_lease_record_appended_after_a_torn_line_is_read(tmp_path) -> None:
    # UsageLedger.append starts a new line after a torn last line (a writer that crashed mid-write):
    # the reader skips a joined line, and the lease's usage would never be counted.
    from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord

    path = tmp_path / "usage.jsonl"
    ledger = UsageLedger(path)
    first = _record(UsageRecord, "lease-1")
    ledger.append(first)
    with path.open("ab") as handle:
        handle.write(b'{"lease_id": "torn", "gpu_sec')
    ledger.append(_record(UsageRecord, "lease-2"))
    assert [r.lease_id for r in ledger.read()] == ["lease-1", "lease-2"]


# -- UsageRecord ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("devices", "start", "end", "expected"),
    [
        ((0, 1), 100.0, 160.0, 120.0),
        ((3,), 100.0, 100.5, 0.5),
        ((0, 1), 160.0, 100.0, 0.0),
        ((), 0.0, 60.0, 0.0),
    ],
    ids=["two_gpus", "one_gpu", "end_before_start", "no_device"],
)
def test_gpu_seconds_are_devices_times_seconds_held_and_never_negative(
    devices: tuple[int, ...], start: float, end: float, expected: float
) -> None:
    """A clock stepped back between start and end must not give GPU-seconds back to a budget."""
    assert UsageRecord("d", "r", "t", 1, devices, start, end).gpu_seconds == expected


def test_a_record_is_one_flat_json_object_with_its_gpu_seconds() -> None:
    """Flat (readable with jq): the extra fields beside the others, never over them."""
    record = UsageRecord(
        "train",
        "manual__1",
        "fit",
        2,
        (0, 1),
        100.0,
        130.0,
        map_index=3,
        pool="gpu_a100",
        outcome="reclaimed",
        lease_id="L1",
        host="gpu-01",
        extra={"reclaim_reason": "holder gone", "dag_id": "not-the-dag"},
    )
    line = record.to_json()
    assert "\n" not in line
    assert json.loads(line) == {
        "dag_id": "train",
        "run_id": "manual__1",
        "task_id": "fit",
        "try_number": 2,
        "map_index": 3,
        "pool": "gpu_a100",
        "devices": [0, 1],
        "start": 100.0,
        "end": 130.0,
        "gpu_seconds": 60.0,
        "outcome": "reclaimed",
        "lease_id": "L1",
        "host": "gpu-01",
        "reclaim_reason": "holder gone",
    }


def test_a_record_read_back_from_its_json_is_the_same_record() -> None:
    record = UsageRecord("train", "r1", "fit", 1, (2, 3), 100.0, 160.0, map_index=0, pool="gpu", lease_id="L")
    record = dataclasses.replace(record, host="h", extra={"reclaim_reason": "ttl"})
    assert UsageRecord.from_dict(json.loads(record.to_json())) == record


def test_a_minimal_line_is_read_with_the_defaults() -> None:
    """Older or hand-written lines: only the times are required; ``gpu_seconds`` is derived, not kept."""
    record = UsageRecord.from_dict({"start": 10, "end": "70", "map_index": None, "gpu_seconds": 999})
    assert record == UsageRecord(None, None, None, None, (), 10.0, 70.0)
    assert (record.map_index, record.outcome, record.extra, record.gpu_seconds) == (-1, "released", {}, 0.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("start", -1.0, "start -1.0 is not a time"),
        ("end", float("nan"), "end nan is not a time"),
        ("end", float("inf"), "end inf is not a time"),
        ("start", 1e20, "start 1e+20 is not a time"),
    ],
)
def test_a_time_that_is_not_seconds_since_1970_is_refused_naming_it(
    field: str, value: float, message: str
) -> None:
    data = {"start": 100.0, "end": 160.0, field: value}
    with pytest.raises(ValueError, match=re.escape(message)):
        UsageRecord.from_dict(data)


def test_a_line_without_its_end_is_not_a_record() -> None:
    with pytest.raises(KeyError, match="end"):
        UsageRecord.from_dict({"start": 100.0, "devices": [0]})


# -- UsageLedger ------------------------------------------------------------------------------------------
def test_append_creates_the_ledger_directory_and_writes_one_line_per_record(tmp_path: Path) -> None:
    """``[gpu_dag] usage_ledger`` may name a directory that does not exist yet."""
    path = tmp_path / "elsewhere" / "budget" / "usage.jsonl"
    ledger = UsageLedger(path)
    first = UsageRecord("d", "r", "a", 1, (0,), 100.0, 160.0, lease_id="L1")
    second = UsageRecord("d", "r", "b", 1, (1,), 100.0, 130.0, lease_id="L2")
    ledger.append(first)
    ledger.append(second)
    assert path.read_text() == first.to_json() + "\n" + second.to_json() + "\n"
    assert list(ledger) == ledger.read() == [first, second]


def test_a_ledger_that_does_not_exist_yet_has_no_records(tmp_path: Path) -> None:
    ledger = UsageLedger(tmp_path / "usage.jsonl")
    assert (ledger.read(), list(ledger)) == ([], [])
    assert not ledger.path.exists()


def test_records_without_a_lease_id_are_each_counted(tmp_path: Path) -> None:
    """Only records of one lease id are one lease; records without an id are not duplicates."""
    ledger = UsageLedger(tmp_path / "usage.jsonl")
    record = UsageRecord("d", "r", "t", 1, (0,), 100.0, 160.0)
    ledger.append(record)
    ledger.append(record)
    assert ledger.read() == [record, record]


def test_malformed_lines_anywhere_are_skipped_with_a_warning_naming_the_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "usage.jsonl"
    good = UsageRecord("d", "r", "t", 1, (0,), 100.0, 160.0, lease_id="good")
    lines = [
        "[1, 2]",  # JSON, not an object
        "",  # blank: not a record, nothing to warn about
        '{"start": 100.0, "lease_id": "no-end"}',
        '{"start": 100.0, "end": 160.0, "devices": ["gpu0"], "lease_id": "bad-devices"}',
        '{"start": 100.0, "end": 160.0, "map_index": "first", "lease_id": "bad-map-index"}',
        good.to_json(),
    ]
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.gpu.usage"):
        assert UsageLedger(path).read() == [good]
    warned = [r.getMessage() for r in caplog.records if r.name == "airflow_gpu_dag.gpu.usage"]
    assert [m.split(" is not a usage record")[0] for m in warned] == [
        f"{path} line {n}" for n in (1, 3, 4, 5)
    ]


def test_a_line_whose_lease_id_is_not_a_string_is_skipped_not_fatal(tmp_path: Path) -> None:
    """One malformed line must not make the whole ledger unreadable (every budget check reads it)."""
    path = tmp_path / "usage.jsonl"
    good = UsageRecord("d", "r", "t", 1, (0,), 100.0, 160.0, lease_id="good")
    path.write_text(good.to_json() + "\n" + '{"start": 100.0, "end": 160.0, "lease_id": ["x"]}\n')
    assert UsageLedger(path).read() == [good]


def test_a_line_whose_pool_or_run_is_not_a_name_does_not_break_the_budget_summaries(tmp_path: Path) -> None:
    """Like a time that is not a moment, such a line is not a usage record: skipped, not summed."""
    path = tmp_path / "usage.jsonl"
    good = UsageRecord("d", "r", "t", 1, (0,), 100.0, 160.0, pool="gpu", lease_id="good")
    bad = {"start": 100.0, "end": 160.0, "devices": [1], "pool": ["gpu"], "run_id": {"id": 1}}
    path.write_text(good.to_json() + "\n" + json.dumps(bad) + "\n")
    records = UsageLedger(path).read()
    assert gpu_seconds_by_pool_day(records) == {("gpu", "1970-01-01"): 60.0}
    assert gpu_seconds_by_dag_run(records) == {("d", "r"): 60.0}


# -- summaries --------------------------------------------------------------------------------------------
def test_a_lease_over_two_midnights_is_split_over_three_utc_days() -> None:
    record = UsageRecord(
        "d", "r", "t", 1, (0, 1), _ts("2026-11-29T22:00:00"), _ts("2026-12-01T03:00:00"), pool="gpu_a100"
    )
    assert gpu_seconds_by_pool_day([record]) == {
        ("gpu_a100", "2026-11-29"): 2 * 2 * 3600.0,
        ("gpu_a100", "2026-11-30"): 2 * 24 * 3600.0,
        ("gpu_a100", "2026-12-01"): 2 * 3 * 3600.0,
    }
    assert sum(gpu_seconds_by_pool_day([record]).values()) == record.gpu_seconds


def test_a_lease_that_ends_at_midnight_counts_only_for_the_day_it_ran() -> None:
    record = UsageRecord("d", "r", "t", 1, (0,), _ts("2026-11-30T23:00:00"), _ts("2026-12-01T00:00:00"))
    assert gpu_seconds_by_pool_day([record]) == {(None, "2026-11-30"): 3600.0}


def test_summaries_add_up_records_of_the_same_run_and_of_the_same_pool_day() -> None:
    """Records of one run in several pools (or without a DAG) each add to their own key."""
    day = _ts("2026-11-30T08:00:00")
    listed = [
        UsageRecord("d", "r1", "a", 1, (0,), day, day + 60, pool="gpu_a100"),
        UsageRecord("d", "r1", "b", 1, (1, 2), day, day + 30, pool="gpu_h100"),
        UsageRecord("d", "r2", "a", 1, (0,), day + 100, day + 110, pool="gpu_a100"),
        UsageRecord(None, None, None, None, (3,), day, day + 5),
    ]
    assert gpu_seconds_by_dag_run(iter(listed)) == {("d", "r1"): 120.0, ("d", "r2"): 10.0, (None, None): 5.0}
    assert gpu_seconds_by_pool_day(iter(listed)) == {
        ("gpu_a100", "2026-11-30"): 70.0,
        ("gpu_h100", "2026-11-30"): 60.0,
        (None, "2026-11-30"): 5.0,
    }
    assert gpu_seconds_by_dag_run([]) == gpu_seconds_by_pool_day([]) == {}
