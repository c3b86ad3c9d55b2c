#!/usr/bin/env bash
# The test command: lint (ruff), types (mypy), then the whole pytest suite, including the slow
# tests that boot a real Airflow (marker airflow_real). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# Debian packages for the browser (UI) and PostgreSQL (stress) tests; installs only what is missing.
if [ "$(id -u)" = 0 ]; then
  bash scripts/ci_system_deps.sh
else
  echo "test.sh: not root, skipping scripts/ci_system_deps.sh (postgresql, chromium must be installed)"
fi
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check airflow_gpu_dag tests dags benchmarks
echo "== ruff format --check"; ruff format --check airflow_gpu_dag tests dags benchmarks
echo "== mypy"; mypy
# Two workers, one test file each at a time (see tests/conftest.py); GPU_DAG_TEST_WORKERS=0 runs serially.
echo "== pytest"
python -m pytest -n "${GPU_DAG_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
