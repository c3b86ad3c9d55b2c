"""Tests of ``airflow_gpu_dag.cli.estimates``."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.cli.estimates import estimates_table
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, EstimateSettings
from tests.unit.cli.conftest import GOOD, PIPELINE, fake_history, run_cli, run_json


# -- 5. the quantile column of estimates -------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(("quantile", "label"), [(0.9, "p90"), (0.995, "p99.5"), (0.999, "p99.9")])
def test_estimates_table_names_the_quantile_it_shows(quantile: float, label: str) -> None:
    settings = EstimateSettings(quantile=quantile)
    estimate = DurationEstimate("train", declared=600.0, fallback=600.0)
    table = estimates_table("d", {"train": estimate}, settings, 1.5)
    assert [name for name, _ in table.columns][3] == label


# -- learned durations: estimates and plan ------------------------------------------------------------


@pytest.mark.usefixtures("_no_configured_pools")
def test_estimates_flags_declared_estimates_that_are_off(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # train declares 2h but takes 20m; load declares 20m and takes 21m
    fake_history(monkeypatch, {"train": 1200.0, "load": 1260.0})
    code, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD))
    assert code == 0 and report["flagged"] == ["train"]
    by_task = {t["task_id"]: t for t in report["tasks"]}
    assert by_task["train"]["source"] == "learned" and by_task["train"]["runs"] == 4
    assert by_task["train"]["learned"] == pytest.approx(1200, rel=0.02)
    assert by_task["train"]["declared"] == 7200 and by_task["train"]["ratio"] == pytest.approx(
        1 / 6, rel=0.02
    )
    assert by_task["evaluate"]["source"] == "declared" and not by_task["evaluate"]["flagged"]
    code, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD), "--factor", "1.01")
    assert report["flagged"] == ["load", "train"]
    for factor in ("1", "nan", "inf"):
        assert run_cli("estimates", PIPELINE, "--file", str(GOOD), "--factor", factor) == 1
        assert "must be a finite number greater than 1" in capsys.readouterr().err
    assert run_cli("estimates", PIPELINE, "--file", str(GOOD)) == 0
    out = capsys.readouterr().out
    assert "OFF >1.5x" in out and "1 of 13 task(s) flagged" in out
