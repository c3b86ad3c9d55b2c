"""Shared fixtures of the benchmark scripts' tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def benchmarks_on_path() -> Iterator[None]:
    """``benchmarks/`` first on ``sys.path`` for the test, as the scripts run there (they import one
    another by module name)."""
    sys.path.insert(0, str(BENCHMARKS))
    yield
    sys.path.remove(str(BENCHMARKS))
