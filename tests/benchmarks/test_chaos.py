"""The pure part of the chaos benchmark's GPU-task fault (``benchmarks/chaos.py``; the round itself boots
Airflow: tests/integration/test_chaos_real.py): which lease the fault kills. The example DAGs retry a
task once, so a retry and a task already hit are never chosen (a CI round failed a run by killing the
retry of a task whose first try the previous, "missed", kill had ended)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.scripts import load_script

chaos = load_script("benchmarks/chaos.py", "gpu_dag_benchmark_chaos_unit")


def _lease(task: str, acquired: float, pid: int, try_number: int = 1) -> dict[str, Any]:
    return {
        "holder": {"pid": pid},
        "acquired_at": acquired,
        "devices": [0],
        "owner": {"dag_id": "d", "run_id": "r", "task_id": task, "map_index": -1, "try_number": try_number},
    }


def _table(tmp_path: Path, leases: dict[str, dict[str, Any]]) -> Path:
    (tmp_path / "leases.json").write_text(json.dumps({"leases": leases}))
    return tmp_path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


class _NoDatabase:
    def __enter__(self) -> str:
        return "sqlite://"

    def __exit__(self, *_: object) -> None:
        return None


def test_the_youngest_live_first_try_is_chosen(tmp_path: Path) -> None:
    alive = os.getpid()
    lease_dir = _table(
        tmp_path,
        {
            "old": _lease("a", 10.0, alive),
            "young": _lease("b", 20.0, alive),
            "dead": _lease("c", 30.0, _dead_pid()),
        },
    )
    found = chaos._live_gpu_lease(lease_dir)
    assert found is not None and found[0] == "young"


def test_a_retry_is_never_chosen(tmp_path: Path) -> None:
    alive = os.getpid()
    lease_dir = _table(tmp_path, {"first": _lease("a", 10.0, alive), "retry": _lease("b", 20.0, alive, 2)})
    found = chaos._live_gpu_lease(lease_dir)
    assert found is not None and found[0] == "first"
    only_retry = _table(tmp_path, {"retry": _lease("b", 20.0, alive, 2)})
    assert chaos._live_gpu_lease(only_retry) is None


def test_a_task_already_hit_is_never_chosen_again(tmp_path: Path) -> None:
    alive = os.getpid()
    # the same task instance under a new lease (its try ended by a kill that missed the old lease)
    lease_dir = _table(tmp_path, {"again": _lease("a", 20.0, alive), "other": _lease("b", 10.0, alive)})
    hit = {chaos._task_key(_lease("a", 0.0, alive))}
    found = chaos._live_gpu_lease(lease_dir, hit)
    assert found is not None and found[0] == "other"


def test_no_table_means_no_lease(tmp_path: Path) -> None:
    assert chaos._live_gpu_lease(tmp_path) is None


def test_dag_copies_take_the_rounds_retries(tmp_path: Path) -> None:
    chaos.chaos_cluster(tmp_path / "own", chaos.ChaosSettings(), None)  # unstarted: nothing boots
    chaos.chaos_cluster(tmp_path / "more", chaos.ChaosSettings(retries=3), None)
    for name in ("llm_pipeline.py", "hparam_sweep.py"):
        assert '"retries": 1}' in (tmp_path / "own" / "dags" / name).read_text()
        more = (tmp_path / "more" / "dags" / name).read_text()
        assert '"retries": 3}' in more and '"retries": 1}' not in more


def test_the_command_line_can_run_the_ci_rounds_shape(monkeypatch: Any) -> None:
    """--trigger-spread, --hold-for-last-fault and --retries reach the round (the CI round's settings
    at full size; docs/benchmarks/chaos.md#the-ci-round)."""
    seen: list[Any] = []

    class _Stop(Exception):
        pass

    def fake_round(settings: Any, *_a: Any, **_k: Any) -> Any:
        seen.append(settings)
        raise _Stop

    monkeypatch.setattr(chaos, "run_round", fake_round)
    monkeypatch.setattr(chaos, "database", lambda _sqlite: _NoDatabase())
    argv = ["--rounds", "chaos", "--trigger-spread", "75", "--hold-for-last-fault", "1", "--retries", "3"]
    with pytest.raises(_Stop):
        chaos.main(argv)
    (settings,) = seen
    assert (settings.trigger_spread, settings.hold_for_last_fault, settings.retries) == (75.0, 1, 3)
    seen.clear()
    with pytest.raises(_Stop):
        chaos.main(["--rounds", "chaos"])
    assert (seen[0].trigger_spread, seen[0].hold_for_last_fault, seen[0].retries) == (0.0, 0, None)
