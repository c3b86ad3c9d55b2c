"""Tests of ``airflow_gpu_dag.plugins.critical_path_page.page_html``."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from airflow_gpu_dag.core.analysis.estimates import DurationEstimate
from airflow_gpu_dag.core.model.findings import Finding
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.plan import Plan, build_plan
from airflow_gpu_dag.plugins.critical_path_page.data import PoolView, ScheduleView, predicted_schedules
from airflow_gpu_dag.plugins.critical_path_page.page_html import render_page
from tests.unit.plugins.critical_path_page.conftest import gpu_pools, pipe_graph

EVIL = "<script>alert('x')</script>"


def _page(plan: Plan, pools: Any = None, schedules: ScheduleView | None = None, **kwargs: Any) -> str:
    return render_page(plan, schedules or ScheduleView(), pools, "../static", "../api/pools", **kwargs)


def _row(page: str, task_id: str) -> tuple[str, list[str]]:
    """The ``<tr>`` opening tag of a task's row and the texts of its cells."""
    found = re.search(rf'(<tr[^>]*data-task-id="{re.escape(task_id)}"[^>]*>)(.*?)</tr>', page)
    assert found is not None, task_id
    return found.group(1), re.findall(r"<td>([^<]*)", found.group(2))


def _pool(name: str = "gpu_default", **kwargs: Any) -> PoolView:
    fields: dict[str, Any] = {
        "name": name,
        "slots": 4,
        "used": 1,
        "running": 1,
        "queued": 0,
        "open": 3,
        "capacity": None,
        "reserved": 0,
        "reserved_for": None,
        "description": "",
        "used_by_dag": True,
    }
    return PoolView(**{**fields, **kwargs})


def test_a_hostile_dag_and_task_id_are_escaped_everywhere() -> None:
    """Task ids come from DAG files other people write: no markup of theirs may reach the page."""
    graph = TaskGraph(f'd"{EVIL}')
    graph.add(EVIL, 600, gpus=1, pool="gpu_default")
    graph.add('quote"d', 60)
    graph.add_edge(EVIL, 'quote"d')
    page = _page(build_plan(graph), gpu_pools(), predicted_schedules(graph, gpu_pools()))
    assert "<script>" not in page and "alert('x')" not in page
    assert "&lt;script&gt;" in page
    assert 'data-task-id="quote&quot;d"' in page  # an attribute cannot be closed early
    assert page.count('data-dag-id="d&quot;&lt;script&gt;') == 1


def test_urls_are_escaped_into_their_attributes() -> None:
    page = render_page(build_plan(pipe_graph()), ScheduleView(), None, 's" onload="x', "p'><b>")
    assert 'href="s&quot; onload=&quot;x/page.css"' in page
    assert "p&#x27;&gt;&lt;b&gt;" in page and "<b>" not in page.split("<body", 1)[1].split("<header>")[0]


def test_a_dollar_in_a_task_id_is_not_read_as_a_template_field() -> None:
    """The page is a ``string.Template``: ``$rows`` in a task id must stay text."""
    graph = TaskGraph("$dag_id")
    graph.add("$rows", 60)
    graph.add("${summary}", 60)
    page = _page(build_plan(graph))
    assert "<title>Critical path - $dag_id</title>" in page
    assert 'data-task-id="$rows"' in page and 'data-task-id="${summary}"' in page


def test_the_summary_counts_tasks_critical_tasks_and_gpu_hours() -> None:
    page = _page(build_plan(pipe_graph()))
    summary = re.search(r'<p id="summary">(.*?)</p>', page, re.S)
    assert summary is not None
    assert summary.group(1).startswith("2 tasks, 2 critical; makespan with unlimited GPUs <b>1h10m</b>")
    assert "total <b>2.00</b> GPU-hours" in summary.group(1)
    assert "Critical path: load → train" in summary.group(1)
    assert "estimates-summary" not in page  # nothing learned, no history note: no durations line


def test_a_task_row_shows_its_times_pool_and_gpu_hours() -> None:
    page = _page(build_plan(pipe_graph()))
    tag, cells = _row(page, "train")
    assert 'class="critical"' in tag and "data-estimate-off" not in tag
    assert cells[:4] == ["train", "yes", "1h00m", "-"]
    assert cells[5:10] == ["10m", "1h10m", "10m", "1h10m", "0s"]
    assert cells[-2:] == ["gpu_default", "2.00"]
    _, load = _row(page, "load")
    assert load[-2] == "default_pool"  # no pool: Airflow's default


def test_a_task_without_a_declared_duration_is_marked_default() -> None:
    graph = TaskGraph("d")
    graph.add("t", 300, duration_declared=False)
    _, cells = _row(_page(build_plan(graph)), "t")
    assert cells[2] == "5m (default)"


def _estimated_graph() -> TaskGraph:
    graph = TaskGraph("est")
    graph.add("fast", 3600)
    graph.add("few", 600)
    graph.add("fit[0]", 300, attrs={"map_of": "fit", "map_index": 0})
    graph.add("fit[12]", 300, attrs={"map_of": "fit", "map_index": 12})
    graph.add("plain[", 120)
    return graph


ESTIMATES = {
    # declared 1h, learned 10 min: off by 6x
    "fast": DurationEstimate("fast", 3600.0, 3600.0, learned=600.0, high=900.0, runs=8),
    "few": DurationEstimate("few", 600.0, 600.0, runs=2),
    "fit": DurationEstimate("fit", 300.0, 300.0, learned=320.0, runs=5),
    "plain": DurationEstimate("plain", 120.0, 120.0, learned=9999.0, runs=9),
}


def test_declared_and_learned_durations_are_shown_side_by_side() -> None:
    page = _page(build_plan(_estimated_graph()), estimates=ESTIMATES, sources={"fast": "learned"})
    tag, fast = _row(page, "fast")
    assert fast[2:5] == ["1h00m (learned)", "1h00m", "10m (8 runs, p 15m) — declared off by &gt;1.5x"]
    assert 'data-estimate-off="true"' in tag and "estimate-off" in tag
    _, few = _row(page, "few")
    assert few[2:5] == ["10m", "10m", "(2 runs: too few)"]


def test_an_instance_of_a_mapped_task_has_the_mapped_tasks_estimate() -> None:
    page = _page(build_plan(_estimated_graph()), estimates=ESTIMATES)
    for task_id in ("fit[0]", "fit[12]"):
        tag, cells = _row(page, task_id)
        assert cells[4] == "5m20s (5 runs)" and "data-estimate-off" not in tag
    _, plain = _row(page, "plain[")  # not an instance ``t[i]``: no estimate of ``plain``
    assert plain[3:5] == ["-", "-"]


def test_the_durations_line_counts_learned_tasks_and_names_the_off_ones() -> None:
    page = _page(build_plan(_estimated_graph()), estimates=ESTIMATES, flag_factor=2.5)
    line = re.search(r'<span id="estimates-summary">(.*?)</span>', page)
    assert line is not None
    assert line.group(1) == (
        "Durations: 3 of 4 task(s) learned from past runs; declared estimate off by more than 2.5x: "
        "fast, plain."
    )


def test_a_history_note_says_why_nothing_was_learned_and_is_escaped() -> None:
    page = _page(build_plan(pipe_graph()), history_note="history unreadable: <HTTP 503>")
    line = re.search(r'<span id="estimates-summary">(.*?)</span>', page)
    assert line is not None
    assert line.group(1) == (
        "Durations: 0 of 0 task(s) learned from past runs "
        "(history unreadable: &lt;HTTP 503&gt;; declared estimates used)."
    )


def test_a_declared_duration_within_the_flag_factor_is_not_flagged() -> None:
    graph = TaskGraph("d")
    graph.add("t", 100)
    estimates = {"t": DurationEstimate("t", 100.0, 100.0, learned=150.0, runs=5)}
    tag, cells = _row(_page(build_plan(graph), estimates=estimates, flag_factor=1.5), "t")
    assert "estimate-off" not in tag and "declared off" not in cells[4]
    tag, _ = _row(_page(build_plan(graph), estimates=estimates, flag_factor=1.49), "t")
    assert "estimate-off" in tag


def test_a_task_declaring_nothing_with_a_learned_duration_is_flagged_and_says_none() -> None:
    graph = TaskGraph("d")
    graph.add("t", 300, duration_declared=False)
    estimates = {"t": DurationEstimate("t", None, 300.0, learned=90.0, runs=5)}
    tag, cells = _row(_page(build_plan(graph), estimates=estimates), "t")
    assert cells[3] == "none" and "estimate-off" in tag


def test_pool_rows_say_unlimited_escape_descriptions_and_mark_too_large_pools() -> None:
    pools = [
        _pool(description="<i>managed</i> by the watermark", too_large='train needs 8 > 4 "slots"'),
        _pool("default_pool", slots=-1, open=-1, used_by_dag=False),
    ]
    page = _page(build_plan(pipe_graph()), pools)
    gpu = re.search(r'<tr data-pool="gpu_default"([^>]*)>(.*?)</tr>', page)
    default = re.search(r'<tr data-pool="default_pool">(.*?)</tr>', page)
    assert gpu is not None and default is not None
    assert gpu.group(1) == (' class="too-large" title="too large: train needs 8 &gt; 4 &quot;slots&quot;"')
    assert "&lt;i&gt;managed&lt;/i&gt;" in gpu.group(2)
    cells = re.findall(r"<td>([^<]*)</td>", default.group(1))
    assert cells[1] == "unlimited" and cells[6] == "unlimited" and cells[2] == "-"


def test_no_pools_gives_an_empty_table_not_the_no_access_line() -> None:
    page = _page(build_plan(pipe_graph()), [])
    assert "You may not read pools." not in page and "<tbody></tbody>" in page


def test_the_fallback_chart_says_why_there_is_no_prediction_escaped() -> None:
    page = _page(build_plan(pipe_graph()), None, ScheduleView(note="pool(s) <gpu> do not exist"))
    summary = re.search(r'<p id="gantt-summary">(.*?)</p>', page)
    assert summary is not None
    assert summary.group(1) == (
        "pool(s) &lt;gpu&gt; do not exist Showing the earliest-start schedule with unlimited GPUs."
    )
    empty = _page(build_plan(pipe_graph()), None, ScheduleView())
    assert "No pools to simulate on. Showing the earliest-start" in empty


def test_unfit_rungs_and_findings_are_listed_escaped() -> None:
    graph = pipe_graph()
    schedules = replace(predicted_schedules(graph, gpu_pools()), unfit_rungs=["rung <8 GPUs> waits 1h"])
    finding = Finding("error", "bad-pool", "pipe", "train", "pool <gpu_x> does not exist", "create it")
    page = _page(build_plan(graph, [finding]), gpu_pools(), schedules)
    assert '<p class="unfit-rung">rung &lt;8 GPUs&gt; waits 1h.</p>' in page
    findings = re.search(r'<div class="findings"><b>Problems reading the DAG:</b><ul>(.*?)</ul>', page)
    assert findings is not None and "pool &lt;gpu_x&gt; does not exist" in findings.group(1)
    assert "<gpu_x>" not in page


def test_a_dag_with_no_tasks_still_renders() -> None:
    page = _page(build_plan(TaskGraph("empty")))
    assert "0 tasks, 0 critical" in page and "<tbody></tbody>" in page


@pytest.mark.parametrize("factor", [1.5, 2.0, 10.0])
def test_the_flag_factor_is_written_compactly(factor: float) -> None:
    page = _page(build_plan(_estimated_graph()), estimates=ESTIMATES, flag_factor=factor)
    assert f"declared estimate off by more than {factor:g}x" in page
    assert ".0x" not in page
