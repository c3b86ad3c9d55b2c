"""Tests of ``airflow_gpu_dag.testing.sqlite``."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from airflow_gpu_dag.testing import sqlite


def _busy_timeout_ms(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA busy_timeout").fetchone()[0])


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (sqlite.CONNECT_ARGS_PATH, sqlite.CONNECT_ARGS),
        (sqlite.CONNECT_ARGS_ASYNC_PATH, sqlite.CONNECT_ARGS_ASYNC),
    ],
)
def test_airflow_imports_the_connect_args_from_their_paths(
    monkeypatch: pytest.MonkeyPatch, path: str, value: dict[str, object]
) -> None:
    """Through Airflow's own reading of ``[database] sql_alchemy_connect_args(_async)``."""
    from airflow import settings

    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", sqlite.CONNECT_ARGS_PATH)
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC", sqlite.CONNECT_ARGS_ASYNC_PATH)
    mode = "async" if path == sqlite.CONNECT_ARGS_ASYNC_PATH else "sync"
    assert settings._get_connect_args(mode) is value


def test_the_sync_driver_gets_the_busy_timeout_in_milliseconds() -> None:
    """As Airflow passes it: the dict plus ``check_same_thread`` (added to a copy here, not the module's)."""
    connection = sqlite3.connect(":memory:", **{**sqlite.CONNECT_ARGS, "check_same_thread": False})
    try:
        assert _busy_timeout_ms(connection) == sqlite.BUSY_TIMEOUT * 1000 == 20_000
    finally:
        connection.close()


def test_a_sqlalchemy_engine_with_the_connect_args_waits_as_long(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}", connect_args=dict(sqlite.CONNECT_ARGS))
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == sqlite.BUSY_TIMEOUT * 1000
    finally:
        engine.dispose()


def test_the_async_engine_gets_the_same_busy_timeout(tmp_path: Path) -> None:
    pytest.importorskip("aiosqlite")
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    async def busy_timeout() -> int:
        engine = create_async_engine(
            f"sqlite+aiosqlite:///{tmp_path / 'airflow.db'}", connect_args=dict(sqlite.CONNECT_ARGS_ASYNC)
        )
        try:
            async with engine.connect() as connection:
                return int((await connection.execute(text("PRAGMA busy_timeout"))).scalar_one())
        finally:
            await engine.dispose()

    assert asyncio.run(busy_timeout()) == sqlite.BUSY_TIMEOUT * 1000


def test_a_writer_waits_for_anothers_write_lock_instead_of_failing(tmp_path: Path) -> None:
    """What the timeout is for: the second writer's INSERT waits out the first's transaction."""
    path = tmp_path / "airflow.db"
    setup = sqlite3.connect(path)
    setup.execute("CREATE TABLE t (x INTEGER)")
    setup.commit()
    setup.close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # holds the write lock
    impatient = sqlite3.connect(path, timeout=0)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        impatient.execute("INSERT INTO t VALUES (0)")
    impatient.close()

    def release_soon() -> None:
        time.sleep(0.3)
        holder.execute("COMMIT")

    releaser = threading.Thread(target=release_soon)
    releaser.start()
    waiting = sqlite3.connect(path, **sqlite.CONNECT_ARGS)
    try:
        waiting.execute("INSERT INTO t VALUES (1)")
        waiting.commit()
        assert waiting.execute("SELECT x FROM t").fetchall() == [(1,)]
    finally:
        releaser.join()
        waiting.close()
        holder.close()


def test_the_paths_name_this_module_and_the_dicts_are_not_shared() -> None:
    """Airflow adds ``check_same_thread`` to the sync dict in place; the async driver gets its own."""
    assert sqlite.CONNECT_ARGS_PATH == "airflow_gpu_dag.testing.sqlite.CONNECT_ARGS"
    assert sqlite.CONNECT_ARGS_ASYNC_PATH == "airflow_gpu_dag.testing.sqlite.CONNECT_ARGS_ASYNC"
    sqlite.CONNECT_ARGS["check_same_thread"] = False
    try:
        assert "check_same_thread" not in sqlite.CONNECT_ARGS_ASYNC
    finally:
        del sqlite.CONNECT_ARGS["check_same_thread"]
    assert set(sqlite.__all__) == {
        "CONNECT_ARGS",
        "CONNECT_ARGS_ASYNC",
        "CONNECT_ARGS_ASYNC_PATH",
        "CONNECT_ARGS_PATH",
    }
