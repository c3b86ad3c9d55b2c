"""Datasets behind data edges: is a dataset complete, not merely present?

Producers call :func:`write_marker` / :func:`write_manifest` when they finish; the data-edge sensors
and triggers check with :func:`check_once` (see :mod:`airflow_gpu_dag.datasets.completeness`).
"""

from __future__ import annotations

from airflow_gpu_dag.datasets.completeness import (
    CompletenessResult,
    Manifest,
    Marker,
    StabilityTracker,
    StableSize,
    check_once,
    parse_completeness,
    write_manifest,
    write_marker,
)

__all__ = [
    "CompletenessResult",
    "Manifest",
    "Marker",
    "StabilityTracker",
    "StableSize",
    "check_once",
    "parse_completeness",
    "write_manifest",
    "write_marker",
]
