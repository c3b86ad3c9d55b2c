"""The task graph: atomic nodes with duration estimates and GPU requests, and the edges between them.

Pure: no Airflow, no Kubernetes. Adapters (``airflow_gpu_dag.airflow.dag_reader``) build a
:class:`TaskGraph` from an Airflow DAG; the planning code (critical path, validation, admission,
simulator) only ever sees this model.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from airflow_gpu_dag.core.model.pools import DEFAULT_POOL
from airflow_gpu_dag.core.model.resources import GpuRequest

__all__ = ["CycleError", "TaskGraph", "TaskNode", "task_pool", "task_slots"]


class CycleError(ValueError):
    """The graph has a cycle; ``cycle`` lists the task ids around it, first id repeated at the end."""

    def __init__(self, dag_id: str, cycle: list[str]) -> None:
        self.dag_id = dag_id
        self.cycle = cycle
        super().__init__(
            f"DAG {dag_id!r} has a dependency cycle: {' -> '.join(cycle)}. "
            "Remove one of these edges so the graph is acyclic."
        )


@dataclass
class TaskNode:
    """One atomic unit of work.

    ``duration`` is the estimated run time in seconds; ``duration_declared`` is False when the
    estimate is a default filled in because the task declared none. ``gpu`` is None for a task that
    needs no GPU. ``inputs``/``outputs`` are the dataset paths or URIs the task reads and writes
    (used to find hidden dependencies); ``awaits`` are paths the task waits to be *complete* (a
    completeness sensor), which orders every reader downstream of it after the writer's data.
    ``not_before`` is the earliest moment, in seconds after the run's start, at which the task may
    start (the opening of its start window; 0 = as soon as its upstream tasks are done).
    """

    task_id: str
    duration: float = 0.0
    gpu: GpuRequest | None = None
    pool: str | None = None
    pool_slots: int = 1
    retries: int = 0
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    awaits: tuple[str, ...] = ()
    duration_declared: bool = True
    attrs: dict[str, object] = field(default_factory=dict)
    not_before: float = 0.0

    @property
    def gpus(self) -> int:
        """Number of GPUs requested (0 for a CPU task)."""
        return self.gpu.count if self.gpu else 0


class TaskGraph:
    """A directed graph of :class:`TaskNode` keyed by task id.

    Insertion order is kept everywhere, so every algorithm over the graph is deterministic.
    Edges are ``upstream -> downstream``; an optional ``kind`` ("data", "control", "resource",
    "time", "cleanup") is kept per edge for the typed-edge features.
    """

    def __init__(self, dag_id: str = "dag", priority_rule: str | None = None) -> None:
        self.dag_id = dag_id
        #: The provider priority rule the DAG's tasks use (``"critical_path"`` / ``"packing"``), or None
        #: when they use a stock Airflow rule; predictions of "our" schedule follow it.
        self.priority_rule = priority_rule
        self.nodes: dict[str, TaskNode] = {}
        self._down: dict[str, dict[str, str | None]] = {}
        self._up: dict[str, dict[str, str | None]] = {}

    # -- building -------------------------------------------------------------------------------
    def add_task(self, node: TaskNode) -> TaskNode:
        """Add (or replace) a node; returns it."""
        self.nodes[node.task_id] = node
        self._down.setdefault(node.task_id, {})
        self._up.setdefault(node.task_id, {})
        return node

    def add(self, task_id: str, duration: float = 0.0, gpus: int = 0, **kwargs: object) -> TaskNode:
        """Shorthand: add a node with ``gpus`` whole GPUs (0 = no GPU)."""
        gpu = GpuRequest(gpus) if gpus else None
        return self.add_task(TaskNode(task_id, duration=duration, gpu=gpu, **kwargs))  # type: ignore[arg-type]

    def add_edge(self, upstream: str, downstream: str, kind: str | None = None) -> None:
        """Add ``upstream -> downstream``; both tasks must exist."""
        for task_id in (upstream, downstream):
            if task_id not in self.nodes:
                raise KeyError(f"DAG {self.dag_id!r}: edge refers to unknown task {task_id!r}")
        self._down[upstream][downstream] = kind
        self._up[downstream][upstream] = kind

    def with_nodes(self, changed: Mapping[str, TaskNode]) -> TaskGraph:
        """A copy with the nodes in ``changed`` (by task id, ids unchanged) put in place of this graph's,
        same edges and rule; this graph itself when nothing changes. This graph is never modified."""
        if not changed:
            return self
        copy = TaskGraph(self.dag_id, priority_rule=self.priority_rule)
        copy.nodes = {task_id: changed.get(task_id, node) for task_id, node in self.nodes.items()}
        # the adjacency as it is, so each task's upstream and downstream lists keep their order
        copy._down = {task_id: dict(downs) for task_id, downs in self._down.items()}
        copy._up = {task_id: dict(ups) for task_id, ups in self._up.items()}
        return copy

    # -- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.nodes

    def __iter__(self) -> Iterator[str]:
        return iter(self.nodes)

    def downstream(self, task_id: str) -> list[str]:
        return list(self._down[task_id])

    def upstream(self, task_id: str) -> list[str]:
        return list(self._up[task_id])

    def edges(self) -> Iterator[tuple[str, str, str | None]]:
        for up, downs in self._down.items():
            for down, kind in downs.items():
                yield up, down, kind

    def edge_kind(self, upstream: str, downstream: str) -> str | None:
        return self._down[upstream].get(downstream)

    @property
    def edge_count(self) -> int:
        return sum(len(d) for d in self._down.values())

    def sources(self) -> list[str]:
        return [t for t in self.nodes if not self._up[t]]

    def sinks(self) -> list[str]:
        return [t for t in self.nodes if not self._down[t]]

    # -- order ----------------------------------------------------------------------------------
    def topological_order(self) -> list[str]:
        """Kahn's algorithm, O(V+E). Ties are broken depth first: the tasks a task makes ready come
        next (in the order their edges were added), before tasks that were ready earlier; the first
        ready tasks go in insertion order. So a chain stays together, and the order is deterministic.
        Raises :class:`CycleError`."""
        indegree = {t: len(ups) for t, ups in self._up.items()}
        ready = [t for t in self.nodes if indegree[t] == 0]
        ready.reverse()  # pop() from the end keeps insertion order
        order: list[str] = []
        while ready:
            task_id = ready.pop()
            order.append(task_id)
            newly = []
            for down in self._down[task_id]:
                indegree[down] -= 1
                if indegree[down] == 0:
                    newly.append(down)
            ready.extend(reversed(newly))
        if len(order) != len(self.nodes):
            raise CycleError(self.dag_id, self.find_cycle() or [])
        return order

    def find_cycle(self) -> list[str] | None:
        """Return one cycle as ``[a, b, ..., a]``, or None. Iterative DFS, O(V+E)."""
        white, grey, black = 0, 1, 2
        color = dict.fromkeys(self.nodes, white)
        for root in self.nodes:
            if color[root] != white:
                continue
            stack: list[tuple[str, Iterator[str]]] = [(root, iter(self._down[root]))]
            path = [root]
            color[root] = grey
            while stack:
                node, children = stack[-1]
                child = next(children, None)
                if child is None:
                    stack.pop()
                    path.pop()
                    color[node] = black
                elif color[child] == grey:
                    start = path.index(child)
                    return [*path[start:], child]
                elif color[child] == white:
                    color[child] = grey
                    path.append(child)
                    stack.append((child, iter(self._down[child])))
        return None

    def descendants(self, task_id: str) -> set[str]:
        """All tasks reachable downstream of ``task_id`` (not including it)."""
        return self._reach(task_id, self._down)

    def ancestors(self, task_id: str) -> set[str]:
        """All tasks upstream of ``task_id`` (not including it)."""
        return self._reach(task_id, self._up)

    @staticmethod
    def _reach(start: str, adjacency: dict[str, dict[str, str | None]]) -> set[str]:
        seen: set[str] = set()
        stack = list(adjacency[start])
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(adjacency[node])
        return seen

    @classmethod
    def from_edges(
        cls,
        dag_id: str,
        durations: dict[str, float],
        edges: Iterable[tuple[str, str]],
        gpus: dict[str, int] | None = None,
    ) -> TaskGraph:
        """Build a graph from plain dicts (tests, benchmarks, workload files)."""
        graph = cls(dag_id)
        for task_id, duration in durations.items():
            graph.add(task_id, duration, (gpus or {}).get(task_id, 0))
        for up, down in edges:
            graph.add_edge(up, down)
        return graph


# -- A task's pool and slots: *the* rule used by the simulator, the planner, validation, the CLI and the
# UI. A task without a pool uses Airflow's DEFAULT_POOL; a GPU task holds one slot per GPU, any other
# task its pool_slots.


def task_pool(node: TaskNode) -> str:
    """The pool a task holds slots of: its own, else Airflow's :data:`DEFAULT_POOL`."""
    return node.pool or DEFAULT_POOL


def task_slots(node: TaskNode) -> int:
    """Slots a task holds: its GPU count for a GPU task, else ``pool_slots`` (never negative)."""
    return node.gpu.count if node.gpu is not None else max(0, int(node.pool_slots))
