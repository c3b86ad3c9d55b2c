#!/usr/bin/env bash
# Creates .venv (Python 3.11) and installs the provider with its pinned dependencies.
# Idempotent: re-running only installs what changed. Used by demo.sh, test.sh and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $PY"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing airflow-gpu-dag and pinned dependencies (constraints.txt)"
  # uv (from PyPI, pinned) installs the same pinned set as pip, downloading in parallel: 49 s instead
  # of 164 s on the 2-core machine with empty caches. It is removed afterwards, so .venv holds the
  # packages pip would have put there; pip is the fallback. --native-tls: the system CA store, as pip.
  .venv/bin/python -m pip install -q "pip==26.3" "uv==0.13.9"
  if ! .venv/bin/uv pip install -q --native-tls --python .venv/bin/python -c constraints.txt -e ".[dev]"; then
    echo "bootstrap: uv failed, installing with pip"
    .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
  fi
  .venv/bin/python -m pip uninstall -q -y uv
  rm -f .venv/.installed-*
  touch "$stamp"
fi
