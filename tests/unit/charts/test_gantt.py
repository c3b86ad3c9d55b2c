"""Tests of ``airflow_gpu_dag.charts.gantt``."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_gpu_dag.charts.gantt import (
    CRITICAL_COLOUR,
    LABEL_WIDTH,
    NORMAL_COLOUR,
    GanttBar,
    GanttChart,
    GanttWriteError,
    bars_from_plan,
    bars_from_schedule,
    check_gantt_path,
    render_html,
    render_svg,
    write_gantt,
)
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.plan import build_plan
from tests.unit.cli.conftest import (
    GOOD,
    PIPELINE,
    run_cli,
)

CAPACITY = ("--capacity", "gpu_default=4")


@pytest.mark.usefixtures("_no_configured_pools")
def test_simulate_gantt_write_failure_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An OSError when the chart is written (the path checked fine, then became a folder) is the same
    one-line error, not a traceback."""
    folder = tmp_path / "late.svg"
    folder.mkdir()
    monkeypatch.setattr("airflow_gpu_dag.charts.gantt.check_gantt_path", Path, raising=False)
    for extra in ((), ("--trigger", f"{PIPELINE}=0")):
        assert (
            run_cli("simulate", PIPELINE, "--file", str(GOOD), *CAPACITY, "--gantt", str(folder), *extra) == 1
        )
        err = capsys.readouterr().err
        assert f"error: --gantt '{folder}': cannot write (" in err and "Traceback" not in err


@pytest.mark.usefixtures("_no_configured_pools")
def test_check_gantt_path(tmp_path: Path) -> None:
    nested = tmp_path / "new" / "dir" / "chart.html"
    assert check_gantt_path(nested) == nested and not (tmp_path / "new").exists()  # nothing created
    existing = tmp_path / "old.svg"
    existing.write_text("<svg/>")
    assert check_gantt_path(str(existing)) == existing
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(GanttWriteError, match=r"cannot write \('.*file' is not a directory\)"):
        check_gantt_path(a_file / "chart.html")
    with pytest.raises(ValueError, match=r"use a file name ending in \.html or \.svg"):
        check_gantt_path(tmp_path / "chart.png")


@pytest.mark.usefixtures("_no_configured_pools")
def test_write_gantt_raises_a_clean_error_that_is_still_an_oserror(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(GanttWriteError, match=r"--gantt '.*chart\.html': cannot write \(") as info:
        write_gantt(a_file / "chart.html", [GanttChart("t")], "title")
    assert isinstance(info.value, OSError) and isinstance(info.value, ValueError)


def test_earliest_start_bars_name_the_pool_of_a_task_without_one() -> None:
    # Without live pools the chart shows earliest starts; a GPU task with no pool of its own had the
    # tooltip "2 slot(s) of " (no pool), where the simulator and the task table say default_pool.
    graph = TaskGraph("nopool")
    graph.add("train", 600, gpus=2)
    (bar,) = bars_from_plan(build_plan(graph))
    assert bar.pool == "default_pool"


# -- 3. Gantt labels of long task ids ------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_long_task_ids_keep_distinct_labels() -> None:
    ids = [f"fine_tune_llama_70b_on_customer_data[{i}]" for i in range(3)]
    ids += ["0:nightly_training_pipeline_v2/evaluate", "0:nightly_training_pipeline_v2/train"]
    svg = render_svg([GanttChart("t", [GanttBar(t, i, i + 1.0) for i, t in enumerate(ids)])])
    labels = [part.split("<")[0] for part in svg.split('class="gantt-label">')[1:]]
    assert len(labels) == len(ids) == len(set(labels))
    assert all(len(label) <= 34 for label in labels)
    assert any(label.endswith("[2]") for label in labels)


# -- direct unit tests of the module --------------------------------------------------------------------
_SVG = "{http://www.w3.org/2000/svg}"


def _bars(svg: str) -> list[ET.Element]:
    """The bar groups of ``svg``, parsed as XML (which also checks it is well-formed)."""
    return [g for g in ET.fromstring(svg).iter(f"{_SVG}g") if "gantt-bar" in g.get("class", "")]


def _ticks(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{_SVG}text") if t.get("class") == "gantt-tick"]


def test_the_makespan_is_the_latest_end_and_zero_without_bars() -> None:
    assert GanttChart("t").makespan == 0.0
    assert GanttChart("t", [GanttBar("a", 0, 50), GanttBar("b", 10, 40)]).makespan == 50.0


def test_bars_from_a_schedule_mark_the_critical_tasks_and_whole_slots() -> None:
    schedule = (
        SimpleNamespace(task_id=t, start=s, end=e, slots=n, pool=p)
        for t, s, e, n, p in [("a", 0.0, 60.0, 2.0, "gpu"), ("b", 60.0, 90.0, 1, "default_pool")]
    )
    assert bars_from_schedule(schedule, critical=iter(["b", "unknown"])) == [
        GanttBar("a", 0.0, 60.0, 2, "gpu", False),
        GanttBar("b", 60.0, 90.0, 1, "default_pool", True),
    ]
    assert bars_from_schedule([]) == []


def test_bars_are_drawn_in_start_order_critical_ones_in_red() -> None:
    chart = GanttChart(
        "t",
        [
            GanttBar("late", 50, 60),
            GanttBar("b", 0, 30, critical=True),
            GanttBar("a", 0, 30),
            GanttBar("short", 0, 10),
        ],
    )
    bars = _bars(render_svg([chart]))
    assert [g.get("data-task-id") for g in bars] == ["short", "a", "b", "late"]
    colours = {g.get("data-task-id"): g.find(f"{_SVG}rect").get("fill") for g in bars}  # type: ignore[union-attr]
    assert colours == {
        "short": NORMAL_COLOUR,
        "a": NORMAL_COLOUR,
        "b": CRITICAL_COLOUR,
        "late": NORMAL_COLOUR,
    }
    assert [g.get("class") for g in bars].count("gantt-bar critical") == 1


def test_the_tooltip_gives_times_and_the_slots_only_when_the_task_holds_some() -> None:
    chart = GanttChart("t", [GanttBar("train", 60, 3960, 2, "gpu_a100", True), GanttBar("prep", 0, 60)])
    tips = {g.get("data-task-id"): g.findtext(f"{_SVG}title") for g in _bars(render_svg([chart]))}
    assert tips == {
        "train": "train: 1m - 1h06m (1h05m), 2 slot(s) of gpu_a100, critical",
        "prep": "prep: 0s - 1m (1m)",
    }


def test_charts_share_one_time_axis() -> None:
    """The same time is at the same x in every chart: the shorter schedule's bars are not stretched."""
    short = GanttChart("stock", [GanttBar("a", 0, 100)])
    long = GanttChart("ours", [GanttBar("a", 0, 100), GanttBar("b", 100, 200)])
    svg = render_svg([short, long])
    widths = [float(g.find(f"{_SVG}rect").get("width")) for g in _bars(svg)]  # type: ignore[union-attr]
    assert widths[0] == widths[1] == pytest.approx(widths[2])
    makespans = [
        float(m.group(1)) for m in re.finditer(r'<line x1="([0-9.]+)"[^>]*class="gantt-makespan"', svg)
    ]
    assert makespans[1] - LABEL_WIDTH == pytest.approx(2 * (makespans[0] - LABEL_WIDTH))


def test_a_zero_length_bar_is_still_visible() -> None:
    chart = GanttChart("t", [GanttBar("marker", 100, 100), GanttBar("long", 0, 100_000)])
    widths = {
        g.get("data-task-id"): float(g.find(f"{_SVG}rect").get("width")) for g in _bars(render_svg([chart]))
    }  # type: ignore[union-attr]
    assert widths["marker"] >= 1.0


def test_markup_in_ids_titles_and_pools_is_escaped_and_the_svg_stays_well_formed() -> None:
    nasty = 'x"><script>alert(1)</script>&amp'
    chart = GanttChart(nasty, [GanttBar(nasty, 0, 60, 1, nasty)], subtitle=nasty)
    svg = render_svg([chart])
    assert "<script>" not in svg
    (bar,) = _bars(svg)
    assert bar.get("data-task-id") == nasty
    assert nasty in (bar.findtext(f"{_SVG}title") or "")
    root = ET.fromstring(svg)
    assert [t.text for t in root.iter(f"{_SVG}text") if t.get("class") == "gantt-title"] == [nasty]


def test_unicode_ids_are_kept_and_a_label_is_cut_only_past_34_characters() -> None:
    exact, longer = "é" * 34, "日本語_" + "x" * 40
    labels = {
        g.get("data-task-id"): g.findtext(f"{_SVG}text")
        for g in _bars(render_svg([GanttChart("t", [GanttBar(exact, 0, 1), GanttBar(longer, 1, 2)])]))
    }
    assert labels[exact] == exact
    assert labels[longer] == longer[:15] + "..." + longer[-16:] and len(labels[longer]) == 34


def test_an_empty_set_of_charts_or_a_chart_without_bars_is_still_an_svg() -> None:
    for charts in ([], [GanttChart("nothing")]):
        root = ET.fromstring(render_svg(charts))
        assert root.tag == f"{_SVG}svg" and int(root.get("height", "0")) >= 1
    assert _ticks(render_svg([GanttChart("nothing")])) == ["0s"]


@pytest.mark.parametrize("span", [60.0, 3600.0, 86400.0, 30 * 86400.0, 400 * 86400.0])
def test_the_axis_has_round_ticks_from_zero_to_the_makespan(span: float) -> None:
    ticks = _ticks(render_svg([GanttChart("t", [GanttBar("a", 0, span)])]))
    assert ticks[0] == "0s" and 5 <= len(ticks) <= 11


@pytest.mark.parametrize("span", [12.0, 110.0, 660.0, 1100.0, 5000.0, 40000.0, 90000.0, 11 * 86400.0])
def test_a_schedule_of_a_quarter_hour_gets_five_to_ten_ticks(span: float) -> None:
    ticks = _ticks(render_svg([GanttChart("t", [GanttBar("a", 0, span)])]))
    assert 5 <= len(ticks) <= 11


def test_the_page_is_self_contained_with_an_escaped_summary_table() -> None:
    chart = GanttChart("ours", [GanttBar("a", 0, 60)])
    page = render_html([chart], "Run <1>", [["Policy", "Makespan"], ["ours & co", "1m"]])
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert "<title>Run &lt;1&gt;</title>" in page and "<h1>Run &lt;1&gt;</h1>" in page
    assert "<thead><tr><th>Policy</th><th>Makespan</th></tr></thead>" in page
    assert "<tbody><tr><td>ours &amp; co</td><td>1m</td></tr></tbody>" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page  # no JavaScript, no downloads
    assert render_svg([chart]) in page
    assert "<table>" not in render_html([chart], "t")  # no summary, no table


@pytest.mark.parametrize("name", ["chart.html", "chart.HTM", "chart.SVG", "nested/dir/chart.svg"])
def test_write_gantt_writes_html_or_svg_by_suffix_making_folders(tmp_path: Path, name: str) -> None:
    chart = GanttChart("ours", [GanttBar("日本語", 0, 60)])
    written = write_gantt(tmp_path / name, [chart], "title")
    assert written == tmp_path / name
    text = written.read_text(encoding="utf-8")
    assert "日本語" in text
    if name.lower().endswith(".svg"):
        assert text == render_svg([chart])
    else:
        assert text == render_html([chart], "title")


def test_write_gantt_replaces_an_existing_chart(tmp_path: Path) -> None:
    target = tmp_path / "chart.svg"
    target.write_text("old")
    write_gantt(target, [GanttChart("new")], "t")
    assert target.read_text() == render_svg([GanttChart("new")])


@pytest.mark.parametrize("name", ["chart.png", "chart", "chart.html.bak", ".svg"])
def test_another_suffix_is_refused_before_anything_is_written(tmp_path: Path, name: str) -> None:
    target = tmp_path / "out" / name
    for check in (check_gantt_path, lambda p: write_gantt(p, [GanttChart("t")], "t")):
        with pytest.raises(ValueError, match=r"use a file name ending in \.html or \.svg") as caught:
            check(target)
        assert not isinstance(caught.value, GanttWriteError)
    assert not (tmp_path / "out").exists()


def test_a_folder_named_like_a_chart_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "chart.html"
    folder.mkdir()
    with pytest.raises(GanttWriteError, match=r"cannot write \(it is a directory\)"):
        check_gantt_path(folder)


def test_check_gantt_path_accepts_any_case_of_the_suffix(tmp_path: Path) -> None:
    for name in ("a.HTML", "b.Htm", "c.sVg"):
        assert check_gantt_path(tmp_path / name) == tmp_path / name
