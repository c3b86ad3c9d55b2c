"""Task-instance fields read defensively (watermark/task_instance_fields.py): a well-formed REST answer
reads as its values; a malformed field costs that value (a default or a clamp), never an exception."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_gpu_dag.watermark import task_instance_fields as fields
from airflow_gpu_dag.watermark.task_instance_fields import INT32_MAX, MAX_DURATION_S, MAX_SLOTS


def rest_ti(**changes: Any) -> dict[str, Any]:
    """A task instance as ``GET /api/v2/dags/~/dagRuns/~/taskInstances`` of Airflow 3 returns it."""
    ti = {
        "id": "0193c4e5-7d3a-7c1e-9f0a-2b8e4c6d1a10",
        "task_id": "fit",
        "dag_id": "train",
        "dag_run_id": "scheduled__2026-11-30T00:00:00+00:00",
        "map_index": 3,
        "logical_date": "2026-11-30T00:00:00Z",
        "run_after": "2026-11-30T00:00:00Z",
        "start_date": "2026-11-30T00:05:00.250000Z",
        "end_date": None,
        "duration": None,
        "state": "running",
        "try_number": 1,
        "max_tries": 2,
        "task_display_name": "fit",
        "dag_display_name": "train",
        "hostname": "worker-0",
        "unixname": "airflow",
        "pool": "gpu",
        "pool_slots": 4,
        "queue": "default",
        "priority_weight": 1200,
        "operator": "GpuOperator",
        "operator_name": "GpuOperator",
        "queued_when": "2026-11-30T00:04:59Z",
        "scheduled_when": "2026-11-30T00:04:58Z",
        "pid": 4242,
        "executor": None,
        "executor_config": "{'gpu_dag': {'duration_s': 600.0}}",
        "note": None,
        "rendered_map_index": None,
        "rendered_fields": {},
        "trigger": None,
        "triggerer_job": None,
        "dag_version": None,
    }
    ti.update(changes)
    return ti


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_a_rest_task_instance_reads_as_its_values() -> None:
    ti = rest_ti()
    assert fields.slots(ti) == 4
    assert fields.priority(ti) == 1200
    assert fields.key(ti) == "train/scheduled__2026-11-30T00:00:00+00:00/fit/3"
    assert fields.order(ti) == ("2026-11-30T00:00:00Z", 3)
    assert fields.start_time(ti) == epoch("2026-11-30T00:05:00.250000")
    assert fields.scheduled_time(ti) == epoch("2026-11-30T00:04:58")


def test_missing_fields_read_as_the_documented_defaults() -> None:
    """An unmapped task without a priority, not started, not scheduled yet."""
    assert fields.slots({}) == 1  # Airflow requires at least one slot
    assert fields.priority({}) == 0
    assert fields.key({"dag_id": "d", "dag_run_id": "r", "task_id": "t"}) == "d/r/t/-1"
    assert fields.order({}) == ("", -1)
    assert fields.start_time({}) is None
    assert fields.scheduled_time({}) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, 3),
        (2.9, 2),  # truncated as int() does
        ("5", 5),  # a string that holds a number
        (0, 1),  # below the bound: clamped
        (-7, 1),
        (10**12, MAX_SLOTS),
        (float("nan"), 1),  # not a finite number: the default
        (float("inf"), 1),
        ("four", 1),
        (True, 1),  # a bool is not a count
        ([4], 1),
        ({"slots": 4}, 1),
    ],
)
def test_pool_slots_are_an_int_from_one_to_max_slots(value: Any, expected: int) -> None:
    assert fields.slots(rest_ti(pool_slots=value)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (-50, -50),  # a negative weight is a valid weight
        (2**40, INT32_MAX),
        (-(2**40), -INT32_MAX - 1),
        ("12.5", 12),
        (None, 0),  # Airflow 3's priority_weight is nullable
        (float("-inf"), 0),
        ("NaN", 0),
    ],
)
def test_priority_weight_is_clamped_to_int32(value: Any, expected: int) -> None:
    assert fields.priority(rest_ti(priority_weight=value)) == expected


def test_as_int_clamps_to_the_bounds_it_is_given() -> None:
    assert [fields.as_int(v, 7, 0, 10) for v in (-3, 4, 4.99, "11", None, False, "x")] == [
        0,
        4,
        4,
        10,
        7,
        7,
        7,
    ]


@pytest.mark.parametrize(
    ("map_index", "shown"), [(-1, -1), (0, 0), ("2", 2), (-9, -1), ("x", -1), (None, -1)]
)
def test_the_key_and_the_order_read_the_map_index_alike(map_index: Any, shown: int) -> None:
    """An unreadable or negative map index is -1, as an unmapped task's."""
    ti = rest_ti(map_index=map_index)
    assert fields.key(ti).rsplit("/", 1)[1] == str(shown)
    assert fields.order(ti)[1] == shown


def test_the_order_falls_back_to_run_after_without_a_logical_date() -> None:
    """Airflow 3 runs triggered by an asset or by hand may have no logical date."""
    ti = rest_ti(logical_date=None, run_after="2026-12-01T08:00:00Z", map_index=-1)
    assert fields.order(ti) == ("2026-12-01T08:00:00Z", -1)
    assert fields.order(rest_ti(logical_date=None, run_after=None))[0] == ""


@pytest.mark.parametrize("value", [None, "", "not a date", 1_800_000_000, True, ["2026-11-30T00:00:00Z"]])
def test_an_unreadable_start_or_scheduled_time_is_none(value: Any) -> None:
    ti = rest_ti(start_date=value, scheduled_when=value)
    assert (fields.start_time(ti), fields.scheduled_time(ti)) == (None, None)


def test_times_with_an_offset_read_as_the_same_instant() -> None:
    ti = rest_ti(start_date="2026-11-30T02:05:00+02:00", scheduled_when="2026-11-30T00:04:58+00:00")
    assert fields.start_time(ti) == epoch("2026-11-30T00:05:00")
    assert fields.scheduled_time(ti) == epoch("2026-11-30T00:04:58")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (600.0, 600.0),
        (0, 0.0),
        ("90", 90.0),
        (1e12, MAX_DURATION_S),
        (None, 60.0),
        (-1.0, 60.0),
        (float("nan"), 60.0),
        (float("inf"), 60.0),  # an infinite estimate is unreadable, not "ten years"
        (True, 60.0),
        ("soon", 60.0),
        ([600], 60.0),
    ],
)
def test_a_duration_is_the_estimate_or_the_default(value: Any, expected: float) -> None:
    assert fields.duration(value, 60.0) == expected


def test_every_public_reader_is_exported() -> None:
    defined = {n for n, v in vars(fields).items() if getattr(v, "__module__", None) == fields.__name__}
    assert sorted(n for n in defined if not n.startswith("_")) == sorted(
        n for n in fields.__all__ if callable(getattr(fields, n))
    )
