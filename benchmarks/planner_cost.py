"""Planning time of the ``packing`` rule, without and with the planner's local search, side by side.

For WfCommons instances of 41, 405, 738 and 1,121 tasks (``../shared/workloads``), plans the weights for
the reservation controller at ``--gpus`` GPUs with ``search_budget=0`` (the default) and with
``search_budget=SEARCH_BUDGET``, each from a cold planner cache, and prints the seconds and the predicted
makespans. (Stock Airflow plans nothing: its ``downstream`` rule costs are in ``priority_overhead.py``.)

With ``--learned`` it times instead what durations learned from past runs cost: the instance's durations
learned from five runs (declared estimates off by +/- 30 %, as in ``learned_estimates.py``), planned
unhedged (``estimate_error=0``), hedged over four worlds without the last choice on fresh worlds
(``final_worlds=0``), and as shipped.

With ``--scale`` it times the planner at the scale of a platform (issue #44): random DAGs of 1,000 to
8,000 tasks (``scale_dags.py``: 1-8 GPUs of one 8-GPU pool, 10 min-2 h, up to 2 of the 30 tasks before
each) planned for the reservation controller deciding at every event and every 60 s, ``predict`` (the
plan and the simulation ``airflow gpu-dag simulate`` shows, 60-s controller) and one simulation with
critical-path weights; CPU seconds of this process (wall seconds in brackets), best of ``--repeat``
rounds (each round times every size once, so a change of the machine's load falls on all sizes alike),
and the exponent of a fit ``seconds = a * tasks ** b`` per column (``n log n`` gives 1.13 over
1,000-8,000). ``--baseline REV`` times the same, for the sizes up to ``--baseline-max``, with the
package as git revision ``REV`` had it (exported to a temporary folder, run in a subprocess) and prints
the ratio new / old. ``--plot FILE`` also writes the curve as an SVG (log-log, with an ``n log n`` line).

    .venv/bin/python benchmarks/planner_cost.py [--gpus 16] [--learned]
    .venv/bin/python benchmarks/planner_cost.py --scale [--sizes 1000,2000,4000,8000] [--repeat 3] \
        [--plot curve.svg]
    .venv/bin/python benchmarks/planner_cost.py --scale --baseline 80e5799 --baseline-max 1000
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from learned_estimates import history_seed, learned_graph  # type: ignore[import-not-found]
from makespan import DEFAULT_WORKLOADS  # type: ignore[import-not-found]
from scale_dags import SIZES as SCALE_SIZES
from scale_dags import fitted_exponent, nlogn_exponent, random_graph
from workloads import GPU_POOL, Workload, load_workloads

from airflow_gpu_dag.core.planning import planner as priority
from airflow_gpu_dag.core.planning.hedging import perturbed

SIZES = (41, 405, 738, 1121)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=16, help="GPU pool capacity")
    parser.add_argument("--learned", action="store_true", help="time the hedging of learned durations")
    parser.add_argument("--scale", action="store_true", help="time random DAGs of 1,000-8,000 tasks")
    parser.add_argument("--sizes", default=",".join(map(str, SCALE_SIZES)), help="--scale: task counts")
    parser.add_argument("--repeat", type=int, default=3, help="--scale: best of this many rounds")
    parser.add_argument("--baseline", default="", help="--scale: also time git revision REV (before/after)")
    parser.add_argument("--baseline-max", type=int, default=1000, help="--baseline: up to this many tasks")
    parser.add_argument("--json", action="store_true", help="--scale: print the figures as JSON")
    parser.add_argument("--plot", default="", help="--scale: also write the curve as an SVG to this file")
    args = parser.parse_args(argv)
    if args.scale:
        sizes = [int(n) for n in args.sizes.split(",") if n.strip()]
        return scale(sizes, args.repeat, args.baseline, args.baseline_max, args.json, args.plot)
    workloads = load_workloads(DEFAULT_WORKLOADS)
    if args.learned:
        return learned_cost(workloads, args.gpus)
    print("| instance | tasks | steps 1-4 (s) | with the local search (s) | makespan without / with |")
    print("|---|---|---|---|---|")
    for size in SIZES:
        workload = next((w for w in workloads if len(w.graph) == size), None)
        if workload is None:
            continue
        seconds, makespans = [], []
        for budget in (0, priority.SEARCH_BUDGET):
            priority._STAGE_CACHE.clear()  # cold: steps 1-2 are cached per graph object
            started = time.perf_counter()
            plan = priority.packing_weights_plan(
                workload.graph, {GPU_POOL: args.gpus}, "reservation", search_budget=budget
            )
            seconds.append(time.perf_counter() - started)
            makespans.append(plan.makespan)
        print(
            f"| {workload.name.rsplit('/', 1)[-1]} | {size} | {seconds[0]:.2f} | {seconds[1]:.2f} "
            f"| {makespans[0]:.1f} / {makespans[1]:.1f} |"
        )
    return 0


def learned_cost(workloads: Sequence[Workload], gpus: int) -> int:
    """Seconds to plan learned durations: unhedged, hedged without the last choice, shipped."""
    variants: tuple[tuple[str, dict[str, Any]], ...] = (
        ("unhedged", {"estimate_error": 0.0}),
        ("hedged, no last choice", {"final_worlds": 0}),
        ("shipped", {}),
    )
    print(f"| instance | tasks | {' | '.join(f'{name} (s)' for name, _ in variants)} |")
    print("|---|---|" + "---|" * len(variants))
    for size in SIZES:
        workload = next((w for w in workloads if len(w.graph) == size), None)
        if workload is None:
            continue
        declared = perturbed(workload.graph, 0.3, f"declared:{workload.name}")
        learned = learned_graph(workload.graph, declared, 5, 0.1, history_seed(workload.name))
        seconds = []
        for _name, options in variants:
            priority._STAGE_CACHE.clear()  # cold: steps 1-2 are cached per graph object
            started = time.perf_counter()
            priority.packing_weights_plan(learned, {GPU_POOL: gpus}, "reservation", **options)
            seconds.append(time.perf_counter() - started)
        cells = " | ".join(f"{s:.2f}" for s in seconds)
        print(f"| {workload.name.rsplit('/', 1)[-1]} | {size} | {cells} |", flush=True)
    return 0


#: The columns of ``--scale``: what is timed, on a random DAG of ``tasks`` tasks.
SCALE_COLUMNS = {
    "plan0": "plan, every event",
    "plan60": "plan, 60-s controller",
    "predict60": "predict, 60-s",
    "sim60": "simulate (critical path, 60-s)",
}


Row = dict[str, tuple[float, float]]  # column -> (CPU s, wall s)


def _timed(func: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``func``."""
    cpu, wall = time.process_time(), time.perf_counter()
    func()
    return time.process_time() - cpu, time.perf_counter() - wall


def scale_jobs(tasks: int) -> dict[str, Callable[[], object]]:
    """What ``--scale`` times on a random DAG of ``tasks`` tasks, per column (only the package's public
    functions: the same code times a baseline revision)."""
    from airflow_gpu_dag.core.planning import planner
    from airflow_gpu_dag.core.simulation.simulator import simulate

    graph = random_graph(tasks)
    caps = {GPU_POOL: 8}

    def plan(interval: float) -> None:
        planner._STAGE_CACHE.clear()  # cold: steps 1-2 are cached per graph object
        planner.packing_weights_plan(graph, caps, "reservation", controller_interval=interval)

    def predict() -> None:
        planner._STAGE_CACHE.clear()
        planner.predict(graph, caps, "reservation", 60.0, priority="packing")

    return {
        "plan0": lambda: plan(0.0),
        "plan60": lambda: plan(60.0),
        "predict60": predict,
        "sim60": lambda: simulate(graph, caps, "reservation", 60.0, priority="critical_path"),
    }


def scale_rows(sizes: Sequence[int], repeat: int) -> dict[int, Row]:
    """Per size and column, the run that took the least CPU of ``repeat`` rounds. A round times every
    size and column once, so a change in the machine's load during the benchmark falls on every size
    alike instead of on the sizes timed while it lasted (which would bend the fitted exponents)."""
    jobs = {tasks: scale_jobs(tasks) for tasks in sizes}
    rows: dict[int, Row] = {tasks: {} for tasks in sizes}
    for round_ in range(max(1, repeat)):
        for tasks in sizes:
            for column, func in jobs[tasks].items():
                timed = _timed(func)
                rows[tasks][column] = min(rows[tasks].get(column, timed), timed)
            print(f"round {round_ + 1}/{repeat}: {tasks:,} tasks timed", file=sys.stderr, flush=True)
    return rows


#: Line colours of :func:`curve_svg`, per column.
CURVE_COLOURS = {"plan0": "#1f77b4", "plan60": "#d62728", "predict60": "#2ca02c", "sim60": "#7f7f7f"}


def curve_svg(sizes: Sequence[int], seconds: dict[str, list[float]], title: str = "") -> str:
    """An SVG of ``--scale``'s figures: CPU seconds (y) against tasks (x), both logarithmic, a line per
    column with its fitted exponent, and a dashed ``n log n`` line through the first point of the
    60-s plan: a column whose line is no steeper grows no faster than ``n log n``. Written by hand
    (matplotlib is not a dependency of the project)."""
    width, height, left, right, top, bottom = 640, 420, 70, 250, 40, 60
    values = [v for column in seconds.values() for v in column if v > 0]
    reference = [seconds["plan60"][0] * n * math.log(n) / (sizes[0] * math.log(sizes[0])) for n in sizes]
    values += reference
    x0, x1 = math.log10(min(sizes)) - 0.05, math.log10(max(sizes)) + 0.05
    y0, y1 = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))

    def sx(n: float) -> float:
        return left + (math.log10(n) - x0) / (x1 - x0) * (width - left - right)

    def sy(v: float) -> float:
        return top + (y1 - math.log10(v)) / (y1 - y0) * (height - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="100%" height="100%" fill="white"/><text x="10" y="18" font-size="13">{title}</text>',
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
        'fill="none" stroke="#444"/>',
    ]
    for n in sizes:
        out.append(f'<text x="{sx(n):.1f}" y="{height - bottom + 16}" text-anchor="middle">{n:,}</text>')
    for power in range(y0, y1 + 1):
        y = sy(10.0**power)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10.0**power:g} s</text>')
    out.append(
        f'<text x="{(left + width - right) / 2:.1f}" y="{height - 20}" text-anchor="middle">tasks</text>'
    )

    def line(points: list[float], colour: str, dashed: bool = False) -> str:
        path = " ".join(f"{sx(n):.1f},{sy(v):.1f}" for n, v in zip(sizes, points, strict=True) if v > 0)
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        return f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>'

    rows = [(f"n log n (dashed): exponent {nlogn_exponent(sizes):.2f}", "#000")]
    out.append(line(reference, "#000", dashed=True))
    for column, points in seconds.items():
        colour = CURVE_COLOURS.get(column, "#9467bd")
        out.append(line(points, colour))
        for n, v in zip(sizes, points, strict=True):
            if v > 0:  # (as the lines: a time too short to measure has no place on a log axis)
                out.append(f'<circle cx="{sx(n):.1f}" cy="{sy(v):.1f}" r="3" fill="{colour}"/>')
        rows.append((f"{SCALE_COLUMNS[column]}: exponent {fitted_exponent(sizes, points):.2f}", colour))
    for k, (text, colour) in enumerate(rows):
        out.append(f'<text x="{width - right + 10}" y="{top + 14 + 28 * k}" fill="{colour}">')
        words = text.split(": ")
        out.append(f'<tspan x="{width - right + 10}">{words[0]}</tspan>')
        out.append(f'<tspan x="{width - right + 10}" dy="13">{": ".join(words[1:])}</tspan></text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def baseline_rows(revision: str, sizes: Sequence[int], repeat: int) -> dict[int, Row]:
    """The ``--scale`` figures with the package of git ``revision``: exported next to nothing else, put
    first on ``PYTHONPATH`` of a subprocess that runs this script (``--scale --json``)."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "archive", revision, "airflow_gpu_dag"], cwd=root, capture_output=True)
    if archive.returncode:
        raise SystemExit(f"error: --baseline {revision}: {archive.stderr.decode().strip()}")
    with tempfile.TemporaryDirectory(prefix="planner-cost-baseline-") as folder:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(folder, filter="data")
        command = [sys.executable, __file__, "--scale", "--json", "--repeat", str(repeat)]
        command += ["--sizes", ",".join(map(str, sizes))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"error: the baseline run failed:\n{done.stderr[-2000:]}")
    figures = json.loads(done.stdout)
    return {int(k): {c: (v[0], v[1]) for c, v in row.items()} for k, row in figures.items()}


def _rounds(repeat: int) -> str:
    return f"{repeat} round" if repeat == 1 else f"{repeat} rounds"


def scale(
    sizes: Sequence[int], repeat: int, baseline: str, baseline_max: int, as_json: bool, plot: str = ""
) -> int:
    """``--scale``: the table, the fitted exponents and, with a baseline, the ratios new / old; with
    ``plot``, the curve as an SVG file."""
    rows = scale_rows(sizes, repeat)
    if plot:
        title = f"CPU seconds against tasks (log-log), best of {_rounds(repeat)}"
        Path(plot).write_text(
            curve_svg(sizes, {c: [rows[n][c][0] for n in sizes] for c in SCALE_COLUMNS}, title)
        )
    if as_json:
        print(json.dumps(rows))
        return 0
    print(f"# random DAGs on one 8-GPU pool; CPU s (wall s), best of {_rounds(repeat)} over every size")
    print(f"| tasks | {' | '.join(SCALE_COLUMNS.values())} | 60 s / every event |")
    print("|---|" + "---|" * (len(SCALE_COLUMNS) + 1))
    for tasks in sizes:
        row = rows[tasks]
        cells = " | ".join(f"{row[c][0]:.2f} ({row[c][1]:.2f})" for c in SCALE_COLUMNS)
        print(f"| {tasks:,} | {cells} | {row['plan60'][0] / row['plan0'][0]:.2f} |", flush=True)
    if len(sizes) > 1:
        fits = ", ".join(
            f"{name} {fitted_exponent(sizes, [rows[n][c][0] for n in sizes]):.2f}"
            for c, name in SCALE_COLUMNS.items()
        )
        print(f"fitted exponent b of CPU s = a * tasks ** b: {fits} (n log n: {nlogn_exponent(sizes):.2f})")
    if baseline:
        old_sizes = [n for n in sizes if n <= baseline_max]
        old = baseline_rows(baseline, old_sizes, 1)
        print(f"\n# before ({baseline}) / after, CPU s")
        print(f"| tasks | {' | '.join(SCALE_COLUMNS.values())} |")
        print("|---|" + "---|" * len(SCALE_COLUMNS))
        for tasks in old_sizes:
            before, after = old[tasks], rows[tasks]
            cells = " | ".join(
                f"{before[c][0]:.2f} / {after[c][0]:.2f} = {before[c][0] / after[c][0]:.1f}x"
                for c in SCALE_COLUMNS
            )
            print(f"| {tasks:,} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
