"""Speed of ``airflow gpu-dag plan`` and of the critical-path page on a 1,000-task DAG.

Writes a DAG file with ``--tasks`` tasks (layers of random width, 1-3 upstream edges per task, GPU
hints on every task) to a temporary folder and times, best of ``--repeat``:

* parse: Airflow's DagBag importing the file (Airflow's cost, the same for every CLI command);
* plan: reading the DAG into a task graph and the CPM plan (``plan_dag``: ours);
* table: rendering the plan table (what ``plan`` prints);
* page: the page's SVG graph and both predicted schedules on 8 GPUs (what the UI tab computes);
* cli: the whole ``airflow gpu-dag plan DAG --file F [--output json]`` in-process, parse included;
* mapped: the page's two predicted schedules for a mapped task group of ``--mapped`` instances
  (``train[i]`` on 1 GPU, then ``score[i]`` in a 2-slot CPU pool) beside an 8-GPU task.

With ``--scale`` it times instead the whole ``airflow gpu-dag plan`` and ``airflow gpu-dag simulate``
(in-process, ``--declared-only``, an 8-GPU pool; stock and the reservation controller at every event, as
by default, and every 60 s) on the random DAGs of ``scale_dags.py`` with one mapped task of
``--scale-mapped`` instances, for each of ``--sizes`` (default 1,000-8,000 tasks and 5,000), CPU seconds
(wall in brackets) of one run each, and the exponent of a fit ``seconds = a * tasks ** b`` over the
sizes (``n log n`` gives 1.13 over 1,000-8,000). The DagBag parse is timed apart: every command pays it.

    .venv/bin/python benchmarks/plan_speed.py [--tasks 1000] [--repeat 3] [--mapped 1024]
    .venv/bin/python benchmarks/plan_speed.py --scale [--sizes 1000,2000,4000,5000,8000] [--scale-mapped 200]
"""

from __future__ import annotations

import argparse
import atexit
import io
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

if "AIRFLOW_HOME" not in os.environ:  # (imported by a test: no temporary folder made)
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="gpu-dag-bench-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# the DagBag parse of an 8,000-task file takes more than Airflow's 30-s import timeout on a loaded machine:
# the benchmark times the parse, it does not limit it
os.environ.setdefault("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "0")


def write_dag(folder: Path, tasks: int, seed: int = 7) -> str:
    """A layered random DAG file; returns its dag_id."""
    rng = random.Random(seed)
    lines = [
        "import pendulum",
        "from airflow.providers.standard.operators.empty import EmptyOperator",
        "from airflow.sdk import DAG",
        "from airflow_gpu_dag import gpu_hints",
        f"with DAG('bench_{tasks}', schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz='UTC')):",
        "    t = {}",
    ]
    previous: list[int] = []
    current: list[int] = []
    for i in range(tasks):
        gpus = rng.choice([1, 1, 2, 4])
        minutes = rng.randint(10, 120)
        lines.append(
            f"    t[{i}] = EmptyOperator(task_id='task_{i}', pool='gpu_default', pool_slots={gpus}, "
            f"executor_config=gpu_hints(duration='{minutes}m', gpus={gpus}))"
        )
        for up in rng.sample(previous, min(len(previous), rng.randint(1, 3))) if previous else []:
            lines.append(f"    t[{up}] >> t[{i}]")
        current.append(i)
        if len(current) >= rng.randint(5, 40):
            previous, current = current, []
    (folder / f"bench_{tasks}.py").write_text("\n".join(lines) + "\n")
    return f"bench_{tasks}"


def mapped_group(instances: int) -> Any:
    """A run of a mapped task group as the page sees it (instances expanded), beside a wide task."""
    from airflow_gpu_dag.core.model.graph import TaskGraph

    graph = TaskGraph(f"mapped_{instances}", priority_rule="critical_path")
    graph.add("prep", 60.0, pool="cpu")
    graph.add("wide", 600.0, gpus=8, pool="gpu_default")
    graph.add_edge("prep", "wide")
    for i in range(instances):
        graph.add(f"train[{i}]", 30.0 + i % 7, gpus=1, pool="gpu_default")
        graph.add(f"score[{i}]", 10.0 + i % 5, pool="cpu")
        graph.add_edge("prep", f"train[{i}]")
        graph.add_edge(f"train[{i}]", f"score[{i}]")
    return graph


def best(repeat: int, func: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def _clock(func: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call of ``func``."""
    cpu, wall = time.process_time(), time.perf_counter()
    func()
    return time.process_time() - cpu, time.perf_counter() - wall


_SCALE_COLUMNS = {
    "parse": "DagBag parse",
    "plan": "plan",
    "simulate": "simulate (every event)",
    "simulate60": "simulate --controller-interval 60",
}


def _cli(*argv: str) -> None:
    """``airflow gpu-dag ARGV`` in this process, its output dropped."""
    from airflow_gpu_dag.cli.definition import get_parser

    args = get_parser().parse_args(["gpu-dag", *argv])
    with redirect_stdout(io.StringIO()):
        args.func(args)


def _scale_row(folder: Path, tasks: int, mapped: int) -> dict[str, tuple[float, float]]:
    """The ``--scale`` figures of one DAG file written into ``folder``."""
    from scale_dags import dag_file

    from airflow_gpu_dag.cli.loading import find_dag

    folder.mkdir()
    dag_id = dag_file(folder, tasks, mapped)
    where = ["--file", str(folder), "--declared-only"]
    pool = ["--capacity", "gpu_default=8"]
    return {
        "parse": _clock(lambda: find_dag(dag_id, str(folder))),
        "plan": _clock(lambda: _cli("plan", dag_id, *where)),
        "simulate": _clock(lambda: _cli("simulate", dag_id, *where, *pool)),
        "simulate60": _clock(lambda: _cli("simulate", dag_id, *where, *pool, "--controller-interval", "60")),
    }


def scale(sizes: list[int], mapped: int) -> None:
    """``--scale``: the CLI's plan and simulate on random DAGs of ``sizes`` tasks with a mapped task."""
    from scale_dags import fitted_exponent, nlogn_exponent

    folder = Path(tempfile.mkdtemp(prefix="gpu-dag-bench-scale-"))
    atexit.register(shutil.rmtree, folder, True)
    print(f"# random DAGs + a mapped task of {mapped} instances, 8-GPU pool; CPU s (wall s), one run each")
    print(f"| tasks | {' | '.join(_SCALE_COLUMNS.values())} |")
    print("|---|" + "---|" * len(_SCALE_COLUMNS))
    rows = {}
    for tasks in sizes:
        rows[tasks] = row = _scale_row(folder / str(tasks), tasks, mapped)
        cells = " | ".join(f"{row[c][0]:.2f} ({row[c][1]:.2f})" for c in _SCALE_COLUMNS)
        print(f"| {tasks:,} | {cells} |", flush=True)
    fit = sorted(n for n in sizes if 1000 <= n <= 8000)
    if len(fit) > 1:
        exponents = ", ".join(
            f"{name} {fitted_exponent(fit, [rows[n][c][0] for n in fit]):.2f}"
            for c, name in _SCALE_COLUMNS.items()
        )
        print(f"fitted exponent b of CPU s = a * tasks ** b: {exponents}; n log n: {nlogn_exponent(fit):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mapped", type=int, default=1024, help="instances of the mapped task group")
    parser.add_argument(
        "--scale", action="store_true", help="time the CLI on random DAGs of 1,000-8,000 tasks"
    )
    parser.add_argument("--sizes", default="1000,2000,4000,5000,8000", help="--scale: task counts")
    parser.add_argument("--scale-mapped", type=int, default=200, help="--scale: instances of the mapped one")
    opts = parser.parse_args()
    if opts.scale:
        scale([int(n) for n in opts.sizes.split(",") if n.strip()], opts.scale_mapped)
        return

    from airflow_gpu_dag.airflow.dag_reader import build_task_graph, plan_dag
    from airflow_gpu_dag.cli.definition import get_parser
    from airflow_gpu_dag.cli.display import plan_table
    from airflow_gpu_dag.cli.loading import find_dag
    from airflow_gpu_dag.plugins.critical_path_page.data import pool_views, predicted_schedules
    from airflow_gpu_dag.plugins.critical_path_page.layout import graph_svg

    folder = Path(tempfile.mkdtemp(prefix="gpu-dag-bench-dags-"))
    atexit.register(shutil.rmtree, folder, True)
    dag_id = write_dag(folder, opts.tasks)
    dag = find_dag(dag_id, str(folder))
    plan = plan_dag(dag)
    graph, _ = build_task_graph(dag)
    pools = pool_views({"gpu_default": {"total": 8, "running": 0, "queued": 0, "open": 8}}, {}, ())

    def table() -> None:
        plan_table(plan).print(io.StringIO())

    def page() -> None:
        graph_svg(plan)
        predicted_schedules(graph, pools)

    def cli(*extra: str) -> None:
        args = get_parser().parse_args(["gpu-dag", "plan", dag_id, "--file", str(folder), *extra])
        with redirect_stdout(io.StringIO()):
            args.func(args)

    results = {
        "parse (Airflow DagBag)": best(opts.repeat, lambda: find_dag(dag_id, str(folder))),
        "plan (graph + CPM)": best(opts.repeat, lambda: plan_dag(dag)),
        "table (render)": best(opts.repeat, table),
        "page (SVG + 2 simulations)": best(opts.repeat, page),
        "cli plan, table (all)": best(opts.repeat, cli),
        "cli plan --output json (all)": best(opts.repeat, lambda: cli("-o", "json")),
    }
    mapped = mapped_group(opts.mapped)
    mapped_pools = pool_views(
        {
            "gpu_default": {"total": 8, "running": 0, "queued": 0, "open": 8},
            "cpu": {"total": 2, "running": 0, "queued": 0, "open": 2},
        },
        {},
        (),
    )
    results[f"page, mapped x{opts.mapped} (2 sims)"] = best(
        opts.repeat, lambda: predicted_schedules(mapped, mapped_pools)
    )
    print(f"{opts.tasks} tasks, {len(plan.edges)} edges, critical path of {len(plan.critical_path)} tasks")
    for name, seconds in results.items():
        print(f"  {name:32s} {seconds * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
