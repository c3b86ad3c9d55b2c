"""Load a script of this repository (``benchmarks/``, ``scripts/``, ``dags/``: folders that are not
packages) as a module, for tests of its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The repository root.
ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path | str, name: str, *, register: bool = True) -> ModuleType:
    """Execute the file at ``path`` (absolute, or relative to the repository root) as module ``name``.

    ``register`` puts the module in ``sys.modules`` before it runs, which dataclasses and pickling look
    their module up in; a module already registered under ``name`` is replaced.
    """
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
