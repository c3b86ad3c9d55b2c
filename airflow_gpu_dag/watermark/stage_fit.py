"""Does ``[gpu_dag] stage_length`` fit the pool the controller sees?

Every time of the cross-DAG objective is a multiple of one training stage (``[gpu_dag]
stage_length``, docs/priority.md "The stage length"); on a pool of another time scale ``fair`` loses to
stock Airflow. ``airflow gpu-dag lint`` checks the DAG files it is given; the controller sees the live
pool, every DAG that really runs there. Each tick it hands :class:`StageFitWatch` the waiting tasks'
estimated durations (learned, hinted or the default, as the reservation uses them), and the watch keeps
the longest. It says so (a warning, logged once per process) when the longest is over three stages at
once, or still under a sixth of a stage after one whole stage of watching (a pool is not judged short
by its first hour); :func:`~airflow_gpu_dag.core.policy.objective.stage_length_mismatch` decides.

It only reports: the stage length stays the deployment's setting. The longest is kept in memory, so a
restarted controller watches a stage again before it calls a pool short.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from airflow_gpu_dag.core.model.resources import format_duration
from airflow_gpu_dag.core.policy.admission import ReadyTask
from airflow_gpu_dag.core.policy.objective import STAGE_FIT, stage_length_mismatch
from airflow_gpu_dag.log_once import LogOnce

log = logging.getLogger(__name__)

__all__ = ["StageFitWatch"]


class StageFitWatch:
    """The longest GPU task the controller has seen wait, against stages of ``length`` seconds."""

    def __init__(self, length: float, logger: LogOnce | None = None) -> None:
        self.length = length
        self.longest: tuple[float, str] | None = None  # (duration, task key)
        self.since: float | None = None
        self._log = logger or LogOnce(log)

    def observe(self, now: float, tasks: Iterable[ReadyTask]) -> str | None:
        """Take this tick's waiting ``tasks`` (ready or pending, any pool the controller sizes); the
        mismatch when there is one to say (logged once as a warning), else None."""
        if self.since is None:
            self.since = now
        for task in tasks:
            measured = task.slots > 0 and math.isfinite(task.duration) and task.duration > 0
            if measured and (self.longest is None or task.duration > self.longest[0]):
                self.longest = (task.duration, task.key)
        problem = self.problem(now)
        if problem is not None:
            self._log.warning("stage-length-mismatch", "%s", problem)
        return problem

    def problem(self, now: float) -> str | None:
        """The mismatch with the longest task seen so far: at once when it is over three stages; when
        it is under a sixth of a stage, only once the watch has lasted one stage."""
        if self.longest is None or self.since is None:
            return None
        duration, key = self.longest
        problem = stage_length_mismatch(self.length, duration)
        if problem is None:
            return None
        low, _ = STAGE_FIT
        if duration < low * self.length and now - self.since < self.length:
            return None  # too soon to call the pool short
        watched = format_duration(max(0.0, now - self.since))
        return (
            f"[gpu_dag] stage_length is {format_duration(self.length)} and the longest GPU task seen "
            f"waiting in {watched} is {key} ({format_duration(duration)}), {problem}. Set "
            f"[gpu_dag] stage_length to one training stage of this pool (lint: stage-length-mismatch; "
            "docs/priority.md, 'The stage length')."
        )
