#!/usr/bin/env bash
# The demo: installs everything (scripts/bootstrap.sh), boots a real Airflow 3 in a temporary
# AIRFLOW_HOME, prints the critical-path plan of dags/example_critical_path.py, runs it and prints
# what actually happened. Exit status 0 = the run succeeded. Extra arguments go to the demo
# (see: .venv/bin/python scripts/demo.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python scripts/demo.py "$@"
