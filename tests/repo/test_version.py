"""One version everywhere: ``airflow_gpu_dag.__version__`` is the single source, read by pyproject
(a dynamic version), the provider info Airflow lists, the installed distribution, and the image tag
of the Docker Compose file, the Kubernetes manifest and the Helm values. A ``.dev`` version while the
CHANGELOG's newest section is unreleased, so a build is never mistaken for the release it precedes."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import yaml

import airflow_gpu_dag
from airflow_gpu_dag.get_provider_info import get_provider_info

ROOT = Path(__file__).parents[2]


def test_pyproject_reads_the_package_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"], "the version is written in airflow_gpu_dag/__init__.py"
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "airflow_gpu_dag.version.__version__"
    }


def test_the_installed_distribution_and_the_provider_info_agree() -> None:
    assert version("airflow-gpu-dag") == airflow_gpu_dag.__version__, "reinstall: scripts/bootstrap.sh"
    assert get_provider_info()["versions"][0] == airflow_gpu_dag.__version__


def test_an_unreleased_version_is_a_dev_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    newest = re.search(r"^## (\S+)(.*)$", changelog, re.MULTILINE)
    assert newest is not None
    released, unreleased = newest.group(1), "unreleased" in newest.group(2)
    expected = f"{released}.dev0" if unreleased else released
    assert airflow_gpu_dag.__version__ == expected


def test_every_image_tag_is_the_version() -> None:
    tag = f"airflow-gpu-dag:{airflow_gpu_dag.__version__}"
    compose = (ROOT / "docker" / "docker-compose.yaml").read_text()
    assert f"${{AIRFLOW_GPU_DAG_IMAGE:-{tag}}}" in compose
    assert f"-t {tag} " in (ROOT / "docker" / "Dockerfile").read_text()
    assert f"image: {tag}\n" in (ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text()
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "values-gpu-dag.yaml").read_text())
    assert values["defaultAirflowTag"] == airflow_gpu_dag.__version__
    assert {c["image"] for c in values["scheduler"]["extraContainers"]} == {tag}


def test_the_docs_name_the_version() -> None:
    """Every versioned image tag or provider listing in the docs is this version."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {
        (page.name, found)
        for page in pages
        for found in re.findall(r"airflow-gpu-dag:(\d[\w.]*)|\| (\d+\.\d+\.\d+\S*)$", page.read_text(), re.M)
    }
    versions = {page_version for _, pair in named for page_version in pair if page_version}
    assert versions <= {airflow_gpu_dag.__version__}, named
