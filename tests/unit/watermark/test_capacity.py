"""What every capacity source returns or raises (watermark/capacity.py): a frozen reading, an error the
controller catches as one kind, and the protocol each built-in source follows."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.watermark import sources
from airflow_gpu_dag.watermark.capacity import CapacityReading, SourceError
from airflow_gpu_dag.watermark.kubernetes_source import KubernetesSource
from airflow_gpu_dag.watermark.nvml_source import NvmlSource
from airflow_gpu_dag.watermark.prometheus_source import PrometheusSource
from tests.unit.watermark.conftest import Source


def test_a_reading_is_a_frozen_value() -> None:
    """Readings are compared from tick to tick: equal by value, hashable, never changed in place."""
    reading = CapacityReading(4, "nvml 4 of 8 (4 leased)")
    assert (reading.gpus, reading.detail) == (4, "nvml 4 of 8 (4 leased)")
    assert reading == CapacityReading(4, "nvml 4 of 8 (4 leased)") != CapacityReading(3, reading.detail)
    assert len({reading, CapacityReading(4, reading.detail)}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.gpus = 8  # type: ignore[misc]


def test_a_source_error_is_a_runtime_error_with_its_message() -> None:
    with pytest.raises(RuntimeError, match=r"^dcgm exporter unreachable$") as err:
        raise SourceError("dcgm exporter unreachable")
    assert type(err.value) is SourceError


def test_sources_re_exports_the_same_classes() -> None:
    """Callers import from ``sources``: an ``except SourceError`` there must catch what any source module
    raises, and a reading built there must equal one built here."""
    assert sources.SourceError is SourceError
    assert sources.CapacityReading is CapacityReading
    assert {"CapacityReading", "CapacitySource", "SourceError"} <= set(sources.__all__)


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (sources.StaticSource, "static"),
        (sources.FileSource, "file"),
        (NvmlSource, "nvml"),
        (KubernetesSource, "kubernetes"),
        (PrometheusSource, "prometheus"),
        (Source, "fake"),  # the shared fake of these tests follows it too
    ],
)
def test_each_source_has_a_kind_and_a_read(cls: Any, kind: str) -> None:
    """``kind`` names the source in outcomes and logs; ``read()`` gives a :class:`CapacityReading`."""
    assert cls.kind == kind
    assert callable(cls.read)


def test_a_source_reads_or_raises_a_source_error(tmp_path: Path) -> None:
    assert sources.StaticSource(3).read() == CapacityReading(3, "static 3")
    missing = sources.FileSource(str(tmp_path / "gpus"))
    with pytest.raises(SourceError, match=r"^cannot read .*gpus: No such file or directory$"):
        missing.read()
