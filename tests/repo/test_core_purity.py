"""The planning core must import neither Airflow nor Kubernetes (it is shared by the scheduler plugin,
the CLI, the controller and the simulator, and must stay testable on its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import airflow_gpu_dag.core as core

CORE_DIR = Path(core.__file__).parent


def test_core_modules_import_no_airflow_or_kubernetes() -> None:
    modules = sorted(
        "airflow_gpu_dag." + ".".join(p.relative_to(CORE_DIR.parent).with_suffix("").parts)
        for p in CORE_DIR.rglob("*.py")
        if p.stem != "__init__"
    )
    assert "airflow_gpu_dag.core.analysis.critical_path" in modules
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "roots = ('airflow', 'kubernetes', 'kubernetes_asyncio')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in roots)\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", f"core imported: {result.stdout.strip()}"
