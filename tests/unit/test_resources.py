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


@pytest.mark.parametrize(
    ("value", "message", "fix"),
    [
        ("1h 1h", "gives hours twice", "each unit once"),  # was read as 2h
        ("30m 1h 15min", "gives minutes twice", "each unit once"),
        ("1_000", "underscore", "'1000'"),  # was 1000 s
        ("\uff11\uff10\uff10\uff10", "not ASCII", "'1000'"),  # full-width digits: were 1000 s
        ("\uff11h", "not ASCII", "'1h'"),  # was 1 hour
        ("\u0663\u0660m", "not ASCII", "ASCII digits"),  # Arabic-Indic digits
        (-0.0, "negative zero", "0"),  # was accepted as -0.0 (and written to the hints so)
    ],
)
def test_parse_duration_refuses_what_it_would_read_silently(value: object, message: str, fix: str) -> None:
    with pytest.raises(EstimateError, match=message) as err:
        parse_duration(value)
    assert fix in str(err.value)


@pytest.mark.parametrize(("value", "seconds"), [("1h30m", 5400.0), ("30m1h", 5400.0), ("1h 30 min", 5400.0)])
def test_each_unit_once_in_any_order_is_still_a_duration(value: str, seconds: float) -> None:
    assert parse_duration(value) == seconds


def test_parse_memory_refuses_digits_that_are_not_ascii() -> None:
    with pytest.raises(EstimateError, match="not ASCII") as err:  # was 80 GiB
        parse_memory_mib("\uff18\uff10GiB")
    assert "'80GiB'" in str(err.value)


def test_a_gpu_count_in_full_width_digits_is_refused() -> None:
    with pytest.raises(EstimateError, match="not ASCII"):  # was 4 GPUs
        GpuRequest.parse("\uff14")


@pytest.mark.parametrize("gpu_type", ["\u00e4100", "\uff21100", "a\uff11\uff10\uff10"])
def test_a_gpu_type_that_is_not_ascii_is_refused_with_its_ascii_spelling(gpu_type: str) -> None:
    """An umlaut "a100" and a full-width "A100" both became pool ``gpu_100`` (the letter dropped): one
    pool for two spellings that are meant to be ``a100``."""
    from airflow_gpu_dag.core.model.pools import normalize_gpu_type, pool_for_gpu_type

    with pytest.raises(ValueError, match="not ASCII") as err:
        normalize_gpu_type(gpu_type)
    assert "'a100'" in str(err.value)
    with pytest.raises(ValueError, match="not ASCII"):
        pool_for_gpu_type(gpu_type)
    with pytest.raises(EstimateError, match="not ASCII"):
        GpuRequest.parse(1, None, gpu_type)
