"""Plugin for the stress test: the critical-path priority rule, timed.

:class:`TimedCriticalPathPriorityStrategy` is :class:`CriticalPathPriorityStrategy` plus a clock:
every ``get_weight`` call appends ``pid seconds cache_hit task_id`` to the file named by
``$GPU_DAG_STRESS_TIMING_FILE`` (one short line per call, ``O_APPEND``, so the scheduler,
api-server and dag-processor can share it). The stress test and ``benchmarks/stress.py`` sum it up
to report how much scheduler time the priority rule costs.

Loaded from this folder as ``[core] plugins_folder``, so its rule string is
``stress_timed_priority.TimedCriticalPathPriorityStrategy``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy

TIMING_FILE_ENV = "GPU_DAG_STRESS_TIMING_FILE"


class TimedCriticalPathPriorityStrategy(CriticalPathPriorityStrategy):
    """Critical-path weight; records how long each call took."""

    def get_weight(self, ti: Any) -> int:
        start = time.perf_counter()
        builds = self._weights.basis_builds  # a cache miss builds the DAG object's basis (its analysis)
        weight = super().get_weight(ti)
        elapsed = time.perf_counter() - start
        hit = self._weights.basis_builds == builds
        path = os.environ.get(TIMING_FILE_ENV)
        if path:
            try:
                line = f"{os.getpid()} {elapsed:.9f} {int(hit)} {getattr(ti, 'task_id', '?')}\n"
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
            except OSError:
                pass  # never break the scheduler loop
        return weight


class StressTimingPlugin(AirflowPlugin):
    name = "gpu_dag_stress_timing"
    priority_weight_strategies = [TimedCriticalPathPriorityStrategy]
