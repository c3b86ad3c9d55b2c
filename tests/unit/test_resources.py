"""Units: durations, memory sizes, GPU requests."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_gpu_dag.core.model.resources import (
    MAX_ESTIMATE_S,
    EstimateError,
    GpuRequest,
    format_duration,
    format_memory,
    parse_duration,
    parse_estimate,
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
        ("1073741824B", 1024),
    ],
)
def test_parse_memory(value: object, mib: int) -> None:
    assert parse_memory_mib(value) == mib


@pytest.mark.parametrize("value", ["eighty", "80 GiBs", "-1GiB", "", "80XB", True, None])
def test_parse_memory_rejects(value: object) -> None:
    with pytest.raises(EstimateError) as err:
        parse_memory_mib(value)
    assert "80GiB" in str(err.value)


@pytest.mark.parametrize("value", ["40000", " 80 ", "1073741824"])
def test_parse_memory_refuses_a_string_without_a_unit(value: str) -> None:
    """``"40000"`` was read as bytes (1 MiB) while an int 40000 is MiB: a silent millionfold error."""
    with pytest.raises(EstimateError, match="has no unit") as err:
        parse_memory_mib(value)
    assert f"{value.strip()}MiB" in str(err.value)


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


@pytest.mark.parametrize("value", ["1000000d", 10**9, "367d"])
def test_an_estimate_longer_than_a_year_is_refused(value: object) -> None:
    """ "1000000d" (a typo) put one task at the lowest int32 weight and its siblings at the highest."""
    assert parse_duration(value) > MAX_ESTIMATE_S  # still a duration (e.g. a config option)...
    with pytest.raises(EstimateError, match="longer than any task runs"):
        parse_estimate(value)  # ...but no task's estimate


def test_estimates_up_to_a_year_are_accepted() -> None:
    assert parse_estimate("366d") == MAX_ESTIMATE_S
    assert parse_estimate(3_600_000) == 3_600_000.0  # 41 days: long, but a task can run that long
