"""A problem found in a DAG, with the task it concerns and the fix: what every check returns.

Pure: no Airflow. :mod:`airflow_gpu_dag.core.analysis.validation` (graph checks) and
:mod:`airflow_gpu_dag.core.analysis.gpu_requests` (GPU request checks) return :class:`Finding` objects; the
cluster policy, ``airflow gpu-dag lint`` and the GPU operators report them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["ERROR", "WARNING", "Finding"]

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem found in a DAG."""

    severity: str
    code: str
    dag_id: str
    task_id: str | None
    message: str
    fix: str

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        where = f"DAG {self.dag_id!r}" + (f", task {self.task_id!r}" if self.task_id else "")
        return f"{self.severity.upper()} [{self.code}] {where}: {self.message} Fix: {self.fix}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)
