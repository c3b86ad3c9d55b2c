"""SQLite connection settings for the test cluster's Airflow components.

Airflow reads ``[database] sql_alchemy_connect_args`` as an import path to a dict of keyword
arguments for the DB-API ``connect()``. :data:`CONNECT_ARGS` raises SQLite's busy timeout from the
driver's default of 5 s: on a loaded 2-core machine the scheduler, the dag-processor, the triggerer
and the api-server all write to one file, and a REST call that waits more than 5 s for the write
lock fails with ``database is locked`` (a 500 "Database error" from the api-server).

The timeout stays well below the test client's read timeout (60 s,
:func:`airflow_gpu_dag.testing.rest.rest_client`), so that a call held up by a lock wait gets an
answer (at worst a 500 "Database error", which the harness retries) before the client gives up. A busy
timeout as long as the client's would let one lock wait hold the api-server's answer past the client's
read timeout, and the call would fail instead of being retried.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONNECT_ARGS", "CONNECT_ARGS_ASYNC", "CONNECT_ARGS_ASYNC_PATH", "CONNECT_ARGS_PATH"]

#: Busy timeout in seconds: how long a connection waits for another's write lock.
BUSY_TIMEOUT = 20

#: Keyword arguments for ``sqlite3.connect`` (Airflow adds ``check_same_thread`` to this dict).
CONNECT_ARGS: dict[str, Any] = {"timeout": BUSY_TIMEOUT}
#: The same for the async engine's ``aiosqlite.connect`` (a dict of its own).
CONNECT_ARGS_ASYNC: dict[str, Any] = {"timeout": BUSY_TIMEOUT}

#: The import paths Airflow's ``sql_alchemy_connect_args`` and ``..._async`` settings take.
CONNECT_ARGS_PATH = f"{__name__}.CONNECT_ARGS"
CONNECT_ARGS_ASYNC_PATH = f"{__name__}.CONNECT_ARGS_ASYNC"
