"""Usage-ledger fakes shared by the budget, gate and trigger tests: GPU-seconds records ending at a
fixed clock, and a ledger file with a known mix of runs, pools and days."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord

#: The fakes' clock: records end here unless told otherwise.
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()


def usage_record(
    run_id: str, hours: float, devices: int = 1, pool: str = "gpu", end: float = NOW
) -> UsageRecord:
    """A record of ``train.fit`` in ``run_id``: ``hours`` GPU-hours on ``devices`` GPUs, ending at ``end``."""
    return UsageRecord(
        dag_id="train",
        run_id=run_id,
        task_id="fit",
        try_number=1,
        devices=tuple(range(devices)),
        start=end - hours * 3600 / devices,
        end=end,
        pool=pool,
    )


def sample_ledger(path: Path) -> str:
    """Write the sample ledger to ``path``: run r1 3 GPU-h in pool gpu, r2 4 in gpu and 8 in other,
    r3 5 in gpu the day before :data:`NOW`."""
    book = UsageLedger(path)
    book.append(usage_record("r1", 2.0, devices=2))
    book.append(usage_record("r1", 1.0))
    book.append(usage_record("r2", 4.0, pool="gpu"))
    book.append(usage_record("r2", 8.0, pool="other"))
    book.append(usage_record("r3", 5.0, end=NOW - 86400))  # yesterday
    return str(path)
