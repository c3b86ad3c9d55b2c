"""Datasets and checkpoints in fsspec's in-memory object store, for the completeness, dataset-sensor
and checkpoint tests: writing an object and a checkpoint, a check that fails a given number of times
before it answers, and a URL whose filesystem is not installed. The fresh directories themselves are
the ``mem_dir`` and ``ckpt_dir`` fixtures of ``tests/unit/conftest.py``."""

from __future__ import annotations

from typing import Any

import fsspec

from airflow_gpu_dag.datasets.completeness import write_marker

#: A dataset whose filesystem (s3fs) is not installed here: reading it raises ImportError.
MISSING_S3FS = "s3://nonexistent-bucket-gpu-dag/ds"


def write_object(url: str, data: bytes) -> None:
    """Write ``data`` to the object at ``url``."""
    with fsspec.open(url, "wb") as handle:
        handle.write(data)


def write_checkpoint(directory: str, step: int) -> None:
    """A complete checkpoint of ``step`` in ``directory``: its weights and its completion marker."""
    write_object(f"{directory}/checkpoint-{step}/weights", b"w")
    write_marker(f"{directory}/checkpoint-{step}")


def flaky(real: Any, error: Exception, times: int = 1) -> Any:
    """``real``, raising ``error`` on its first ``times`` calls."""
    calls = {"n": 0}

    def check(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= times:
            raise error
        return real(*args, **kwargs)

    return check
