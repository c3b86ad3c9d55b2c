"""Stress on the real scheduler: concurrent DAG runs of GPU tasks, PostgreSQL metadata DB.

The CI-sized version of ``benchmarks/stress.py`` (which holds the shared code and runs the article's
100 concurrent runs; figures in docs/benchmarks/stress.md): 40 runs by default, so that the whole CI
stays within its time budget on 2 cores; ``GPU_DAG_STRESS_RUNS=100`` runs the full size as a test.
Each task instance costs about a second of CPU to start, so the run time grows with the count while
the checks do not change: 40 runs are 120 slot-tasks against a 4-slot pool, 30 times its size.

One boot for the module:

- a throwaway PostgreSQL from ``scripts/postgres.sh`` (Debian's ``postgresql``, installed by
  ``scripts/ci_system_deps.sh``), and Airflow with the LocalExecutor on it;
- ``tests/integration/dags/stress/``: ``stress_gpu`` (``train`` 2 GPU slots -> ``evaluate`` 1 GPU
  slot, each sleeps ~1 s, critical-path priority timed by the plugin in
  ``tests/integration/plugins/stress/``) and ``stress_cycle.py``, a cyclic DAG submitted alongside;
- one GPU pool ``stress_gpu`` of 4 slots, far below the demand of the runs (3 slots each).

Checked: every run completes (no deadlock), the pool is never oversubscribed (from task start/end
times and from the pool as sampled during the run), the cyclic DAG is an import error while the
others run, the critical-path weights were applied, and the time spent in the priority rule is
reported.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from airflow_gpu_dag.core.policy.objective import DEFAULT_OBJECTIVE, OBJECTIVES
from tests.scripts import load_script

RUNS = int(os.environ.get("GPU_DAG_STRESS_RUNS", "40"))
POOL_SLOTS = 4
PARALLELISM = 8
SLEEP_S = 1.0


def _load_stress_module() -> ModuleType:
    return load_script("benchmarks/stress.py", "gpu_dag_benchmark_stress")


stress = _load_stress_module()


@pytest.fixture(scope="module")
def stress_round(system_packages: None) -> Iterator[tuple[Any, Any]]:
    """Boot PostgreSQL + Airflow once, trigger ``RUNS`` runs at once, yield ``(cluster, result)``."""
    with (
        tempfile.TemporaryDirectory(prefix="gpu-dag-stress-") as tmp,
        stress.throwaway_postgres() as db_url,
        stress.stress_cluster(
            db_url=db_url,
            timing_file=Path(tmp) / "get_weight.txt",
            pool_slots=POOL_SLOTS,
            parallelism=PARALLELISM,
            sleep_s=SLEEP_S,
        ) as cluster,
    ):
        result = stress.run_stress(cluster, runs=RUNS, timing_file=Path(tmp) / "get_weight.txt", timeout=1200)
        print("\n" + stress.format_report(result))
        yield cluster, result


@pytest.mark.airflow_real
def test_runs_on_postgresql(stress_round: tuple[Any, Any]) -> None:
    cluster, result = stress_round
    assert result.database == "postgresql+psycopg2"
    assert cluster.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    assert cluster.health()["metadatabase"]["status"] == "healthy"


@pytest.mark.airflow_real
def test_every_run_completes_without_deadlock(stress_round: tuple[Any, Any]) -> None:
    _, result = stress_round
    assert result.run_states == {"success": RUNS}
    assert result.task_instances == 2 * RUNS
    assert result.task_states == {"success": 2 * RUNS}


@pytest.mark.airflow_real
def test_pool_watermark_is_never_exceeded(stress_round: tuple[Any, Any]) -> None:
    _, result = stress_round
    assert result.pool_slots == POOL_SLOTS
    assert result.pool_peak_from_times <= POOL_SLOTS, "GPU pool oversubscribed (task start/end times)"
    assert result.pool_peak_sampled <= POOL_SLOTS, "GPU pool oversubscribed (occupied slots over REST)"
    # The workload really contended for the pool (otherwise the check above proves nothing).
    assert result.pool_peak_from_times >= 2
    assert result.pool_peak_sampled >= 2


@pytest.mark.airflow_real
def test_cyclic_dag_is_rejected_while_the_others_run(stress_round: tuple[Any, Any]) -> None:
    cluster, result = stress_round
    assert set(result.import_errors) == {"stress_cycle.py"}
    message = result.import_errors["stress_cycle.py"]
    assert "Cycle detected" in message and "stress_cycle" in message
    assert cluster.api("GET", "/dags/stress_cycle", check=False).status_code == 404
    assert result.run_states == {"success": RUNS}


@pytest.mark.airflow_real
def test_critical_path_weights_were_applied(stress_round: tuple[Any, Any]) -> None:
    cluster, _ = stress_round
    # every page: one page of 50 (the old check) could hold a run's train without its evaluate
    tis = stress.list_pages(cluster, "/dags/stress_gpu/dagRuns/~/taskInstances", "task_instances")
    keys: dict[str, dict[str, int]] = {}
    for ti in tis:
        keys.setdefault(ti["dag_run_id"], {})[ti["task_id"]] = ti["priority_weight"]
    assert len(keys) == RUNS and all(set(run) == {"train", "evaluate"} for run in keys.values()), keys
    # cross-DAG keys: within a run they differ by c (the default objective's chain) x the remaining
    # critical paths, train: 1 h + evaluate 20 min downstream = 4800 s; evaluate: 20 min = 1200 s, and
    # U x the descendant leads (fair: train has evaluate below it, 1; evaluate 0)
    objective = OBJECTIVES[DEFAULT_OBJECTIVE]
    gap = round(objective.key(0.0, 0.0, 1200.0, 0) - objective.key(0.0, 0.0, 4800.0, 1))
    assert all(run["train"] - run["evaluate"] == gap for run in keys.values()), keys


@pytest.mark.airflow_real
def test_priority_rule_time_is_reported(stress_round: tuple[Any, Any], record_property: Any) -> None:
    _, result = stress_round
    timings = result.timings
    record_property("get_weight_calls", timings.calls)
    record_property("get_weight_total_ms", round(timings.total_s * 1e3, 3))
    record_property("get_weight_mean_us", round(timings.mean_us, 1))
    # Every task instance got its weight from our rule at least once, in a known component.
    assert timings.calls >= 2 * RUNS
    assert timings.cache_misses >= 1
    # the analysis is cached per DAG object: most calls are look-ups (the plugin counts the analyses)
    assert timings.cache_misses < timings.calls, timings
    assert set(timings.by_component) <= {"api-server", "scheduler", "dag-processor"}
    assert timings.total_s > 0


# -------------------------------------------------------------------- the analysis itself (no Airflow)


def _ti(start: str, end: str | None, slots: int, pool: str = "stress_gpu") -> dict[str, Any]:
    return {
        "pool": pool,
        "pool_slots": slots,
        "start_date": f"2026-11-30T00:00:{start}Z",
        "end_date": f"2026-11-30T00:00:{end}Z" if end else None,
    }


def test_pool_peak_counts_overlapping_slots() -> None:
    tis = [_ti("00", "10", 2), _ti("05", "15", 1), _ti("09", "12", 1), _ti("00", "30", 5, pool="other")]
    assert stress.pool_peak(tis, "stress_gpu")[0] == 4  # 2 + 1 + 1 during [09, 10)


def test_pool_peak_back_to_back_tasks_do_not_overlap() -> None:
    tis = [_ti("00", "10", 2), _ti("10", "20", 2), _ti("20", "30", 2)]
    assert stress.pool_peak(tis, "stress_gpu")[0] == 2


def test_pool_peak_counts_tasks_still_running_and_skips_unstarted() -> None:
    tis = [
        _ti("00", None, 3),
        _ti("50", "55", 2),
        {"pool": "stress_gpu", "pool_slots": 9, "start_date": None},
    ]
    assert stress.pool_peak(tis, "stress_gpu")[0] == 5


def test_read_timings_sums_per_component(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("10 0.000200 0 train\n10 0.000004 1 evaluate\n20 0.000100 0 train\n")
    summary = stress.read_timings(path, {10: "api-server", 20: "scheduler"})
    assert (summary.calls, summary.cache_misses) == (3, 2)
    assert summary.total_s == pytest.approx(0.000304)
    assert summary.by_component["api-server"]["calls"] == 2
    assert summary.by_component["scheduler"]["total_s"] == pytest.approx(0.0001)
    assert summary.hit_mean_us == pytest.approx(4.0)
    assert stress.read_timings(tmp_path / "missing.txt", {}).calls == 0
