"""LogOnce: a warning the first time a key is seen, debug after; bounded; thread-safe."""

from __future__ import annotations

import logging
import threading

import pytest

from airflow_gpu_dag.log_once import LogOnce


def test_first_time_a_warning_then_debug(caplog: pytest.LogCaptureFixture) -> None:
    once = LogOnce(logging.getLogger("test.log_once"))
    with caplog.at_level(logging.DEBUG, logger="test.log_once"):
        assert once.warning("a", "pool %s is %d", "gpu", 3)
        assert not once.warning("a", "pool %s is %d", "gpu", 4)
        assert once.warning("b", "other")
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert levels == [
        (logging.WARNING, "pool gpu is 3"),
        (logging.DEBUG, "pool gpu is 4"),
        (logging.WARNING, "other"),
    ]
    once.clear()
    assert once.warning("a", "again")


def test_forgets_everything_at_its_limit() -> None:
    once = LogOnce(logging.getLogger("test.log_once"), limit=3)
    assert [once.warning(k, k) for k in "abc"] == [True, True, True]
    assert not once.warning("a", "a")
    assert once.warning("d", "d")  # the fourth key: the set was full, so it starts again
    assert once.warning("a", "a")


def test_one_warning_per_key_across_threads() -> None:
    once = LogOnce(logging.getLogger("test.log_once"))
    firsts: list[bool] = []
    lock = threading.Lock()

    def say() -> None:
        for _ in range(200):
            first = once.warning("same", "same")
            with lock:
                firsts.append(first)

    threads = [threading.Thread(target=say) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert firsts.count(True) == 1 and len(firsts) == 1600
