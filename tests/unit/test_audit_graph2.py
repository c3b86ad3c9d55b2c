"""Audit of the pure core's graph model and its inputs: NumPy numbers, huge or nameless GPU requests,
the plan fingerprint of a fallback ladder, int32 clamping of infinite weights."""

from __future__ import annotations

import json
import math

import pytest

from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, INT32_MIN, clamp_int32
from airflow_gpu_dag.core.model.fingerprint import fingerprint
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.model.ladders import fit_ladders
from airflow_gpu_dag.core.model.resources import (
    EstimateError,
    GpuRequest,
    parse_duration,
    parse_estimate,
    parse_memory_mib,
)
from airflow_gpu_dag.core.simulation.simulator import simulate

np = pytest.importorskip("numpy")


# -- NumPy numbers, as DAG files that compute their requests pass them -----------------------------------


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


def test_gpu_hints_take_numpy_numbers() -> None:
    from airflow_gpu_dag.executor_config import HINTS_KEY, gpu_hints

    hints = gpu_hints(duration=np.int64(1800), gpus=np.int64(2), gpu_memory=np.int64(1024))[HINTS_KEY]
    assert (hints["duration_s"], hints["gpus"], hints["gpu_memory_mib"]) == (1800.0, 2, 1024)
    json.dumps(hints)  # executor_config must serialize


# -- GPU requests that used to escape as bare ValueErrors ------------------------------------------------


def test_a_gpu_count_too_long_for_int_is_an_estimate_error() -> None:
    with pytest.raises(EstimateError, match="5000 digits is out of range"):
        GpuRequest.parse("9" * 5000)


def test_a_gpu_type_without_letters_or_digits_is_refused_naming_the_task() -> None:
    with pytest.raises(EstimateError, match="no letters or digits"):
        GpuRequest.parse(1, None, "--")
    from airflow_gpu_dag.operators.gpu_spec import GpuTaskError, resolve_gpu_task

    with pytest.raises(GpuTaskError, match=r"GPU task 'train' in DAG 'd': GPU type '--' has no letters"):
        resolve_gpu_task("train", gpus=1, gpu_type="--", dag_id="d")


# -- the plan fingerprint of a fallback ladder -----------------------------------------------------------


def _ladder(small_hours: float, start_within: float = 1200.0) -> TaskGraph:
    """prep -> big (8 GPUs, assumed) -> small (4 GPUs, contingent: counts 0 until assumed) -> done, as
    ``airflow.graph`` builds a ladder."""
    rung = {"ladder": "train", "rungs": 2, "start_within_s": start_within}
    big = {**rung, "index": 0, "rung": "big", "role": "assumed", "expected_duration": 3600.0}
    small = {**rung, "index": 1, "rung": "small", "role": "contingent"}
    small["expected_duration"] = small_hours * 3600
    g = TaskGraph("ladder")
    g.add("prep", 600.0)
    g.add_task(TaskNode("train.big", 3600.0, GpuRequest(8), "gpu", 8, attrs={"fallback": big}))
    attrs = {"fallback": small, "contingent_duration": small_hours * 3600}
    g.add_task(TaskNode("train.small", 0.0, GpuRequest(4), "gpu", 4, attrs=attrs))
    g.add("done", 0.0)
    g.add_edge("prep", "train.big")
    g.add_edge("train.big", "train.small")
    g.add_edge("train.small", "done")
    return g


def test_the_fingerprint_follows_a_fallback_rungs_estimate_and_wait() -> None:
    capacity = {"gpu": 4}  # the assumed rung (8 GPUs) never fits: the plan runs the small one
    one, three = _ladder(1.0), _ladder(3.0)
    assert fit_ladders(one, capacity).nodes["train.small"].duration == 3600.0
    assert fit_ladders(three, capacity).nodes["train.small"].duration == 3 * 3600.0
    # the packing plan is cached by fingerprint: the same one would keep the old rung's plan
    assert fingerprint(one, capacity, {}) != fingerprint(three, capacity, {})
    longer_wait = _ladder(1.0, start_within=3600.0)
    assert fit_ladders(longer_wait, capacity).nodes["train.big"].duration == 3600.0  # waits 1 h, not 20 min
    assert fingerprint(one, capacity, {}) != fingerprint(longer_wait, capacity, {})
    assert fingerprint(one, capacity, {}) == fingerprint(_ladder(1.0), capacity, {})


def test_the_fingerprint_of_a_graph_without_ladders_is_unchanged() -> None:
    """Graphs without fallback rungs keep their digest (DAG versions already named by it)."""
    g = TaskGraph.from_edges("d", {"a": 600.0, "b": 1800.0, "c": 60.0}, [("a", "b"), ("a", "c")], {"b": 4})
    assert fingerprint(g, {"gpu_default": 8}, {"rule": "packing"}) == "61a026adb4cd0b8bbd0055f0e7e7fcfd"


# -- int32 clamping --------------------------------------------------------------------------------------


def test_clamp_int32_clamps_infinities() -> None:
    assert clamp_int32(math.inf) == INT32_MAX
    assert clamp_int32(-math.inf) == INT32_MIN
    assert clamp_int32(np.float32("inf")) == INT32_MAX
    assert clamp_int32(10**400) == INT32_MAX and clamp_int32(2**31 - 1.4) == INT32_MAX
    with pytest.raises(ValueError):
        clamp_int32(math.nan)


def test_a_priority_callable_may_put_a_task_first_with_an_infinite_weight() -> None:
    g = TaskGraph.from_edges("d", {"a": 600.0, "b": 1800.0, "c": 60.0}, [])
    result = simulate(
        g, {"default_pool": 1}, "critical_path", priority=lambda _: {"a": 1, "b": math.inf, "c": -math.inf}
    )
    assert [t.task_id for t in sorted(result.schedule, key=lambda t: t.start)] == ["b", "a", "c"]
    assert result.by_id()["b"].priority == INT32_MAX
