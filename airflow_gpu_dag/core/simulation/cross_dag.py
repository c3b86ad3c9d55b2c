"""Many DAG runs on shared pools: what stock Airflow does and what the cross-DAG policy does.

One place for the prediction that ``airflow gpu-dag simulate`` (several DAGs), the critical-path page
and ``benchmarks/multi_dag.py`` show: every run triggered at its time, weights computed per run as the
scheduler computes them (stock: Airflow's ``downstream`` rule; ours: the keys of
:mod:`airflow_gpu_dag.core.policy.objective` with each DAG's remaining times — critical path, or the packing
plan), the controller every ``interval`` seconds with the objective's reservation gate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from airflow_gpu_dag.core.analysis.weight_rules import downstream_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.policy.objective import (
    Objective,
    ReservationGate,
    RunShape,
    key_weight,
    run_shape,
    task_keys,
)
from airflow_gpu_dag.core.simulation.simulator import RunPriority, SimulationResult, simulate

__all__ = ["SIMULATION_EPOCH", "believed_durations", "cross_dag_priority", "predict_runs"]

#: The simulator's clock starts at 0; keys are counted from this epoch so every weight stays a key.
SIMULATION_EPOCH = -10_000_000.0


def believed_durations(graphs: Sequence[TaskGraph]) -> dict[str, float]:
    """The durations the controller believes, keyed as
    :func:`~airflow_gpu_dag.core.simulation.simulator.simulate`
    names the tasks: ``<run index>:<dag id>/<task id>`` for several runs, the task id for one."""
    if len(graphs) == 1:
        return {task_id: node.duration for task_id, node in graphs[0].nodes.items()}
    return {f"{i}:{g.dag_id}/{t}": node.duration for i, g in enumerate(graphs) for t, node in g.nodes.items()}


def cross_dag_priority(
    estimated: Mapping[str, TaskGraph] | Callable[[TaskGraph, float], TaskGraph],
    capacity: Mapping[str, int],
    objective: Objective,
    epoch: float = SIMULATION_EPOCH,
    remaining: Mapping[str, Mapping[str, float]] | None = None,
) -> RunPriority:
    """``(graph, trigger) -> weights`` of the cross-DAG keys, each believed graph's shape computed once:
    ``estimated`` by DAG id (a run of a DAG not in it: its own graph), or ``(graph, trigger) -> believed
    graph`` per run (two runs of one DAG under two versions each keep their own); ``remaining`` per DAG
    id replaces the critical path (a plan)."""
    shapes: dict[TaskGraph, RunShape] = {}  # by believed graph (graphs hash by identity)

    def believed(graph: TaskGraph, trigger: float) -> TaskGraph:
        if callable(estimated):
            return estimated(graph, trigger)
        return estimated.get(graph.dag_id, graph)

    def weights(graph: TaskGraph, trigger: float) -> dict[str, int]:
        source = believed(graph, trigger)
        if source not in shapes:
            shapes[source] = run_shape(source, capacity, (remaining or {}).get(graph.dag_id))
        return {
            task_id: key_weight(key, epoch)
            for task_id, key in task_keys(shapes[source], trigger, objective).items()
        }

    weights.__name__ = f"cross-DAG {objective.name}"
    return weights


def predict_runs(
    graphs: Sequence[TaskGraph],
    triggers: Sequence[float],
    capacity: Mapping[str, int],
    objective: Objective | None,
    interval: float = 60.0,
    estimated: Sequence[TaskGraph] | None = None,
    remaining: Mapping[str, Mapping[str, float]] | None = None,
    gate: ReservationGate | bool | None = True,
) -> SimulationResult:
    """Simulate one run per graph at its trigger time.

    ``objective`` None: stock Airflow (``downstream`` weights, pools at capacity). Otherwise the
    cross-DAG keys and the watermark controller every ``interval`` seconds, with the objective's
    reservation gate (``gate=True``), an explicit gate, or none (``False``/None: reserve for every
    wide head). ``estimated`` are the graphs as declared (what weights and the controller see), when
    the ``graphs`` run for other durations (a benchmark's estimate errors).
    """
    believed_graphs = list(estimated) if estimated is not None else list(graphs)
    if len(believed_graphs) != len(graphs) or len(triggers) != len(graphs):
        raise ValueError(
            f"{len(graphs)} graphs, {len(triggers)} trigger times and {len(believed_graphs)} estimated "
            "graphs: give one trigger time and one estimated graph per run"
        )
    # per run, not per DAG id: two runs of one DAG may have been created under two versions (the
    # simulator hands each run's graph, its ladders fitted: a copy, so found by DAG id and trigger)
    runs = list(zip(graphs, triggers, believed_graphs, strict=True))
    by_run = {(g.dag_id, float(t)): b for g, t, b in reversed(runs)}  # the first of equal runs

    def believed(graph: TaskGraph, trigger: float) -> TaskGraph:
        return by_run.get((graph.dag_id, float(trigger)), graph)

    estimates = believed_durations(believed_graphs)
    if objective is None:
        return simulate(
            list(graphs),
            capacity,
            "stock",
            triggers=triggers,
            estimates=estimates,
            run_priority=lambda g, t: downstream_weights(believed(g, t)),
        )
    chosen_gate = ReservationGate.for_objective(objective, SIMULATION_EPOCH) if gate is True else gate or None
    return simulate(
        list(graphs),
        capacity,
        "reservation",
        interval,
        triggers=triggers,
        estimates=estimates,
        run_priority=cross_dag_priority(believed, capacity, objective, SIMULATION_EPOCH, remaining),
        gate=chosen_gate,
    )
