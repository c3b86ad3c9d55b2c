#!/usr/bin/env bash
# The test command: lint (ruff), types (mypy), then the whole pytest suite, including the slow
# tests that boot a real Airflow (marker airflow_real). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian packages for the browser (UI) and PostgreSQL (stress) tests, and Docker for the smoke run;
# installs only what is missing. apt (Debian's mirror) runs alongside the Python set-up (PyPI) and
# the linters, which need none of it; its output is printed once it is done, before pytest.
deps_pid=""
deps_log=""
if [ "$(id -u)" = 0 ]; then
  deps_log=$(mktemp)
  bash scripts/ci_system_deps.sh >"$deps_log" 2>&1 &
  deps_pid=$!
else
  echo "test.sh: not root, skipping scripts/ci_system_deps.sh (postgresql, chromium must be installed)"
fi
system_deps() {
  [ -n "$deps_pid" ] || return 0
  local rc=0
  wait "$deps_pid" || rc=$?
  echo "== scripts/ci_system_deps.sh (exit $rc)"
  cat "$deps_log"
  rm -f "$deps_log"
  deps_pid=""
  return "$rc"
}
# on an early exit (a lint error) apt is left to finish: a dpkg run cut short leaves the system broken
trap 'if [ -n "$deps_pid" ]; then wait "$deps_pid" || true; cat "$deps_log"; rm -f "$deps_log"; fi' EXIT
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check airflow_gpu_dag tests dags benchmarks
echo "== ruff format --check"; ruff format --check airflow_gpu_dag tests dags benchmarks
echo "== mypy"; mypy
system_deps
# Two workers, one test file each at a time (see tests/conftest.py); GPU_DAG_TEST_WORKERS=0 runs serially.
echo "== pytest"
python -m pytest -n "${GPU_DAG_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
