"""Docs and example DAGs against the code: the example sweep survives diverged trials, a page says what
the code does (lease outcomes, the connection URI form), and the API reference's roles and aliases link
every public object to where it is defined."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import griffe
import httpx
import numpy as np
import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _page(name: str) -> str:
    return (ROOT / name).read_text()


def _xcom_sent(value: Any) -> Any:
    """What the Task SDK's supervisor does with a task's return value: ``client.xcoms.set(..., json=value)``
    over httpx, whose JSON encoder refuses inf and NaN (``allow_nan=False``)."""
    httpx.Request("POST", "http://api-server/execution/xcoms/d/r/t/return_value", json=value)
    return value


def _sweep(tmp_path: Path, learning_rates: list[float]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    sweep = load_script("dags/hparam_sweep.py", "example_hparam_sweep_audit3")
    params = {
        "model_size": "base",
        "gpus": 1,
        "dataset_path": str(tmp_path),
        "learning_rates": learning_rates,
        "epochs": 200,
    }
    context = {"params": params, "run_id": "manual__audit3"}
    sweep.get_current_context = lambda: context  # type: ignore[attr-defined]  # the tasks' context
    tasks = sweep.dag.task_dict
    evaluations = []
    with np.errstate(all="ignore"):
        for spec in _xcom_sent(tasks["prepare_data"].python_callable()):
            trained = _xcom_sent(tasks["train_trial"].python_callable(spec, gpu_lease=None))
            evaluations.append(_xcom_sent(tasks["evaluate_trial"].python_callable(trained)))
        best = _xcom_sent(tasks["select_best"].python_callable(evaluations))
    return evaluations, best


def _lease_outcomes() -> set[str]:
    """Every outcome a GPU lease ends with, read from the code that releases or reclaims leases."""
    code = "\n".join(
        (ROOT / "airflow_gpu_dag" / path).read_text()
        for path in ("operators/gpu.py", "operators/gpu_lease.py", "gpu/lease.py", "gpu/lease_table.py")
    )
    found = set(re.findall(r'\boutcome = "(\w+)"', code))
    found |= set(re.findall(r'(?:_finish_gpu_lease|\.release)\("(\w+)"\)', code))
    found |= set(re.findall(r'record_usage\(record, \w+, "(\w+)"', code))
    return found


def test_a_diverged_trial_does_not_fail_the_sweep(tmp_path: Path) -> None:
    # With model_size "base" the default learning rate 0.3 diverges to inf. train_trial and
    # evaluate_trial return None for it: inf is an XCom value the Task SDK cannot send (JSON has no
    # inf), which would fail the trial (and its retry), keep select_best from running and fail the sweep.
    evaluations, best = _sweep(tmp_path, [0.3, 0.1])
    diverged, good = evaluations
    assert diverged["val_mse"] is None and diverged["train_mse"] is None
    assert good["val_mse"] is not None and np.isfinite(good["val_mse"])
    assert best["lr"] == 0.1
    assert (tmp_path / "runs" / "manual__audit3" / "summary.json").exists()


def test_a_sweep_whose_trials_all_diverged_still_ends(tmp_path: Path) -> None:
    evaluations, best = _sweep(tmp_path, [3.0, 10.0])
    assert all(e["val_mse"] is None for e in evaluations)
    assert best["lr"] == 3.0


def test_metrics_page_names_every_lease_outcome() -> None:
    # The operators end leases as skipped (a skipped task) and killed (on_kill) besides success, failed
    # and reclaimed: a dashboard filtering on documented values must see all of their GPU-seconds.
    outcomes = _lease_outcomes()
    assert {"success", "failed", "skipped", "killed", "reclaimed"} <= outcomes, outcomes
    (row,) = [line for line in _page("docs/metrics.md").splitlines() if "`gpu_dag.lease.gpu_seconds`" in line]
    missing = sorted(o for o in outcomes if f"`{o}`" not in row)
    assert not missing, f"docs/metrics.md does not name the lease outcomes {missing}"


def test_the_uri_form_airflow_writes_is_the_one_named() -> None:
    # get_uri() writes a path-prefixed connection in the last form the page shows (a percent-encoded
    # slash in the host), not the second (".../airflow" as the URI path): the page must say so.
    from airflow.models.connection import Connection

    from airflow_gpu_dag.hooks.airflow_api import base_url_of

    page = _page("docs/connections.md")
    block = page.split("**An api-server behind a path prefix**", 1)[1].split("All three give", 1)[0]
    uris = re.findall(r"AIRFLOW_CONN_GPU_DAG_API='(gpu-dag-api://[^']+)'", block)
    assert len(uris) == 2, uris
    conn = Connection(
        conn_id="gpu_dag_api",
        conn_type="gpu_dag_api",
        host="https://gw.example.com/airflow",
        port=8443,
        login="gpu-dag-controller",
        password="PASSWORD",
    )
    written = conn.get_uri()
    assert written == uris[-1]
    assert "`get_uri()` writes such a connection in the last form" in " ".join(page.split())
    for uri in uris:  # both give the documented base URL
        parsed = Connection(conn_id="x", uri=uri)
        base = base_url_of(parsed.host, parsed.port, parsed.schema, parsed.conn_type)
        assert base == "https://gw.example.com:8443/airflow"


# -- scripts/griffe_sphinx_roles.py: the Sphinx roles of the package's docstrings become links to the


@pytest.fixture(scope="module")
def roles() -> ModuleType:
    return load_script("scripts/griffe_sphinx_roles.py", "griffe_sphinx_roles")


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    return griffe.load("airflow_gpu_dag", search_paths=[str(ROOT)], docstring_parser=griffe.Parser.sphinx)  # type: ignore[return-value]


def _docstring(package: griffe.Module, path: str) -> str:
    obj = package.modules_collection.get_member(path)
    assert obj.docstring is not None
    return str(obj.docstring.value)


def test_roles_are_resolved_from_the_docstrings_scope(roles: ModuleType, package: griffe.Module) -> None:
    hook = package.modules_collection.get_member("airflow_gpu_dag.hooks.airflow_api.AirflowApiHook")
    report = roles.Report()
    text = roles.rewrite(
        hook,
        "See :class:`~airflow_gpu_dag.hooks.rest_client.AirflowRestClient`, :meth:`get_client`, "
        ":func:`base_url_of`, :mod:`airflow_gpu_dag.core`, :class:`.graph.TaskGraph`, "
        ":class:`_Private`, :class:`airflow.sdk.BaseHook`.\n\nExample::\n\n    x = 1\n",
        report,
    )
    assert "[`AirflowRestClient`][airflow_gpu_dag.hooks.rest_client.AirflowRestClient]" in text
    assert "[`get_client`][airflow_gpu_dag.hooks.airflow_api.AirflowApiHook.get_client]" in text
    assert "[`base_url_of`][airflow_gpu_dag.hooks.airflow_api.base_url_of]" in text
    assert "[`airflow_gpu_dag.core`][airflow_gpu_dag.core]" in text
    assert "[`graph.TaskGraph`][airflow_gpu_dag.core.model.graph.TaskGraph]" in text
    assert "`_Private`" in text and "`airflow.sdk.BaseHook`" in text
    assert "Example:\n\n    x = 1" in text
    assert report.linked == 5 and len(report.unlinked) == 2


def test_aliases_link_to_where_the_object_is_defined(roles: ModuleType, package: griffe.Module) -> None:
    module = package.modules_collection.get_member("airflow_gpu_dag.sensors")
    assert roles.resolve(module, "airflow_gpu_dag.sensors.StartWindowSensor") == (
        "airflow_gpu_dag.sensors.window.StartWindowSensor"
    )


def test_no_public_object_of_the_package_is_left_unlinked(roles: ModuleType, package: griffe.Module) -> None:
    report = roles.convert(package)
    assert report.linked > 200
    broken = [
        (owner, role)
        for owner, role in report.unlinked
        if "airflow_gpu_dag." in role and "._" not in role and "`_" not in role
    ]
    assert not broken, f"roles naming package objects that do not exist: {broken}"
    assert ":class:`" not in _docstring(package, "airflow_gpu_dag.hooks.airflow_api.AirflowApiHook")
