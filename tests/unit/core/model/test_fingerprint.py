"""Tests of ``airflow_gpu_dag.core.model.fingerprint``."""

from __future__ import annotations

from airflow_gpu_dag.core.model.fingerprint import fingerprint
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.model.ladders import fit_ladders
from airflow_gpu_dag.core.model.resources import GpuRequest


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
