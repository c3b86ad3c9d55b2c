#!/usr/bin/env bash
# The test command: lint (ruff), types (mypy), then the whole pytest suite, including the slow
# tests that boot a real Airflow (marker airflow_real). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check airflow_gpu_dag tests dags benchmarks
echo "== ruff format --check"; ruff format --check airflow_gpu_dag tests dags benchmarks
echo "== mypy"; mypy
echo "== pytest"; python -m pytest "$@"
