"""Units: durations, memory sizes, GPU requests."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_gpu_dag.core.resources import (
    EstimateError,
    GpuRequest,
    format_duration,
    format_memory,
    parse_duration,
    parse_memory_mib,
)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1800, 1800.0),
        (90.5, 90.5),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("2 hours", 7200.0),
        ("1d", 86400.0),
        ("600", 600.0),
        (dt.timedelta(minutes=45), 2700.0),
        (0, 0.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["-5m", -1, "ten minutes", "", "5 parsecs", None, True, float("nan"), [1]])
def test_parse_duration_rejects(value: object) -> None:
    with pytest.raises(EstimateError) as err:
        parse_duration(value)
    assert "30m" in str(err.value)  # the message shows a valid example


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        ("80GiB", 81920),
        ("80Gi", 81920),
        ("80gib", 81920),
        ("80G", 76294),
        ("80GB", 76294),
        ("40960MiB", 40960),
        ("512Mi", 512),
        ("1TiB", 1048576),
        (2048, 2048),
        ("1073741824", 1024),
    ],
)
def test_parse_memory(value: object, mib: int) -> None:
    assert parse_memory_mib(value) == mib


@pytest.mark.parametrize("value", ["eighty", "80 GiBs", "-1GiB", "", "80XB", True, None])
def test_parse_memory_rejects(value: object) -> None:
    with pytest.raises(EstimateError) as err:
        parse_memory_mib(value)
    assert "80GiB" in str(err.value)


def test_gpu_request() -> None:
    request = GpuRequest.parse("4", "80GiB", " A100 ")
    assert request == GpuRequest(4, 81920, "a100")
    assert request.describe() == "4x a100 (80GiB each)"
    assert GpuRequest.parse(2.0).count == 2


@pytest.mark.parametrize("count", [0, -1, 1.5, "two", True])
def test_gpu_request_rejects(count: object) -> None:
    with pytest.raises(EstimateError):
        GpuRequest.parse(count)


def test_formatting() -> None:
    assert format_duration(3900) == "1h05m"
    assert format_duration(750) == "12m30s"
    assert format_duration(600) == "10m"
    assert format_duration(45) == "45s"
    assert format_memory(81920) == "80GiB"
    assert format_memory(500) == "500MiB"
    assert format_memory(None) == "-"
