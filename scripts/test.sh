#!/usr/bin/env bash
# The test command: lint (ruff), types (mypy), then the whole pytest suite, including the slow
# tests that boot a real Airflow (marker airflow_real). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian packages for the browser (UI) and PostgreSQL (stress) tests, and Docker for the smoke run;
# installs only what is missing. apt (Debian's mirror, minutes on a fresh machine) runs alongside the
# Python set-up (PyPI), the linters and the first tests, which need none of it: the tests that do wait
# for it (the system_packages fixture of tests/conftest.py reads GPU_DAG_SYSTEM_DEPS_STATUS, the
# file its exit status is written to). Its output is printed once pytest is done.
deps_pid=""
deps_log=""
deps_status=""
if [ "$(id -u)" = 0 ]; then
  deps_log=$(mktemp)
  deps_status="$deps_log.status"
  (
    rc=0
    bash scripts/ci_system_deps.sh >"$deps_log" 2>&1 || rc=$?
    echo "$rc" >"$deps_status.tmp" && mv "$deps_status.tmp" "$deps_status"
    exit "$rc"
  ) &
  deps_pid=$!
  export GPU_DAG_SYSTEM_DEPS_STATUS="$deps_status" GPU_DAG_SYSTEM_DEPS_LOG="$deps_log"
else
  echo "test.sh: not root, skipping scripts/ci_system_deps.sh (postgresql, chromium must be installed)"
fi
system_deps() {
  [ -n "$deps_pid" ] || return 0
  local rc=0
  wait "$deps_pid" || rc=$?
  echo "== scripts/ci_system_deps.sh (exit $rc)"
  cat "$deps_log"
  rm -f "$deps_log" "$deps_status"
  deps_pid=""
  return "$rc"
}
# on an early exit (a lint error) apt is left to finish: a dpkg run cut short leaves the system broken
trap 'if [ -n "$deps_pid" ]; then wait "$deps_pid" || true; cat "$deps_log"; rm -f "$deps_log" "$deps_status"; fi' EXIT
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check airflow_gpu_dag tests dags benchmarks
echo "== ruff format --check"; ruff format --check airflow_gpu_dag tests dags benchmarks
echo "== mypy"; mypy
# Two workers, one test file each at a time (see tests/conftest.py); GPU_DAG_TEST_WORKERS=0 runs serially.
echo "== pytest"
rc=0
python -m pytest -n "${GPU_DAG_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@" || rc=$?
deps_rc=0
system_deps || deps_rc=$?
if [ "$rc" = 0 ] && [ "$deps_rc" != 0 ]; then
  echo "test.sh: scripts/ci_system_deps.sh failed (exit $deps_rc)" >&2
  rc=$deps_rc
fi
exit "$rc"
