"""Say each problem once: the scheduler calls the priority strategy for every task instance, the
controller ticks every interval and the history is re-read every refresh, so a warning logged on every
call would flood the logs. :class:`LogOnce` logs a message (by key) at warning level the first time and
at debug level after. Thread-safe; it forgets every key once it holds ``limit`` (a long-lived process
that meets ever new problems keeps a bounded set, and says them again after that)."""

from __future__ import annotations

import logging
import threading

__all__ = ["LogOnce"]


class LogOnce:
    """``warning(key, message, *args)``: logged at ``level`` (a warning unless told) the first time
    ``key`` is seen, at debug level after."""

    def __init__(self, logger: logging.Logger, limit: int = 10_000, level: int = logging.WARNING) -> None:
        self.logger = logger
        self.limit = limit
        self.level = level  # the first time; logging.ERROR for a problem someone must fix
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def warning(self, key: str, message: str, *args: object) -> bool:
        """Log ``message % args``; True when it was the first time for ``key`` (a warning)."""
        with self._lock:
            first = key not in self._seen
            if first:
                if len(self._seen) >= self.limit:
                    self._seen.clear()
                self._seen.add(key)
        self.logger.log(self.level if first else logging.DEBUG, message, *args)
        return first

    def clear(self) -> None:
        """Forget every key (tests, or a configuration that changed)."""
        with self._lock:
            self._seen.clear()
