"""Shared graphs, pools and app set-ups of the critical-path page tests."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_gpu_dag.airflow.history import LearnedGraph
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, with_estimates
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.plan import build_plan
from airflow_gpu_dag.plugins.critical_path_page.data import pool_views


def gpu_pools(gpus: int = 4) -> Any:
    """The page's views of an idle ``gpu_default`` of ``gpus`` slots and Airflow's ``default_pool``."""
    return pool_views(
        {
            "gpu_default": {"total": gpus, "running": 0, "queued": 0, "open": gpus},
            "default_pool": {"total": 128, "running": 0, "queued": 0, "open": 128},
        },
        {},
        {"gpu_default", "default_pool"},
    )


def pipe_graph(rule: str | None = None) -> TaskGraph:
    """DAG ``pipe``: ``load`` (10 min) then ``train`` (1 h on 2 GPUs of ``gpu_default``), under ``rule``."""
    graph = TaskGraph("pipe", priority_rule=rule)
    graph.add("load", 600)
    graph.add("train", 3600, gpus=2, pool="gpu_default")
    graph.add_edge("load", "train")
    return graph


def page_graph() -> TaskGraph:
    """DAG ``page``: ``load`` feeding a 4-GPU ``train`` and a CPU ``stats``, both feeding a 1-GPU
    ``eval``."""
    graph = TaskGraph("page")
    graph.add("load", 600)
    graph.add("train", 7200, gpus=4, pool="gpu_default", pool_slots=4)
    graph.add("stats", 1200)
    graph.add("eval", 1800, gpus=1, pool="gpu_default")
    for up, down in (("load", "train"), ("load", "stats"), ("train", "eval"), ("stats", "eval")):
        graph.add_edge(up, down)
    return graph


def app_endpoint(path: str) -> Any:
    """The endpoint function of the page app's route ``path``."""
    from airflow_gpu_dag.plugins.critical_path_page.app import create_app

    (route,) = [r for r in create_app().routes if getattr(r, "path", None) == path]
    return route.endpoint  # type: ignore[attr-defined]


def serve_learned(monkeypatch: pytest.MonkeyPatch, learned: LearnedGraph) -> None:
    """The app's endpoints on ``learned`` (as read from the metadata DB) and :func:`gpu_pools`."""
    from airflow_gpu_dag.plugins.critical_path_page import app

    plan = build_plan(learned.graph, learned.findings)
    monkeypatch.setattr(app, "_load", lambda dag_id, session: (learned.graph, plan, learned))
    monkeypatch.setattr(app, "_may_read_pools", lambda user: True)
    monkeypatch.setattr(app, "_pools", lambda session, dag_pools, user: gpu_pools())
    monkeypatch.setattr(app, "_flag_factor", lambda: 1.5)


def learned_marker_graph() -> LearnedGraph:
    """:func:`pipe_graph` plus ``done``, which declares 0 (a marker task) but whose past runs took 5 s;
    ``train`` learned 2h; ``fit[0]`` and ``fit[1]`` are instances of the mapped task ``fit``."""
    declared = pipe_graph()
    declared.add("done", 0)
    declared.add_edge("train", "done")
    declared.add("fit[0]", 300, attrs={"map_of": "fit", "map_index": 0})
    declared.add("fit[1]", 300, attrs={"map_of": "fit", "map_index": 1})
    estimates = {
        "done": DurationEstimate("done", 0.0, 0.0, learned=5.0, runs=5),
        "train": DurationEstimate("train", 3600.0, 3600.0, learned=7200.0, runs=5),
    }
    return LearnedGraph(with_estimates(declared, estimates), declared, estimates)
