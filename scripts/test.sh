#!/usr/bin/env bash
# The test command: lint (ruff), types (mypy, run beside pytest), and the whole pytest suite, including the slow
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
# (nor is a smoke lane stopped: its private dockerd must be stopped by the script that started it)
trap 'if [ -n "$deps_pid" ]; then wait "$deps_pid" || true; cat "$deps_log"; rm -f "$deps_log" "$deps_status"; fi; if [ -n "${smoke_pid:-}" ]; then wait "$smoke_pid" || true; rm -rf "$smoke_dir"; fi' EXIT
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check airflow_gpu_dag tests dags benchmarks
echo "== ruff format --check"; ruff format --check airflow_gpu_dag tests dags benchmarks
# The Docker Compose smoke run (tests/integration/test_docker_stack.py: about 6 minutes cold, mostly
# image builds and healthchecks) runs as a lane of its own beside the two pytest workers, from the
# moment apt is done, when the whole suite runs as root; the test module, handed out last, reads its
# result (GPU_DAG_SMOKE_RESULT) instead of running it on a worker. GPU_DAG_SMOKE_LANE=0 keeps it on a worker.
smoke_pid=""
smoke_dir=""
if [ -n "$deps_pid" ] && [ "$#" = 0 ] && [ "${GPU_DAG_SMOKE_LANE:-1}" != 0 ]; then
  smoke_dir=$(mktemp -d)
  (
    waited=0
    while [ ! -f "$deps_status" ] && [ "$waited" -lt 3600 ]; do sleep 2; waited=$((waited + 2)); done
    rc=0
    if [ "$(cat "$deps_status" 2>/dev/null)" = 0 ]; then
      GPU_DAG_SMOKE_OWN_DAEMON=1 python scripts/docker_smoke.py --summary "$smoke_dir/summary.json" \
        >"$smoke_dir/smoke.log" 2>&1 || rc=$?
    else
      rc=78  # the system packages failed: the test fails on that (system_packages) before reading this
    fi
    echo "$rc" >"$smoke_dir/status.tmp" && mv "$smoke_dir/status.tmp" "$smoke_dir/status"
  ) &
  smoke_pid=$!
  export GPU_DAG_SMOKE_RESULT="$smoke_dir"
fi
# mypy (about 40 s of one core with an empty cache) checks while pytest runs: the real-Airflow tests
# mostly wait on their schedulers, so it costs them little, and its verdict and output come after pytest.
mypy_log=$(mktemp)
echo "== mypy (in the background, output after pytest)"
mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
# Two workers, one test file each at a time (see tests/conftest.py); GPU_DAG_TEST_WORKERS=0 runs serially.
echo "== pytest"
rc=0
python -m pytest -n "${GPU_DAG_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@" || rc=$?
if [ -n "$smoke_pid" ]; then
  wait "$smoke_pid" || true
  echo "== docker smoke lane (exit $(cat "$smoke_dir/status" 2>/dev/null || echo '?'))"
  rm -rf "$smoke_dir"
  smoke_pid=""
fi
mypy_rc=0
wait "$mypy_pid" || mypy_rc=$?
echo "== mypy (exit $mypy_rc)"
cat "$mypy_log"
rm -f "$mypy_log"
if [ "$rc" = 0 ] && [ "$mypy_rc" != 0 ]; then
  rc=$mypy_rc
fi
deps_rc=0
system_deps || deps_rc=$?
if [ "$rc" = 0 ] && [ "$deps_rc" != 0 ]; then
  echo "test.sh: scripts/ci_system_deps.sh failed (exit $deps_rc)" >&2
  rc=$deps_rc
fi
exit "$rc"
