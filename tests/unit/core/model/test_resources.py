"""Units: durations, memory sizes, GPU requests."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from airflow_gpu_dag.core.model.graph import TaskGraph
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
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy


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
        ("1h 1h", "gives hours twice", "each unit once"),  # would read as 2h
        ("30m 1h 15min", "gives minutes twice", "each unit once"),
        ("1_000", "underscore", "'1000'"),  # would read as 1000 s
        ("\uff11\uff10\uff10\uff10", "not ASCII", "'1000'"),  # full-width digits: would read as 1000 s
        ("\uff11h", "not ASCII", "'1h'"),  # would read as 1 hour
        ("\u0663\u0660m", "not ASCII", "ASCII digits"),  # Arabic-Indic digits
        (-0.0, "negative zero", "0"),  # would read as -0.0 (and be written to the hints so)
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


np = pytest.importorskip("numpy")


def test_numpy_integers_are_gpu_counts() -> None:
    request = GpuRequest.parse(np.int64(2), np.int64(40960), "A100")
    assert (request.count, request.memory_mib, request.gpu_type) == (2, 40960, "a100")
    assert type(request.count) is int  # stored in executor_config (JSON) as a plain int
    assert type(GpuRequest(np.int32(4)).count) is int
    assert GpuRequest.parse(np.float32(2.0)).count == 2
    graph = TaskGraph("d")
    assert graph.add("train", 60.0, np.int64(8)).gpus == 8
    for bad in (np.float32(2.5), np.int64(0), np.bool_(True)):
        with pytest.raises(EstimateError, match="GPU count"):
            GpuRequest.parse(bad)


def test_numpy_numbers_are_durations_and_memory() -> None:
    assert parse_duration(np.int64(1800)) == 1800.0
    assert parse_estimate(np.float32(2.5)) == 2.5
    assert parse_memory_mib(np.int64(40960)) == 40960
    assert parse_memory_mib(np.float32(1.5)) == 2
    with pytest.raises(EstimateError, match="negative"):
        parse_duration(np.int64(-5))
    with pytest.raises(EstimateError, match=r"boolean|type bool"):
        parse_duration(np.bool_(True))
    with pytest.raises(EstimateError, match="366 days"):
        parse_estimate(np.int64(10**12))


def test_a_gpu_count_too_long_for_int_is_an_estimate_error() -> None:
    with pytest.raises(EstimateError, match="5000 digits is out of range"):
        GpuRequest.parse("9" * 5000)


STRATEGIES = (CriticalPathPriorityStrategy, PackingPriorityStrategy)


@pytest.fixture
def _fresh_strategies() -> Iterator[None]:
    _reset()
    yield
    _reset()


def _reset() -> None:
    for cls in STRATEGIES:
        cls._weights.reset()
        cls._failed.clear()


@pytest.mark.usefixtures("_fresh_strategies")
@pytest.mark.parametrize("value", [10**400, -(10**400), 2**20_000], ids=["1e400", "-1e400", "2**20000"])
def test_found_huge_ints_are_estimate_errors(value: int) -> None:
    """``float()`` of these raised OverflowError (and ``repr`` of the last one, over 4,300 digits,
    raises ValueError): now an EstimateError with a short message."""
    with pytest.raises(EstimateError, match="out of range"):
        parse_duration(value)
    with pytest.raises(EstimateError, match="finite"):
        parse_memory_mib(value)


@pytest.mark.parametrize("count", ["²", " ³ ", "¹"])
def test_gpu_count_of_superscript_digits_is_an_estimate_error(count: str) -> None:
    # str.isdigit() is True for superscripts, which int() refuses: a bare ValueError escaped the
    # adapters' `except EstimateError` (a DAG's graph could not be built) without naming the fix
    with pytest.raises(EstimateError, match=r"not ASCII .*; write '\d'"):  # the digit it stands for
        GpuRequest.parse(count)
    assert GpuRequest.parse(" 4 ").count == 4


def test_names_of_real_gpu_types_still_parse() -> None:
    for name in ("a100", "H100 80GB HBM3", "a100-sxm4-80gb", "rtx_4090"):
        assert GpuRequest.parse(1, None, name).gpu_type == name.strip().lower()
