"""Benchmark workloads: real workflow DAGs from a JSON file, and generated ML training pipelines.

* :func:`load_workloads` reads the ``shared/workloads`` format: a list of instances
  ``{"name": str, "tasks": [{"id", "d": seconds, "gpus": int, "parents": [ids]}]}``.
* :func:`ml_pipeline_workloads` generates ML training pipelines deterministically from a seed. Every
  training flow is split into the six atomic nodes (load, preprocess, init, train loop, checkpoint,
  evaluate); flows come as hyper-parameter sweeps, staged LLM pipelines (pre-train -> fine-tune ->
  alignment evaluation) and nightly evaluation fan-outs, with 1-8 GPU training.

Every GPU task is put in pool ``gpu_pool`` (default ``"gpu"``) holding its GPU count in slots; CPU
tasks (load, preprocess) have no GPU and land in Airflow's unlimited ``default_pool``.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import GpuRequest

__all__ = [
    "GPU_POOL",
    "Workload",
    "WorkloadError",
    "default_workloads_dir",
    "graph_from_tasks",
    "load_workloads",
    "ml_pipeline_workloads",
    "parse_sets",
]

GPU_POOL = "gpu"
#: The workload sets of the single-DAG benchmarks' ``--sets``.
SETS = ("wfinstances", "ml_pipelines")


class WorkloadError(ValueError):
    """A workload file or instance is malformed; the message names the instance and task."""


@dataclass(frozen=True)
class Workload:
    """One benchmark instance: a name, its family (e.g. ``pegasus/montage``) and its task graph."""

    name: str
    family: str
    graph: TaskGraph


def default_workloads_dir(repo_root: Path | None = None) -> Path:
    """``../shared/workloads`` next to the repository root (this file is ``<root>/benchmarks``)."""
    root = repo_root if repo_root is not None else Path(__file__).resolve().parents[1]
    return root.parent / "shared" / "workloads"


def graph_from_tasks(name: str, tasks: Iterable[dict], gpu_pool: str = GPU_POOL) -> TaskGraph:
    """Build a graph from ``[{"id", "d", "gpus", "parents"}]`` (``gpus`` 0 or missing = CPU task)."""
    graph = TaskGraph(name)
    task_list = list(tasks)
    for task in task_list:
        try:
            task_id = str(task["id"])
            raw_d, raw_gpus = task["d"], task.get("gpus", 0) or 0
            if isinstance(raw_d, bool) or isinstance(raw_gpus, bool):
                raise TypeError("a boolean is not a number")
            duration = float(raw_d)
            gpus = int(raw_gpus)
            if isinstance(raw_gpus, float) and raw_gpus != gpus:
                raise ValueError(f"'gpus' {raw_gpus!r} is not a whole number")
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise WorkloadError(
                f"workload {name!r}: task {task!r} needs 'id', numeric 'd' (seconds) and int 'gpus' ({err})"
            ) from None
        if not math.isfinite(duration) or duration < 0 or gpus < 0:
            raise WorkloadError(
                f"workload {name!r}, task {task_id!r}: 'd' and 'gpus' must be >= 0, 'd' a finite number of "
                f"seconds (got d={raw_d!r}, gpus={raw_gpus!r})"
            )
        if task_id in graph:
            raise WorkloadError(f"workload {name!r}: task id {task_id!r} appears twice")
        node = graph.add(task_id, duration, 0)
        if gpus:
            node.gpu = GpuRequest(gpus)
            node.pool = gpu_pool
            node.pool_slots = gpus
    for task in task_list:
        for parent in task.get("parents", ()) or ():
            if str(parent) not in graph:
                raise WorkloadError(
                    f"workload {name!r}, task {task['id']!r}: parent {parent!r} is not a task of the instance"
                )
            graph.add_edge(str(parent), str(task["id"]))
    graph.topological_order()  # raises CycleError naming the cycle
    return graph


def load_workloads(path: str | Path, gpu_pool: str = GPU_POOL) -> list[Workload]:
    """Read a workload JSON file (the ``shared/workloads`` format) into :class:`Workload` objects."""
    file = Path(path)
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise WorkloadError(
            f"workload file {str(file)!r} does not exist; pass --workloads PATH or put the shared "
            "workloads next to the repository (../shared/workloads/)"
        ) from None
    except json.JSONDecodeError as err:
        raise WorkloadError(f"workload file {str(file)!r} is not valid JSON: {err}") from None
    if not isinstance(data, list):
        raise WorkloadError(f"workload file {str(file)!r} must hold a list of instances")
    workloads = []
    for index, instance in enumerate(data):
        name = str(instance.get("name", f"instance-{index}")) if isinstance(instance, dict) else ""
        if not isinstance(instance, dict) or not isinstance(instance.get("tasks"), list):
            raise WorkloadError(
                f"workload file {str(file)!r}, instance {index}: needs 'name' and a 'tasks' list"
            )
        family = "/".join(name.split("/")[:2]) if "/" in name else name
        workloads.append(Workload(name, family, graph_from_tasks(name, instance["tasks"], gpu_pool)))
    return workloads


def parse_sets(text: str) -> list[str]:
    """The workload sets a ``--sets`` value names (comma separated, from :data:`SETS`), in that order.

    :raises ValueError: a name is not a set, or none is given (a typo must not drop a set silently).
    """
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SETS]
    if unknown or not chosen:
        raise ValueError(f"--sets {text!r}: use one or more of {', '.join(SETS)} (comma separated)")
    return [name for name in SETS if name in chosen]


# -- generated ML training pipelines -------------------------------------------------------------------
_MIN = 60.0


class _Builder:
    def __init__(self, name: str, rng: random.Random, gpu_pool: str) -> None:
        self.graph = TaskGraph(name)
        self.rng = rng
        self.gpu_pool = gpu_pool

    def task(self, task_id: str, minutes: float, gpus: int = 0, jitter: float = 0.25) -> str:
        duration = max(1.0, minutes * _MIN * self.rng.uniform(1 - jitter, 1 + jitter))
        node = self.graph.add(task_id, round(duration), 0)
        if gpus:
            node.gpu = GpuRequest(gpus)
            node.pool = self.gpu_pool
            node.pool_slots = gpus
        return task_id

    def edge(self, up: str | Iterable[str], down: str) -> None:
        for u in [up] if isinstance(up, str) else up:
            self.graph.add_edge(u, down)

    def flow(
        self,
        prefix: str,
        gpus: int,
        train_minutes: float,
        evals: int,
        after: str | list[str] | None = None,
        data: str | None = None,
    ) -> str:
        """One training flow as six atomic nodes; returns the id of its last node (a join of evals)."""
        upstream = [after] if isinstance(after, str) else list(after or [])
        if data is None:
            load = self.task(f"{prefix}.load", 10)
            prep = self.task(f"{prefix}.preprocess", 20)
            self.edge(load, prep)
            self.edge(upstream, load)
            init_upstream = [prep]
        else:
            init_upstream = [data, *upstream]
        init = self.task(f"{prefix}.init", 5, gpus)
        self.edge(init_upstream, init)
        train = self.task(f"{prefix}.train", train_minutes, gpus)
        ckpt = self.task(f"{prefix}.checkpoint", 5, gpus)
        self.edge(init, train)
        self.edge(train, ckpt)
        ends = []
        for e in range(evals):
            ends.append(self.task(f"{prefix}.evaluate_{e}", self.rng.choice((10, 15, 20, 30)), 1))
            self.edge(ckpt, ends[-1])
        return ends[0] if len(ends) == 1 else self._join(f"{prefix}.report", ends)

    def _join(self, task_id: str, ups: list[str]) -> str:
        self.task(task_id, 2)
        self.edge(ups, task_id)
        return task_id


def _sweep(b: _Builder) -> None:
    """Hyper-parameter sweep: shared data, N trials of one width, evaluation fan-outs, select best."""
    rng = b.rng
    load = b.task("load", 15)
    prep = b.task("preprocess", 30)
    b.edge(load, prep)
    width = rng.choice((1, 2, 4, 8))
    trials = rng.randint(3, 10)
    ends = []
    for t in range(trials):
        minutes = rng.choice((30, 45, 60, 90, 120))
        ends.append(b.flow(f"trial_{t}", width, minutes, rng.randint(1, 4), data=prep))
    best = b._join("select_best", ends)
    b.flow("final", min(8, width * 2), 120, rng.randint(2, 6), after=best)


def _llm_pipeline(b: _Builder) -> None:
    """Staged pipeline: pre-train (8 GPUs) -> fine-tunes (2-4 GPUs) -> alignment evaluation fan-out."""
    rng = b.rng
    pre = b.flow("pretrain", 8, rng.choice((90, 120)), rng.randint(2, 4))
    for f in range(rng.randint(2, 5)):
        ft = b.flow(
            f"finetune_{f}", rng.choice((2, 4)), rng.choice((30, 60, 90)), rng.randint(4, 12), after=pre
        )
        del ft


def _nightly_eval(b: _Builder) -> None:
    """Nightly evaluation: many checkpoints x benchmarks, 1-2 GPU evals, a few 8-GPU long-context runs."""
    rng = b.rng
    for m in range(rng.randint(3, 8)):
        b.flow(f"model_{m}", rng.choice((1, 2, 2, 4, 8)), rng.choice((10, 20, 40)), rng.randint(3, 15))


_FAMILIES = {"ml/sweep": _sweep, "ml/llm_pipeline": _llm_pipeline, "ml/nightly_eval": _nightly_eval}


def ml_pipeline_workloads(count: int = 24, seed: int = 0, gpu_pool: str = GPU_POOL) -> list[Workload]:
    """Generate ``count`` ML-pipeline DAGs deterministically (families in turn, sizes from ``seed``)."""
    out = []
    families = list(_FAMILIES.items())
    for i in range(count):
        family, make = families[i % len(families)]
        rng = random.Random(f"{seed}:{i}")
        b = _Builder(f"{family}-{i:03d}", rng, gpu_pool)
        make(b)
        b.graph.topological_order()
        out.append(Workload(b.graph.dag_id, family, b.graph))
    return out


def iter_graphs(workloads: Iterable[Workload]) -> Iterator[TaskGraph]:
    """The graphs of ``workloads``."""
    for w in workloads:
        yield w.graph
