"""``watermark.yaml`` has a JSON Schema shipped in the package (editors complete and check the file with
it), the controller validates the file's structure with it, and it agrees with the parser: every
example the repository ships is valid under both, and the keys the parser knows are the schema's."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from airflow_gpu_dag.watermark import config as watermark_config
from airflow_gpu_dag.watermark.config import SCHEMA, ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[3]


def _examples() -> dict[str, Any]:
    """Every watermark.yaml the repository ships: docs/watermarks.md's, docker/, deploy/ (embedded)."""
    found = {"docker/watermark.yaml": yaml.safe_load((ROOT / "docker" / "watermark.yaml").read_text())}
    configmap = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "configmap.yaml").read_text())
    found["deploy/kubernetes/configmap.yaml"] = yaml.safe_load(configmap["data"]["watermark.yaml"])
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "values-gpu-dag.yaml").read_text())
    embedded = yaml.safe_load(values["extraConfigMaps"]["airflow-gpu-dag-watermark"]["data"])
    found["deploy/helm/values-gpu-dag.yaml"] = yaml.safe_load(embedded["watermark.yaml"])
    page = (ROOT / "docs" / "watermarks.md").read_text()
    for n, block in enumerate(re.findall(r"```yaml\n(.*?)```", page, re.S)):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "pools" in doc:
            found[f"docs/watermarks.md block {n}"] = doc
    assert len(found) >= 4, sorted(found)
    return found


def test_the_schema_ships_in_the_package_and_is_a_valid_schema() -> None:
    text = resources.files("airflow_gpu_dag.watermark").joinpath("watermark.schema.json").read_text()
    assert "watermark.schema.json" in text  # its $id names it
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    pyproject = (ROOT / "pyproject.toml").read_text()
    package_data = re.search(r'\[tool\.setuptools\.package-data\]\n"\*" = \[([^\]]*)\]', pyproject)
    assert package_data is not None and '"*.json"' in package_data.group(1)


@pytest.mark.parametrize("name", sorted(_examples()))
def test_every_shipped_example_is_valid_under_the_schema_and_the_parser(name: str) -> None:
    doc = _examples()[name]
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert parse_config(doc).pools


def test_the_parser_knows_the_schemas_keys() -> None:
    """One list of keys: the parser reads them from the schema, so the two cannot drift apart."""
    assert set(watermark_config._TOP_KEYS) == set(SCHEMA["properties"])
    assert set(watermark_config._POOL_KEYS) == set(SCHEMA["$defs"]["pool"]["properties"])
    assert set(watermark_config.SOURCE_TYPES) == {
        key.removesuffix("_source") for key in SCHEMA["$defs"] if key.endswith("_source")
    }
    extra = {"pools": {"g": {"source": 2}}, "debug": True}
    with pytest.raises(
        ConfigError, match=r"unknown keys \['debug'\] \(known: \['fail_open_after', 'interval'"
    ):
        parse_config(extra)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a mapping at the top level, got list"),
        ({"pools": []}, "'pools' must map at least one pool"),
        ({"pools": {}}, "'pools' must map at least one pool"),
        ({"pools": {"g": {"source": 2}}, "lease": "off"}, "lease: expected a mapping, got 'off'"),
        ({"pools": {"g": {"source": 2}}, "lease": {"lock": 1}}, r"lease: unknown keys \['lock'\]"),
        ({"pools": {"g": [1, 2]}}, "pools.g: expected a mapping with a 'source', got \\[1, 2\\]"),
        ({"pools": {"g": {"floor": 1}}}, "pools.g.source: missing"),
        ({"pools": {7: {"source": 2, "flor": 1}}}, r"pools.7: unknown keys \['flor'\]"),
    ],
)
def test_a_structural_error_is_the_schemas_with_the_parsers_words(doc: Any, message: str) -> None:
    """The schema finds what is misshapen; the message names the key and the fix, as before."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert not validator.is_valid({str(k): v for k, v in doc.items()} if isinstance(doc, dict) else doc)
    with pytest.raises(ConfigError, match=message):
        parse_config(doc)


def test_the_docs_and_the_docker_example_point_editors_at_the_schema() -> None:
    assert "airflow_gpu_dag/watermark/watermark.schema.json" in (ROOT / "docs" / "watermarks.md").read_text()
    first = (ROOT / "docker" / "watermark.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=../airflow_gpu_dag/watermark/watermark.schema.json"
    assert (ROOT / "docker" / first.split("$schema=")[1]).resolve().is_file()
