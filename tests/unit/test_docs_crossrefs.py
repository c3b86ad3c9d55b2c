"""scripts/griffe_sphinx_roles.py: the Sphinx roles of the package's docstrings become links to the
objects the API reference renders, resolved as Python would; the rest becomes inline code."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import griffe
import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


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
