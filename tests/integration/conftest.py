"""Fixtures for tests that boot a real Airflow (marker ``airflow_real``).

One boot per test module: a module sets what it needs as module attributes and uses the
``airflow_cluster`` fixture::

    AIRFLOW_DAGS = "priority"            # folder under tests/integration/dags/ (required)
    AIRFLOW_POOLS = {"gpu_pool": 1}       # optional
    AIRFLOW_ENV = {"AIRFLOW__GPU_DAG__POOLS": '{"gpu_pool": 1}'}  # optional
    AIRFLOW_TRIGGERER = True              # optional, default False

    pytestmark = pytest.mark.airflow_real

    def test_something(airflow_cluster):
        run_id = airflow_cluster.trigger("my_dag")
        ...

Or build your own module-scoped fixture with ``AirflowCluster(...)`` directly.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from airflow_gpu_dag.testing import AirflowCluster

#: tests/integration/dags/ — one sub-folder per topic so each boot parses only its own DAGs.
DAGS_ROOT = Path(__file__).parent / "dags"
#: Seconds between SIGTERM and SIGKILL when a test's cluster stops (``AirflowCluster(stop_grace=)``,
#: 15 s by default). The cluster's home is removed after the stop, so no component needs to stop
#: gracefully, and on a loaded 2-core machine the triggerer took 12 s and the api-server 9.5 s to exit
#: on SIGTERM: every module would wait that long. Descendants are killed all the same.
STOP_GRACE_S = 2.0


@pytest.fixture(scope="module")
def airflow_cluster(request: pytest.FixtureRequest) -> Iterator[AirflowCluster]:
    """A running cluster for the whole test module, configured by the module's ``AIRFLOW_*``
    attributes (see the module docstring)."""
    module = request.module
    topic = getattr(module, "AIRFLOW_DAGS", None)
    if not topic:
        raise pytest.UsageError(
            f"{module.__name__} uses the airflow_cluster fixture but sets no AIRFLOW_DAGS; "
            'add e.g. AIRFLOW_DAGS = "my_topic" (a folder under tests/integration/dags/).'
        )
    folder = DAGS_ROOT / topic
    with AirflowCluster(
        folder,
        pools=getattr(module, "AIRFLOW_POOLS", None),
        env=getattr(module, "AIRFLOW_ENV", None),
        triggerer=bool(getattr(module, "AIRFLOW_TRIGGERER", False)),
        stop_grace=STOP_GRACE_S,
    ) as cluster:
        yield cluster


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that used ``airflow_cluster`` (directly or through another fixture) reports the
    tails of the component logs too: the scheduler's view of what went wrong, kept in the CI output
    even though the cluster's home is removed at the end of the module."""
    report: pytest.TestReport = yield
    cluster = getattr(item, "funcargs", {}).get("airflow_cluster")
    if report.failed and call.when == "call" and isinstance(cluster, AirflowCluster):
        report.sections.append(("airflow component logs (last lines)", cluster.log_tails()))
    return report
