"""Tests of ``airflow_gpu_dag.cli.common``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Every test runs with no configured pools and wide lines.
pytestmark = pytest.mark.usefixtures("_no_configured_pools")


def test_a_reader_that_stops_early_is_not_an_error(tmp_path: Path) -> None:
    """`airflow gpu-dag plan ... -o plain | head -1` ended in a BrokenPipeError traceback."""
    script = tmp_path / "pipe.py"
    script.write_text(
        "import argparse\n"
        "from airflow_gpu_dag.cli.common import quiet\n"
        "@quiet\n"
        "def command(args):\n"
        "    for i in range(200_000):\n"
        "        print('row', i)\n"
        "command(argparse.Namespace(verbose=True))\n"
    )
    result = subprocess.run(
        f"{sys.executable} {script} | head -1", shell=True, capture_output=True, text=True, check=False
    )
    assert result.stdout == "row 0\n"
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
