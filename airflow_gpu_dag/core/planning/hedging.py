"""Hedging a plan against estimate errors: the worlds its options are scored over, and the last choice.

When durations are learned from past runs, the packing planner
(:func:`~airflow_gpu_dag.core.planning.planner.packing_weights_plan`) knows how far they may still be off (the
learned durations' standard error, :func:`~airflow_gpu_dag.core.analysis.estimates.planning_error`). It scores
every option over :func:`worlds`: copies of the DAG whose durations are the estimates times
``exp(N(0, error))``, seeded, so that a plan which only wins when every estimate is right loses.

Scoring many options on the same few worlds and keeping the best favours the option fitted to those
worlds' particular draws (the winner's curse: the kept score is optimistic). :func:`final_choice`
therefore compares the best few options once more on *fresh* worlds, drawn independently of the ones
that ranked them, and keeps the one that is shortest there. Pure: no Airflow.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from airflow_gpu_dag.core.model.graph import TaskGraph

__all__ = ["FINALISTS", "FINAL_WORLDS", "final_choice", "perturbed", "worlds"]

#: How many of the best-scored distinct options :func:`final_choice` compares again.
FINALISTS = 3
#: How many fresh worlds it compares them over.
FINAL_WORLDS = 8


def perturbed(graph: TaskGraph, sigma: float, seed: str) -> TaskGraph:
    """A copy of ``graph`` whose durations are multiplied by ``exp(N(0, sigma))`` (seeded)."""
    rng = random.Random(seed)
    world = TaskGraph(graph.dag_id)
    for node in graph.nodes.values():
        world.add_task(replace(node, duration=node.duration * math.exp(rng.gauss(0.0, sigma))))
    for up, down, kind in graph.edges():
        world.add_edge(up, down, kind)
    return world


def worlds(graph: TaskGraph, sigma: float, count: int, tag: str = "") -> list[TaskGraph]:
    """``count`` seeded :func:`perturbed` copies of ``graph`` (none when ``sigma`` is 0). ``tag`` names
    a set of worlds: sets with different tags are drawn independently, the same tag gives the same
    worlds (plans stay deterministic)."""
    if sigma <= 0:
        return []
    prefix = f"{graph.dag_id}:{tag}:" if tag else f"{graph.dag_id}:"
    return [perturbed(graph, sigma, f"{prefix}{k}") for k in range(count)]


def final_choice(
    ranked: Sequence[Mapping[str, int]],
    makespan_in: Callable[[Mapping[str, int], TaskGraph], float],
    fresh: Sequence[TaskGraph],
    finalists: int = FINALISTS,
) -> tuple[int, dict[int, float]]:
    """Which of the options ``ranked`` (priority weights, best-scored first) to keep.

    The first ``finalists`` distinct options (an option whose weights equal an earlier one's is
    skipped) are scored by their mean makespan over the ``fresh`` worlds (``makespan_in(weights,
    world)``); the shortest wins, ties to the better-ranked option. Returns the winner's index into
    ``ranked`` and the fresh score of every finalist by index. Without fresh worlds or options the first
    option wins, unscored.
    """
    if not fresh or not ranked:
        return 0, {}
    scores: dict[int, float] = {}
    seen: list[Mapping[str, int]] = []
    for index, weights in enumerate(ranked):
        if any(weights == earlier for earlier in seen):
            continue
        seen.append(weights)
        scores[index] = sum(makespan_in(weights, world) for world in fresh) / len(fresh)
        if len(seen) >= finalists:
            break
    best = min(scores, key=lambda index: (scores[index], index))
    return best, scores
