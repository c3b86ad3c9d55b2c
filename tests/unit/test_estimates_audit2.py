"""Audit of the learned-duration estimator (core.analysis.estimates): a change of level is followed even when
one of the new tries is a spike, and a spike alone still is not followed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.estimates import RunSample, estimate_duration


def runs(*durations: float) -> list[RunSample]:
    """Tries ending one after another (the last given is the most recent)."""
    samples = []
    t = 1_000.0
    for d in durations:
        samples.append(RunSample(d, "success", t, t + d))
        t += d + 10
    return samples


@pytest.mark.parametrize("spike_at", [0, 2, 4])
def test_a_change_of_level_with_one_spike_among_the_new_tries_is_followed(spike_at: int) -> None:
    # 10 tries at 100 s, then the task takes 400 s (5 tries) and one new try hit a bad night (4000 s).
    # The spike used to veto the change: all six new tries were dropped as outliers, 100 s learned.
    new = [400.0] * 5
    new.insert(spike_at, 4000.0)
    estimate = estimate_duration("train", runs(*[100.0] * 10, *reversed(new)), declared=None, fallback=60)
    assert estimate.learned == pytest.approx(400.0)
    assert estimate.dropped == {"before_change": 10, "outlier": 1}


@pytest.mark.parametrize("newest", [[400.0, 400.0, 4000.0], [400.0, 4000.0, 40000.0], [4000.0, 400.0]])
def test_fewer_than_three_agreeing_new_tries_are_still_not_a_change(newest: list[float]) -> None:
    estimate = estimate_duration("train", runs(*[100.0] * 10, *newest), declared=None, fallback=60)
    assert estimate.learned == pytest.approx(100.0)
    assert "before_change" not in estimate.dropped


@settings(max_examples=150, deadline=None)
@given(
    old=st.lists(st.floats(0.9, 1.1), min_size=4, max_size=12),
    new=st.lists(st.floats(0.9, 1.1), min_size=4, max_size=7),
    factor=st.floats(4.0, 50.0),
    spike=st.floats(8.0, 1000.0),
    spike_at=st.integers(0, 7),
    up=st.booleans(),
)
def test_property_one_spike_does_not_veto_a_change_of_level(
    old: list[float], new: list[float], factor: float, spike: float, spike_at: int, up: bool
) -> None:
    level = 100.0 * (factor if up else 1 / factor)
    newest = [level * x for x in new]  # oldest first
    newest.insert(min(spike_at, len(newest)), level * (spike if up else 1 / spike))  # beyond, same side
    history = runs(*[100.0 * x for x in old], *newest)
    estimate = estimate_duration("train", history, declared=None, fallback=60)
    assert estimate.learned is not None
    assert level * 0.899 <= estimate.learned <= level * 1.101
