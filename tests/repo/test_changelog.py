"""CHANGELOG.md's table of moved modules is true: every 0.1.0 module it names is gone, every 0.2.0
module it names imports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


PACKAGE = ROOT / "airflow_gpu_dag"


def _moves() -> list[tuple[str, str]]:
    text = (ROOT / "CHANGELOG.md").read_text()
    table = text[text.index("### Moved") : text.index("### Added")]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| `airflow_gpu_dag.")]
    assert len(rows) >= 15, rows
    return [(old, new) for old, new in rows]


def _modules(cell: str) -> list[str]:
    return re.findall(r"`(airflow_gpu_dag(?:\.\w+)*)`", cell)


def _is_module(path: str) -> bool:
    rel = Path(*path.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


@pytest.mark.parametrize(("old", "new"), _moves())
def test_moved_modules(old: str, new: str) -> None:
    (before, *_) = _modules(old)
    assert not _is_module(before), f"{before} still exists: CHANGELOG.md says it moved"
    for after in _modules(new):
        if _is_module(after):
            importlib.import_module(after)
        else:  # a name inside a module: airflow_gpu_dag.core.analysis.weight_rules.clamp_int32
            module, _, name = after.rpartition(".")
            assert hasattr(importlib.import_module(module), name), after
