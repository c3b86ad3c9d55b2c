"""Tests of ``airflow_gpu_dag.plugins.critical_path_page.layout``."""

from __future__ import annotations

import re

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.plan import build_plan
from airflow_gpu_dag.plugins.critical_path_page.layout import NODE_HEIGHT, graph_svg, layout
from tests.unit.plugins.critical_path_page.conftest import page_graph


def _wide(n: int = 1000) -> TaskGraph:
    """``n`` tasks: a chain spine with fan-out/fan-in branches (layers of 10)."""
    graph = TaskGraph("wide")
    for i in range(n):
        graph.add(f"t{i}", 60 + (i % 7) * 30, gpus=1 + i % 2, pool="gpu_default")
    for i in range(10, n):
        graph.add_edge(f"t{i - 10}", f"t{i}")
        if i % 10 == 0:
            graph.add_edge(f"t{i - 9}", f"t{i}")
    return graph


def test_layout_puts_layers_in_columns_and_critical_first() -> None:
    boxes = layout(build_plan(page_graph()))
    assert boxes["load"].column == 0
    assert boxes["train"].column == boxes["stats"].column == 1
    assert boxes["eval"].column == 2
    assert boxes["train"].row == 0 and boxes["stats"].row == 1  # critical on top
    assert boxes["stats"].y > boxes["train"].y + NODE_HEIGHT - 1


def test_graph_svg_marks_critical_nodes_edges_and_slack() -> None:
    svg = graph_svg(build_plan(page_graph()))
    critical = set(re.findall(r'class="node critical" id="node-([^"]+)"', svg))
    assert critical == {"load", "train", "eval"}
    assert 'data-task-id="stats" data-slack="6000" data-critical="false"' in svg
    assert "slack 1h40m" in svg and "slack 0s" in svg
    edges = set(re.findall(r'class="edge critical" data-from="([^"]+)" data-to="([^"]+)"', svg))
    assert edges == {("load", "train"), ("train", "eval")}
    assert svg.count('class="edge') == 4


def test_graph_svg_escapes_ids() -> None:
    graph = TaskGraph("esc")
    graph.add("a<b>&c", 60)
    svg = graph_svg(build_plan(graph))
    assert "a&lt;b&gt;&amp;c" in svg and "a<b>" not in svg


def test_thousand_task_dag_renders() -> None:
    plan = build_plan(_wide())
    svg = graph_svg(plan)
    assert svg.count('class="node') == 1000
    boxes = layout(plan)
    assert len({(b.x, b.y) for b in boxes.values()}) == 1000  # no two nodes on top of each other


def test_graph_labels_of_ids_sharing_a_long_prefix_stay_apart() -> None:
    # Labels were cut at the end: every task of a task group with a long prefix, and every instance of
    # a long mapped task, read the same ("training_group.fine_tu…").
    graph = TaskGraph("groups")
    ids = ["training_group.fine_tune_model_a", "training_group.fine_tune_model_b"]
    ids += [f"tokenize_and_preprocess[{i}]" for i in range(3)]
    for task_id in ids:
        graph.add(task_id, 60)
    svg = graph_svg(build_plan(graph))
    names = re.findall(r'<text x="6" y="14" class="name">([^<]*)</text>', svg)
    assert len(names) == len(ids) == len(set(names))
    assert all(len(name) <= 24 for name in names)
    assert "tokenize_an\u2026reprocess[2]" in names
    short = TaskGraph("short")
    short.add("load", 60)
    assert '<text x="6" y="14" class="name">load</text>' in graph_svg(build_plan(short))
