"""Plugin for ``benchmarks/scheduler_loop.py``: the stock weight rule and ours, each call timed.

Each class is the rule it names plus a clock: every ``get_weight`` call appends
``pid wall_time rule seconds dag_id task_id`` to the file named by ``$GPU_DAG_BENCH_TIMING_FILE`` (one
short line per call, ``O_APPEND``, so the scheduler and the api-server can share it). The stock round uses
:class:`TimedDownstreamWeight` (Airflow's default ``downstream`` rule), so both sides pay the same few
microseconds for the clock and the write.

Loaded from this folder as ``[core] plugins_folder``, so the rule strings are
``timed_weights.TimedDownstreamWeight``, ``timed_weights.TimedCriticalPathWeight`` and
``timed_weights.TimedPackingWeight``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from airflow.task.priority_strategy import _DownstreamPriorityWeightStrategy

from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy

TIMING_FILE_ENV = "GPU_DAG_BENCH_TIMING_FILE"


def _record(rule: str, seconds: float, ti: Any) -> None:
    path = os.environ.get(TIMING_FILE_ENV)
    if not path:
        return
    try:
        line = (
            f"{os.getpid()} {time.time():.3f} {rule} {seconds:.9f} "
            f"{getattr(ti, 'dag_id', '?')} {getattr(ti, 'task_id', '?')}\n"
        )
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # never break the scheduler loop


class TimedDownstreamWeight(_DownstreamPriorityWeightStrategy):
    """Airflow's default ``downstream`` rule, timed."""

    def get_weight(self, ti: Any) -> int:
        start = time.perf_counter()
        weight = super().get_weight(ti)
        _record("stock", time.perf_counter() - start, ti)
        return weight


class TimedCriticalPathWeight(CriticalPathPriorityStrategy):
    """``CRITICAL_PATH_WEIGHT_RULE``, timed."""

    def get_weight(self, ti: Any) -> int:
        start = time.perf_counter()
        weight = super().get_weight(ti)
        _record("critical_path", time.perf_counter() - start, ti)
        return weight


class TimedPackingWeight(PackingPriorityStrategy):
    """``PACKING_WEIGHT_RULE``, timed (plans are made in the background: ``[gpu_dag] pools`` is set)."""

    def get_weight(self, ti: Any) -> int:
        start = time.perf_counter()
        weight = super().get_weight(ti)
        _record("packing", time.perf_counter() - start, ti)
        return weight


class SchedulerLoopTimingPlugin(AirflowPlugin):
    name = "gpu_dag_scheduler_loop_timing"
    priority_weight_strategies = [TimedDownstreamWeight, TimedCriticalPathWeight, TimedPackingWeight]
