"""DAG files the in-process ``dag.test()`` tests load: written to the dags folder of the test
AIRFLOW_HOME (so runs can find them), imported as a module, removed afterwards."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

__all__ = ["dag_module"]


@contextlib.contextmanager
def dag_module(name: str, source: str) -> Iterator[ModuleType]:
    """The module ``name`` made of ``source`` (DAG definitions), with the metadata database set up."""
    from airflow.configuration import conf
    from airflow.utils import db

    db.initdb()
    folder = Path(conf.get("core", "dags_folder"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
        path.unlink(missing_ok=True)
