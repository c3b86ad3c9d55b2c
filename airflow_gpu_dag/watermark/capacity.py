"""What every capacity source returns (:class:`CapacityReading`) or raises (:class:`SourceError`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["CapacityReading", "CapacitySource", "SourceError"]


class SourceError(RuntimeError):
    """A capacity source could not say how many GPUs are usable."""


@dataclass(frozen=True)
class CapacityReading:
    """Usable GPUs reported by a source, with a one-line explanation."""

    gpus: int
    detail: str


class CapacitySource(Protocol):
    """Anything with ``read() -> CapacityReading`` (raising :class:`SourceError` on failure)."""

    kind: str

    def read(self) -> CapacityReading: ...
