"""Tests of ``airflow_gpu_dag.plugins.critical_path_page.layout``."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import pytest

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL
from airflow_gpu_dag.core.planning.plan import build_plan
from airflow_gpu_dag.plugins.critical_path_page.layout import (
    COLUMN_GAP,
    MARGIN,
    NODE_HEIGHT,
    NODE_WIDTH,
    ROW_GAP,
    NodeBox,
    _short,
    graph_svg,
    layout,
)
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


def test_an_empty_plan_has_no_boxes_and_a_one_node_svg_frame() -> None:
    plan = build_plan(TaskGraph("empty"))
    assert layout(plan) == {}
    svg = graph_svg(plan)
    width, height = 2 * MARGIN + NODE_WIDTH, 2 * MARGIN + NODE_HEIGHT
    assert f'width="{width}" height="{height}" viewBox="0 0 {width} {height}"' in svg
    assert "<g " not in svg and "<path " not in svg
    ElementTree.fromstring(svg)  # still a well-formed SVG element


def test_one_task_sits_in_the_top_left_corner() -> None:
    graph = TaskGraph("one")
    graph.add("only", 60)
    assert layout(build_plan(graph)) == {"only": NodeBox("only", MARGIN, MARGIN, 0, 0)}


def test_columns_are_spaced_by_node_width_and_gap_and_rows_by_node_height_and_gap() -> None:
    boxes = layout(build_plan(page_graph()))
    assert boxes["train"].x - boxes["load"].x == NODE_WIDTH + COLUMN_GAP
    assert boxes["stats"].y - boxes["train"].y == NODE_HEIGHT + ROW_GAP


def test_a_task_is_drawn_in_the_column_of_its_longest_upstream_chain() -> None:
    graph = TaskGraph("skip")
    for task_id in ("a", "b", "c"):
        graph.add(task_id, 60)
    graph.add_edge("a", "b")
    graph.add_edge("b", "c")
    graph.add_edge("a", "c")  # a short edge too: c stays after b
    boxes = layout(build_plan(graph))
    assert [boxes[t].column for t in ("a", "b", "c")] == [0, 1, 2]


def test_non_critical_tasks_are_ordered_by_the_mean_row_of_their_upstream() -> None:
    """``x`` is declared before ``y``, but ``y`` hangs off row 0 and ``x`` off row 1: one barycentre
    sweep puts ``y`` above ``x`` (shorter edges), below the critical ``long``."""
    graph = TaskGraph("bary")
    graph.add("a", 60)
    graph.add("b", 60)
    graph.add("long", 3600)
    graph.add("x", 10)
    graph.add("y", 10)
    for up, down in (("a", "long"), ("b", "x"), ("a", "y")):
        graph.add_edge(up, down)
    boxes = layout(build_plan(graph))
    assert (boxes["a"].row, boxes["b"].row) == (0, 1)
    assert [t for t in sorted(boxes, key=lambda t: boxes[t].y) if boxes[t].column == 1] == ["long", "y", "x"]


def test_an_edge_between_critical_tasks_with_a_gap_is_not_drawn_critical() -> None:
    """``a`` and ``d`` are both critical, but ``d`` starts when ``b`` ends, not ``a``: the edge
    ``a -> d`` is no part of the critical path."""
    graph = TaskGraph("diamond")
    graph.add("a", 60)
    graph.add("b", 600)
    graph.add("d", 60)
    for up, down in (("a", "b"), ("b", "d"), ("a", "d")):
        graph.add_edge(up, down)
    svg = graph_svg(build_plan(graph))
    assert set(re.findall(r'class="edge critical" data-from="([^"]+)" data-to="([^"]+)"', svg)) == {
        ("a", "b"),
        ("b", "d"),
    }
    assert 'class="edge" data-from="a" data-to="d"' in svg


def test_ids_with_quotes_and_unicode_stay_inside_their_attributes() -> None:
    graph = TaskGraph("quotes")
    graph.add('say "hi"', 60)
    graph.add("l'étape_日本", 60)
    graph.add_edge('say "hi"', "l'étape_日本")
    svg = graph_svg(build_plan(graph))
    root = ElementTree.fromstring(svg)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    assert [g.get("data-task-id") for g in root.findall("svg:g", ns)] == ['say "hi"', "l'étape_日本"]
    (edge,) = root.findall("svg:path", ns)
    assert (edge.get("data-from"), edge.get("data-to")) == ('say "hi"', "l'étape_日本")


def test_the_tooltip_says_when_a_duration_is_the_default_and_names_gpus_and_pool() -> None:
    graph = TaskGraph("tips")
    graph.add("guess", 600, duration_declared=False)
    graph.add("train", 3600, gpus=2, pool="gpu_a100")
    svg = graph_svg(build_plan(graph))
    titles = dict(
        (t.split("\n")[0], t)
        for t in (
            el.text or "" for el in ElementTree.fromstring(svg).iter("{http://www.w3.org/2000/svg}title")
        )
    )
    assert "duration 10m (default: no estimate declared)" in titles["guess"]
    assert titles["guess"].endswith(f"in {DEFAULT_POOL}")
    assert "(default" not in titles["train"] and titles["train"].endswith("in gpu_a100")
    assert "slack 0s \u00b7 2 GPU" in svg and "\u00b7 CPU" in svg


@pytest.mark.parametrize(
    ("text", "limit", "short"),
    [
        ("x" * 24, 24, "x" * 24),
        ("abcdefghijklmnopqrstuvwxy", 24, "abcdefghijk\u2026nopqrstuvwxy"),
        ("", 24, ""),
        ("日本語のタスク名がとても長いのでここで切られるはずです", 10, "日本語の\u2026るはずです"),
        ("abc", 1, "\u2026"),
    ],
)
def test_short_cuts_in_the_middle_to_the_limit(text: str, limit: int, short: str) -> None:
    assert _short(text, limit) == short
    assert len(_short(text, limit)) == min(len(text), limit)
