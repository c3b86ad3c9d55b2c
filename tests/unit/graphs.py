"""Small task graphs for the planning-core tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hypothesis import strategies as st

from airflow_gpu_dag.core.model.graph import TaskGraph


def gpu_graph(
    tasks: Mapping[str, tuple[float, int]], edges: list[tuple[str, str]], dag_id: str = "g"
) -> TaskGraph:
    """``tasks``: task id -> (duration, GPUs); a task with GPUs holds that many slots of pool ``gpu``."""
    graph = TaskGraph(dag_id)
    for task_id, (duration, gpus) in tasks.items():
        node = graph.add(task_id, duration, gpus)
        node.pool = "gpu" if gpus else None
    for up, down in edges:
        graph.add_edge(up, down)
    return graph


def draw_task_graph(
    draw: st.DrawFn,
    dag_id: str,
    sizes: tuple[int, int],
    gpus: Sequence[int],
    max_duration: int,
    pool: Callable[[st.DrawFn, int], str] | None = None,
) -> TaskGraph:
    """A random DAG for hypothesis: ``sizes`` (min, max) tasks ``t0..``, each with a GPU count from
    ``gpus`` and an integer duration up to ``max_duration``; a task with GPUs holds them in ``pool(draw,
    gpus)`` (default ``gpu``), one without runs unlimited; each task gets up to 3 earlier upstream tasks."""
    n = draw(st.integers(*sizes))
    graph = TaskGraph(dag_id)
    for i in range(n):
        count = draw(st.sampled_from(list(gpus)))
        node = graph.add(f"t{i}", draw(st.integers(0, max_duration)), count)
        node.pool = (pool(draw, count) if pool else "gpu") if count else None
    for i in range(1, n):
        for j in draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)):
            graph.add_edge(f"t{j}", f"t{i}")
    return graph


#: An hour, in seconds.
HOUR = 3600.0


def fallen_back_ladder(wait: float, small: float, others: int = 0) -> TaskGraph:
    """Rung ``eight`` (8 GPUs) fell back after waiting ``wait`` s; rung ``one`` (1 GPU, ``small`` s) is
    the one the plan assumes (``plan_rung``); ``others`` independent 8-GPU tasks of 2 h next to them."""
    graph = TaskGraph("ladder")
    rung = {"ladder": "train", "rungs": 2, "start_within_s": wait}
    eight = {**rung, "rung": "eight", "index": 0, "role": "fell back", "expected_duration": HOUR}
    one = {**rung, "rung": "one", "index": 1, "role": "assumed", "expected_duration": small}
    graph.add("train.eight", wait, 8, pool="gpu", attrs={"fallback": eight})
    graph.add("train.one", small, 1, pool="gpu", attrs={"fallback": one})
    graph.add_edge("train.eight", "train.one")
    for i in range(others):
        graph.add(f"other{i}", 2 * HOUR, 8, pool="gpu")
    return graph


def sized_and_unlimited_pools() -> TaskGraph:
    """Three 4-GPU tasks in the sized pool ``gpu`` and three in ``tpu``, a pool no capacity names (so
    unlimited), and ``after`` (``tpu``) after ``tpu2``: 10-s tasks, ``after`` 1 s."""
    graph = TaskGraph("unlimited")
    for i in range(3):
        graph.add(f"tpu{i}", 10.0, 4, pool="tpu")
        graph.add(f"gpu{i}", 10.0, 4, pool="gpu")
    graph.add("after", 1.0, 4, pool="tpu")
    graph.add_edge("tpu2", "after")
    return graph
