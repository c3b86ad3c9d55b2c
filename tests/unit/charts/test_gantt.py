"""Tests of ``airflow_gpu_dag.charts.gantt``."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_gpu_dag.charts.gantt import (
    GanttBar,
    GanttChart,
    GanttWriteError,
    bars_from_plan,
    check_gantt_path,
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
