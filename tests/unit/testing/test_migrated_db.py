"""Tests of ``airflow_gpu_dag.testing.migrated_db``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from airflow_gpu_dag.testing import migrated_db
from airflow_gpu_dag.testing.migrated_db import migrated_database, settings_fingerprint


@pytest.fixture(autouse=True)
def _no_templates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migrated_db, "_templates", {})


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__DAGS_FOLDER": "/dags",
        "AIRFLOW__API__PORT": extra.pop("port", "8080"),
        "PATH": extra.pop("path", "/bin"),
        **extra,
    }


class _Migrations:
    """Stands for ``airflow db migrate``: writes a table into the home's database, counts the runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, database: Path) -> None:
        self.runs += 1
        with sqlite3.connect(database) as db:
            db.execute("create table alembic_version (version_num text)")
            db.execute("insert into alembic_version values ('head')")
        db.close()


def _version(database: Path) -> str:
    with sqlite3.connect(database) as db:
        (row,) = db.execute("select version_num from alembic_version").fetchall()
    db.close()
    return str(row[0])


def test_the_second_home_with_the_same_settings_gets_a_copy(tmp_path: Path) -> None:
    migrate = _Migrations()
    homes = [tmp_path / "a", tmp_path / "b"]
    copied = []
    for number, home in enumerate(homes):
        home.mkdir()
        database = home / "airflow.db"
        env = _env(home, port=str(8080 + number))  # ports and other non-Airflow variables differ
        copied.append(migrated_database(database, env, home, lambda db=database: migrate(db)))
        assert _version(database) == "head"
    assert copied == [False, True]
    assert migrate.runs == 1


def test_other_settings_are_migrated_again(tmp_path: Path) -> None:
    migrate = _Migrations()
    for name, pool_size in (("a", "128"), ("b", "16")):
        home = tmp_path / name
        home.mkdir()
        database = home / "airflow.db"
        env = _env(home, AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT=pool_size)
        assert not migrated_database(database, env, home, lambda db=database: migrate(db))
    assert migrate.runs == 2


def test_the_fingerprint_ignores_the_home_and_this_clusters_ports(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert settings_fingerprint(_env(a, port="1"), a) == settings_fingerprint(_env(b, port="2"), b)
    assert settings_fingerprint(_env(a), a) != settings_fingerprint(
        _env(a, AIRFLOW__LOGGING__LOG_FILENAME_TEMPLATE="x.log"), a
    )


def test_a_template_that_cannot_be_read_is_dropped_and_migrate_runs(tmp_path: Path) -> None:
    migrate = _Migrations()
    first, second = tmp_path / "a", tmp_path / "b"
    for home in (first, second):
        home.mkdir()
    migrated_database(first / "airflow.db", _env(first), first, lambda: migrate(first / "airflow.db"))
    for template in migrated_db._templates.values():
        template.unlink()
        template.mkdir()  # a directory where the file was: sqlite cannot open it
    copied = migrated_database(
        second / "airflow.db", _env(second), second, lambda: migrate(second / "airflow.db")
    )
    assert not copied
    assert migrate.runs == 2
    assert _version(second / "airflow.db") == "head"
