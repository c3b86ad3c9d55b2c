"""The documentation site builds: ``mkdocs build --strict`` (broken links, missing nav pages and
bad anchors are errors), every page is reachable, and the benchmarks index links every
per-benchmark page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


DOCS = ROOT / "docs"


def _nav_files(nav: Any) -> list[str]:
    out: list[str] = []
    if isinstance(nav, str):
        out.append(nav)
    elif isinstance(nav, list):
        for item in nav:
            out.extend(_nav_files(item))
    elif isinstance(nav, dict):
        for value in nav.values():
            out.extend(_nav_files(value))
    return out


def _config() -> dict[str, Any]:
    # mkdocs.yml may use !!python/name tags in extensions; this one does not, so safe_load works.
    return dict(yaml.safe_load((ROOT / "mkdocs.yml").read_text()))


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    # mkdocs and mkdocs-material are dev dependencies (pip install -c constraints.txt -e ".[dev]").
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert (site / "index.html").is_file()
    assert (site / "benchmarks" / "stress" / "index.html").is_file()
    # The API reference is generated and its Sphinx roles became links (scripts/griffe_sphinx_roles.py).
    core = (site / "reference" / "core" / "index.html").read_text()
    assert 'id="airflow_gpu_dag.core.model.graph.TaskGraph"' in core
    assert 'href="#airflow_gpu_dag.core.model.graph.TaskGraph"' in core
    assert (
        'href="../reference/hooks/#airflow_gpu_dag.hooks.airflow_api.AirflowApiHook"'
        in (site / "connections" / "index.html").read_text()
    )
    for page in (site / "reference").rglob("*.html"):
        text = page.read_text()
        assert ":class:`" not in text or page.parent.name == "reference", f"a raw Sphinx role in {page}"
    assert "airflow_gpu_dag.edges" in (site / "changelog" / "index.html").read_text()


def test_every_nav_entry_exists_and_every_top_level_page_is_in_nav() -> None:
    nav = _nav_files(_config()["nav"])
    missing = [p for p in nav if not (DOCS / p).is_file()]
    assert not missing, f"mkdocs.yml nav names pages that do not exist: {missing}"
    top_level = {p.name for p in DOCS.glob("*.md")}
    not_in_nav = top_level - set(nav)
    assert not not_in_nav, f"add these pages to the nav of mkdocs.yml: {sorted(not_in_nav)}"


def test_benchmarks_index_links_every_benchmark_page() -> None:
    index = (DOCS / "benchmarks.md").read_text()
    linked = set(re.findall(r"\]\((benchmarks/[\w.-]+\.md)(?:#[\w-]+)?\)", index))
    pages = {f"benchmarks/{p.name}" for p in (DOCS / "benchmarks").glob("*.md")}
    assert pages, "docs/benchmarks/ has no pages"
    assert not pages - linked, f"docs/benchmarks.md must link {sorted(pages - linked)}"
    assert not linked - pages, f"docs/benchmarks.md links missing pages {sorted(linked - pages)}"
