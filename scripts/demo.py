"""The end-to-end demo: ``./scripts/demo.sh`` (or ``python scripts/demo.py``).

1. Boots a real Airflow 3 (api-server, scheduler, dag-processor; SQLite + LocalExecutor) in a
   temporary ``AIRFLOW_HOME`` with :class:`~airflow_gpu_dag.testing.AirflowCluster`, parsing the
   repository's ``dags/`` folder.
2. Creates the GPU pools from a static GPU inventory (default ``4xa100:80GiB``: pool
   ``gpu_default`` with 4 slots, plus ``gpu_a100``). A pool slot is one GPU.
3. Prints the plan of the example DAG, computed from the parsed DAG: per task ES/EF/LS/LF, slack,
   critical-path priority (remaining seconds), its key (seconds after the trigger) and GPUs, and the
   critical path.
4. Triggers a run, waits for it, and prints per task its state, start, end and the key its priority
   weight encodes (the plan's unit), and the order in which the tasks actually started.

Exit status: 0 when the run succeeded, 1 when it failed, 2 when Airflow could not be booted or the
run did not finish in time. Options: ``--help``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_gpu_dag.core.policy.objective import DEFAULT_OBJECTIVE
from airflow_gpu_dag.testing.cluster import AirflowCluster, ClusterError

__all__ = ["DEMO_DAG_ID", "DEMO_INVENTORY", "demo_pools", "main", "render_outcome", "render_plan"]

DEMO_DAG_ID = "example_critical_path"
#: The static GPU inventory of the demo (no real GPUs needed): 4 A100s of 80 GiB.
DEMO_INVENTORY = "4xa100:80GiB"
#: Used if the inventory module is not available: one pool, ``gpu_default``, of 4 GPUs.
FALLBACK_POOLS = {"gpu_default": 4}
DEFAULT_DAGS_FOLDER = Path(__file__).resolve().parent.parent / "dags"


def demo_pools(inventory: str = DEMO_INVENTORY) -> dict[str, int]:
    """GPU pool sizes for a static inventory (``gpu_default`` = all GPUs, ``gpu_<type>`` per type)."""
    try:
        from airflow_gpu_dag.gpu.inventory import parse_inventory
    except ImportError:
        return dict(FALLBACK_POOLS)
    return dict(parse_inventory(inventory).pool_sizes())


def _hm(seconds: float) -> str:
    """``5400`` -> ``1:30`` (hours:minutes)."""
    minutes = int(round(seconds / 60.0))
    return f"{minutes // 60}:{minutes % 60:02d}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_due(dag: Any) -> float:
    """Seconds from a run's trigger to its due time, as the scheduler's weight rule computes it:
    ``min(stretch x W, W + overdue)`` (W: the run's GPU work over the ``[gpu_dag] pools`` capacity)."""
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core.policy.objective import run_shape
    from airflow_gpu_dag.priority.weights import WeightSettings

    current = WeightSettings.read()
    graph, _ = build_task_graph(dag)
    return current.objective.due_offset(run_shape(graph, current.capacity).work)


def key_terms(dag: Any) -> tuple[str, dict[str, float]]:
    """The objective's key as words (``due - c x priority``, and ``- U x min(descendant lead, K)`` for
    ``fair``) and per task ``c x priority + U x min(lead, K)``: how far before the due time its key
    lies (docs/priority.md)."""
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core.model.resources import format_duration
    from airflow_gpu_dag.core.policy.objective import run_shape
    from airflow_gpu_dag.priority.weights import WeightSettings  # start-up: Airflow loads on first use

    objective = WeightSettings.read().objective
    graph, _ = build_task_graph(dag)
    shape = run_shape(graph, {})
    words = f"due - {objective.chain:g} x priority"
    if objective.head_start > 0:
        unit = format_duration(objective.descendant_unit)
        words += f" - {unit} x min(descendant lead, {objective.descendant_cap})"
    lead = shape.descendant_lead
    ahead = {t: objective.key(0.0, 0.0, rest, lead[t]) for t, rest in shape.remaining.items()}
    return words, {t: -k for t, k in ahead.items()}


def render_plan(dag: Any) -> str:
    """The plan of ``dag`` (an Airflow DAG) as text: one row per task in topological order.

    Each task's ``key`` is in the unit of the outcome's ``key`` column (seconds after the run's
    trigger): ``due - priority``, so the two tables can be compared line by line."""
    from airflow_gpu_dag.airflow.dag_reader import plan_dag

    plan = plan_dag(dag)
    due, (words, ahead) = run_due(dag), key_terms(dag)
    rows = [
        [
            t.task_id,
            _hm(t.duration),
            _hm(t.earliest_start),
            _hm(t.earliest_finish),
            _hm(t.latest_start),
            _hm(t.latest_finish),
            _hm(t.slack),
            t.priority,
            f"{due - ahead[t.task_id]:+.0f}s",
            t.gpus or "-",
            t.pool or "-",
            "*" if t.critical else "",
        ]
        for t in plan.tasks
    ]
    out = [
        f"Plan of {plan.dag_id} (times h:mm from the start of the run; priority = remaining "
        f"critical-path seconds; key = {words}, seconds after the trigger, "
        f"due = {due:+.0f}s)",
        _table(
            ["task", "dur", "ES", "EF", "LS", "LF", "slack", "priority", "key", "GPUs", "pool", "crit"], rows
        ),
        f"critical path: {' -> '.join(plan.critical_path)}",
        f"makespan with unlimited GPUs: {_hm(plan.makespan)}",
    ]
    out.extend(f"finding: {f}" for f in plan.findings)
    return "\n".join(out)


def _parse_ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def render_outcome(tis: Sequence[dict[str, Any]]) -> str:
    """Task instances of a run (REST dicts) as text: a table in start order, then that order."""

    def key(ti: dict[str, Any]) -> tuple[int, datetime | str]:
        start = _parse_ts(ti.get("start_date"))
        return (0, start) if start is not None else (1, str(ti["task_id"]))

    ordered = sorted(tis, key=key)
    starts = [s for s in (_parse_ts(ti.get("start_date")) for ti in ordered) if s is not None]
    origin = min(starts) if starts else None

    def offset(value: str | None) -> str:
        ts = _parse_ts(value)
        if ts is None or origin is None:
            return "-"
        return f"+{(ts - origin).total_seconds():.1f}s"

    from airflow_gpu_dag.core.policy.objective import key_of_weight
    from airflow_gpu_dag.priority.trigger import parse_run_id_time

    def key_text(ti: dict[str, Any]) -> str:
        """The cross-DAG key a weight encodes, in seconds after the run's trigger."""
        weight = ti.get("priority_weight")
        key = key_of_weight(int(weight)) if isinstance(weight, int) else None
        trigger = parse_run_id_time(str(ti.get("run_id") or ti.get("dag_run_id") or ""))
        if key is None or trigger is None:
            return str(weight)
        return f"{key - trigger:+.0f}s"

    rows = []
    for ti in ordered:
        name = ti["task_id"] if ti.get("map_index", -1) == -1 else f"{ti['task_id']}[{ti['map_index']}]"
        rows.append(
            [
                name,
                ti.get("state") or "none",
                (ti.get("start_date") or "-")[:23],
                offset(ti.get("start_date")),
                offset(ti.get("end_date")),
                key_text(ti),
                ti.get("pool"),
                ti.get("pool_slots"),
            ]
        )
    started = [str(r[0]) for r, ti in zip(rows, ordered, strict=True) if ti.get("start_date")]
    return "\n".join(
        [
            _table(["task", "state", "start (UTC)", "start", "end", "key", "pool", "slots"], rows),
            f"started in this order: {' -> '.join(started) or '(none)'}",
            "key: the task's cross-DAG key, seconds after the trigger, as in the plan (its run's due "
            "time, moved earlier by its remaining critical path and its descendant lead; its "
            "priority_weight encodes it, and the earliest key starts first, across all DAGs)",
        ]
    )


def load_dag(dags_folder: Path, dag_id: str) -> Any:
    """Import the DAG files of ``dags_folder`` and return the DAG ``dag_id``.

    ``<dag_id>.py`` is tried first; the other files only when it does not define the DAG. A file
    that fails to import is skipped (and named in the error if the DAG is not found).

    :raises LookupError: no file defines it (the message lists the DAGs found and the import errors).
    """
    from airflow.sdk import DAG

    found: dict[str, Any] = {}
    errors: dict[str, str] = {}
    files = sorted(dags_folder.glob("*.py"), key=lambda p: (p.stem != dag_id, p.name))
    for path in files:
        spec = importlib.util.spec_from_file_location(f"_gpu_dag_demo_{path.stem}", path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as err:  # another DAG file's problem must not stop the demo
            errors[path.name] = f"{type(err).__name__}: {err}"
            continue
        for value in vars(module).values():
            if isinstance(value, DAG):
                found[value.dag_id] = value
        if dag_id in found:
            return found[dag_id]
    problems = "".join(f"\n  {name}: {error}" for name, error in errors.items())
    raise LookupError(
        f"no DAG {dag_id!r} in {dags_folder} (found: {sorted(found) or 'none'}); "
        f"pass --dags-folder/--dag-id{problems}"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python scripts/demo.py",
        description="Boot Airflow, show the critical-path plan of the example DAG, run it, show the outcome.",
    )
    parser.add_argument("--dags-folder", type=Path, default=DEFAULT_DAGS_FOLDER, help="default: %(default)s")
    parser.add_argument("--dag-id", default=DEMO_DAG_ID, help="default: %(default)s")
    parser.add_argument(
        "--inventory",
        default=DEMO_INVENTORY,
        help='static GPU inventory the pools are sized from, e.g. "4xa100:80GiB" (default: %(default)s)',
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the run")
    parser.add_argument(
        "--keep-home", action="store_true", help="keep the temporary AIRFLOW_HOME (logs) after the demo"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the exit status."""
    args = _parser().parse_args(argv)
    dags_folder = args.dags_folder.resolve()
    pools = demo_pools(args.inventory)
    gpu_pools = {name: slots for name, slots in pools.items() if name.startswith("gpu_")}
    env = {
        "AIRFLOW__GPU_DAG__INVENTORY_SOURCE": "static",
        "AIRFLOW__GPU_DAG__INVENTORY": args.inventory,
        "AIRFLOW__GPU_DAG__POOLS": json.dumps(gpu_pools),
        # named, not left to the configuration: this process may have read a developer's airflow.cfg
        # (one an earlier version wrote says "objective = balanced") before the cluster's home existed,
        # and the plan printed here must be the one the cluster's scheduler runs
        "AIRFLOW__GPU_DAG__OBJECTIVE": DEFAULT_OBJECTIVE,
    }
    print(f"== booting Airflow (dags: {dags_folder}; GPU pools from inventory {args.inventory}: {pools})")
    try:
        with AirflowCluster(dags_folder, pools=pools, env=env, keep_home=args.keep_home or None) as cluster:
            print(f"   api-server {cluster.api_url} (user {cluster.USERNAME}), home {cluster.home}")
            # Read DAGs here with the cluster's settings ([gpu_dag] ...), like the dag-processor does.
            os.environ.update({k: v for k, v in cluster.env.items() if k.startswith("AIRFLOW")})
            dag = load_dag(dags_folder, args.dag_id)
            print("\n== plan")
            print(render_plan(dag))
            cluster.wait_for_dag(args.dag_id)
            run_id = cluster.trigger(args.dag_id)
            print(f"\n== triggered {args.dag_id} run {run_id}; waiting (timeout {args.timeout:.0f}s)")
            state = cluster.wait_for_run(args.dag_id, run_id, timeout=args.timeout)
            tis = cluster.task_instances(args.dag_id, run_id)
            print(f"\n== outcome: run {state}")
            print(render_outcome(tis))
            for ti in tis:
                if ti.get("state") in ("failed", "upstream_failed") and ti.get("try_number"):
                    print(f"\n-- log of failed task {ti['task_id']}:")
                    print(cluster.task_log(args.dag_id, run_id, ti["task_id"], ti["try_number"])[-3000:])
            return 0 if state == "success" else 1
    except (ClusterError, LookupError) as err:
        print(f"demo failed: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
