"""docs/configuration.md is generated from the provider info (scripts/config_docs.py): one source of
truth for the ``[gpu_dag]`` options, and the page may not drift from it."""

from __future__ import annotations

import copy
from pathlib import Path
from types import ModuleType

from airflow_gpu_dag.get_provider_info import get_provider_info
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    return load_script("scripts/config_docs.py", "config_docs", register=False)


def test_the_page_is_up_to_date() -> None:
    generator = _generator()
    assert (ROOT / "docs" / "configuration.md").read_text() == generator.current(), (
        "docs/configuration.md is out of date with get_provider_info.py: run python scripts/config_docs.py"
    )
    assert generator.main(["--check"]) == 0


def test_every_option_of_every_section_is_on_the_page() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    for section, spec in get_provider_info()["config"].items():
        assert f"## [{section}]" in page
        for name in spec["options"]:
            assert f"\n### {name}\n" in page, name
            assert f"AIRFLOW__{section.upper()}__{name.upper()}" in page


def test_a_new_option_shows_up_and_text_stays_visible() -> None:
    config = copy.deepcopy(get_provider_info()["config"])
    config["gpu_dag"]["options"]["metrics_prefix"] = {
        "description": "Prefix of <every> metric & more.",
        "version_added": "0.2.0",
        "type": "string",
        "example": "gpu_dag",
        "default": "gpu_dag",
    }
    page = _generator().render(config)
    assert "\n### metrics_prefix\n" in page
    assert "Prefix of &lt;every> metric &amp; more." in page  # not swallowed as an HTML tag
    assert (
        "| [`metrics_prefix`](#metrics_prefix) | string | `gpu_dag` | `AIRFLOW__GPU_DAG__METRICS_PREFIX` |"
        in page
    )
    assert "- since: 0.2.0" in page
    assert "\nmetrics_prefix = gpu_dag\n" in page
