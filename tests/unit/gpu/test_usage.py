"""Tests of ``airflow_gpu_dag.gpu.usage``."""

from __future__ import annotations


def _record(cls, lease_id: str):
    return cls("d", "r", "t", 1, (0,), 100.0, 160.0, lease_id=lease_id)


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
