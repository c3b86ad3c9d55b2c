"""Shared test set-up: every test process gets its own throwaway AIRFLOW_HOME, so importing Airflow never
touches ~/airflow (the real-Airflow harness makes its own home per boot), and ``benchmarks/`` is on
``sys.path`` so tests import the benchmark workloads as the benchmark scripts do (``import workloads``).

``scripts/test.sh`` runs the suite on two pytest-xdist workers, one test file per work unit
(``--dist loadfile --no-loadscope-reorder``: handed out in collection order): the modules that boot a
real Airflow spend most of their time waiting on the scheduler, so two of them, or one and the unit
tests, share the machine well. The files that boot Airflow are handed out first, the longest of them
first (``LONGEST_FIRST``, see ``pytest_collection_modifyitems``), so the two workers end together and
the short unit-test files fill the gaps at the end instead of a long real-Airflow module starting last.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

#: This process's scratch folder, made again in each pytest process (xdist workers inherit the
#: controller's environment) and removed when it ends. Test modules put their module-level temporary
#: folders in it (``tempfile.mkdtemp(dir=os.environ.get(TESTS_TMP))``), so a run leaves no folders in
#: /tmp, even for modules that were collected but not run.
TESTS_TMP = "GPU_DAG_TESTS_TMP"
os.environ[TESTS_TMP] = tempfile.mkdtemp(prefix="gpu-dag-tests-")
atexit.register(shutil.rmtree, os.environ[TESTS_TMP], True)
# An AIRFLOW_HOME set by the user is kept. The one made here is this process's own, so two workers
# never share an Airflow home.
_OURS = "GPU_DAG_TESTS_HOME"
if "AIRFLOW_HOME" not in os.environ or os.environ.get("AIRFLOW_HOME") == os.environ.get(_OURS):
    os.environ["AIRFLOW_HOME"] = os.environ[_OURS] = os.path.join(os.environ[TESTS_TMP], "airflow-home")
    os.makedirs(os.environ["AIRFLOW_HOME"])
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# The tests describe their hosts' GPUs (static inventories): a CUDA_VISIBLE_DEVICES of the machine that
# runs them (a GPU box) would narrow what a worker may lease (airflow_gpu_dag.gpu.inventory.visible_to).
os.environ.pop("CUDA_VISIBLE_DEVICES", None)
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")


#: The real-Airflow files that take longest on CI, longest first (a CI run's ``--durations``, in
#: seconds on the 2-core CI machine with the other worker busy: the Docker smoke run about 300, chaos
#: 190, authoring 180, stress 130, priority 110, explain 100, edges 100, example pipelines 70,
#: multi-DAG 65). Longest-processing-time-first: the two workers take them in this order, each the
#: next one when it is free, and end within the length of a short file of each other. One exception:
#: the two files handed out first need no system package (``system_packages``), so that they run
#: while ``scripts/test.sh`` is still installing them. The other real-Airflow files follow in file
#: order, then the unit tests. Keep it roughly right when a file grows or shrinks by a minute; an
#: unknown name here is an error (a renamed file).
LONGEST_FIRST = (
    "tests/integration/test_authoring_real.py",
    "tests/integration/test_priority_real_scheduler.py",
    "tests/integration/test_docker_stack.py",
    "tests/integration/test_chaos_real.py",
    "tests/integration/test_stress_real.py",
    "tests/integration/test_explain_real.py",
    "tests/integration/test_edges_real.py",
    "tests/integration/test_example_pipelines_real.py",
    "tests/integration/test_multi_dag_real.py",
)
_ROOT = Path(__file__).resolve().parents[1]


#: A file whose work ``scripts/test.sh`` runs beside the workers when it sets this variable (the Docker
#: smoke run's lane, ``GPU_DAG_SMOKE_RESULT``): the file only reads the lane's result, so it is handed
#: out last, when the lane is long done, instead of holding a worker while it waits.
LANE_FILES = {"GPU_DAG_SMOKE_RESULT": "tests/integration/test_docker_stack.py"}


def _handout_rank(item: pytest.Item) -> tuple[int, int]:
    """(0: a real-Airflow test, 1: any other, 2: a lane's reader; place in LONGEST_FIRST or after it)."""
    path = item.path.resolve()
    name = path.relative_to(_ROOT).as_posix() if path.is_relative_to(_ROOT) else ""
    if any(os.environ.get(var) and name == file for var, file in LANE_FILES.items()):
        return 2, 0
    if item.get_closest_marker("airflow_real") is None:
        return 1, 0
    return 0, LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this process's scratch folder (the atexit hook is the fallback)."""
    shutil.rmtree(os.environ[TESTS_TMP], ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that boot a real Airflow first, the files of ``LONGEST_FIRST`` in its order (a stable
    sort: otherwise file order and test order are kept)."""
    missing = [name for name in (*LONGEST_FIRST, *LANE_FILES.values()) if not (_ROOT / name).is_file()]
    if missing:
        raise pytest.UsageError(
            f"tests/conftest.py LONGEST_FIRST or LANE_FILES names files that do not exist: {missing}"
        )
    items.sort(key=_handout_rank)


#: Written by ``scripts/test.sh``, which installs the system packages (``scripts/ci_system_deps.sh``:
#: PostgreSQL, Chromium, Docker) while the tests that need none of them run: the path of a file that
#: holds the script's exit status once it is done, and the path of its log.
SYSTEM_DEPS_STATUS = "GPU_DAG_SYSTEM_DEPS_STATUS"
SYSTEM_DEPS_LOG = "GPU_DAG_SYSTEM_DEPS_LOG"
#: How long a test waits for them: far more than a fresh CI machine's apt needs (about 4 minutes).
SYSTEM_DEPS_TIMEOUT_S = 1800.0


@pytest.fixture(scope="session")
def system_packages() -> None:
    """Wait until the system packages are installed, for a test that needs PostgreSQL, Chromium or
    Docker. ``scripts/test.sh`` installs them alongside the first tests instead of before pytest (apt
    takes minutes on a fresh machine); run any other way (no ``GPU_DAG_SYSTEM_DEPS_STATUS``), this
    waits for nothing. A failed install fails the test that waited, with the log's path."""
    status = os.environ.get(SYSTEM_DEPS_STATUS)
    if not status:
        return
    path, deadline = Path(status), time.monotonic() + SYSTEM_DEPS_TIMEOUT_S
    while not path.is_file():
        if time.monotonic() > deadline:
            pytest.fail(f"scripts/ci_system_deps.sh still running after {SYSTEM_DEPS_TIMEOUT_S:.0f} s")
        time.sleep(1.0)
    code = path.read_text().strip()
    if code != "0":
        log = os.environ.get(SYSTEM_DEPS_LOG, "(no log)")
        pytest.fail(f"scripts/ci_system_deps.sh failed (exit {code}); its log: {log}")


@pytest.fixture(autouse=True)
def _trigger_times_not_bounded_by_the_calendar(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests weigh runs whose ids carry fixed dates (``manual__2026-11-30T12:00:00+00:00``) and check
    keys against them; the strategy keeps trigger times within the last 30 days of the wall clock
    (``airflow_gpu_dag.priority.trigger.MAX_RUN_AGE``), so those keys would change as the calendar moves
    on. Tests of that bound set it back and give the trigger times a fixed clock."""
    monkeypatch.setattr("airflow_gpu_dag.priority.trigger.MAX_RUN_AGE", math.inf)
