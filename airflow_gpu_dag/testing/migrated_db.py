"""A migrated SQLite metadata database, made once per process and copied into each new cluster.

``airflow db migrate`` on an empty SQLite file takes about 5 CPU seconds (the whole Alembic history
run from the start); a test session boots a cluster per test module, so it paid that a dozen times
for the same result. What the migration writes depends only on Airflow's version and the settings it
reads (the default pool's size, the log file templates, ...), not on the home the file lives in: so
:func:`migrated_database` migrates once for each distinct set of settings and later copies that file
(SQLite's online backup, so the copy is consistent) into the new home.

The settings are compared as the ``AIRFLOW__*`` variables of the cluster's environment with the home
path replaced by a placeholder; the ones that only name a port or URL of this cluster are left out
(see :data:`PER_CLUSTER`), as the migration does not read them. Templates live in a temporary
directory of this process, removed when it exits.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Mapping
from importlib.metadata import version
from pathlib import Path

__all__ = ["PER_CLUSTER", "migrated_database", "settings_fingerprint"]

#: ``AIRFLOW__*`` settings that name this cluster's ports and URLs: the migration does not read them.
PER_CLUSTER = frozenset(
    {
        "AIRFLOW__API__PORT",
        "AIRFLOW__API__BASE_URL",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT",
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT",
    }
)

_templates: dict[str, Path] = {}
_template_dir: Path | None = None


def settings_fingerprint(env: Mapping[str, str], home: Path) -> str:
    """A digest of the Airflow settings in ``env`` that a migration can read, independent of ``home``."""
    home_text = str(home)
    items = sorted(
        (name, value.replace(home_text, "{home}"))
        for name, value in env.items()
        if name.startswith("AIRFLOW__") and name not in PER_CLUSTER
    )
    digest = hashlib.sha256(version("apache-airflow").encode())
    for name, value in items:
        digest.update(f"\0{name}={value}".encode())
    return digest.hexdigest()


def _directory() -> Path:
    global _template_dir
    if _template_dir is None:
        _template_dir = Path(tempfile.mkdtemp(prefix="airflow-gpu-dag-migrated-"))
        atexit.register(shutil.rmtree, _template_dir, True)
    return _template_dir


def _copy(source: Path, target: Path) -> None:
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def migrated_database(
    database: Path, env: Mapping[str, str], home: Path, migrate: Callable[[], object]
) -> bool:
    """Make ``database`` a migrated metadata database; True when it was copied from a template.

    ``migrate`` runs ``airflow db migrate`` for this home (it writes ``database``). The first call for
    a set of settings runs it and keeps a copy of the result as that set's template; later calls copy
    the template instead. A template that cannot be copied is dropped and ``migrate`` runs.
    """
    key = settings_fingerprint(env, home)
    template = _templates.get(key)
    if template is not None and not database.exists():
        try:
            _copy(template, database)
            return True
        except (OSError, sqlite3.Error):
            _templates.pop(key, None)
            with contextlib.suppress(OSError):
                database.unlink()
    migrate()
    if database.exists():
        handle, name = tempfile.mkstemp(prefix=f"{key[:16]}-", suffix=".db", dir=_directory())
        os.close(handle)
        kept = Path(name)
        try:
            _copy(database, kept)
            _templates[key] = kept
        except (OSError, sqlite3.Error):
            with contextlib.suppress(OSError):
                kept.unlink()
    return False
