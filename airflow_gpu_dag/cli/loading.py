"""Load DAG files for the CLI with Airflow's own ``DagBag``, keeping what lint needs to see.

Two differences from a plain ``DagBag``: a DAG with a dependency cycle is kept (so lint can name
the cycle with its tasks rather than only report an import error), and the provider's own cluster
policy is skipped while loading (lint runs the same validation itself, with the pools given on the
command line, and reports each finding separately); every other cluster policy still runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow import settings
from airflow.configuration import conf
from airflow.dag_processing.dagbag import DagBag
from airflow.exceptions import AirflowDagDuplicatedIdException
from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager
from airflow.sdk.exceptions import AirflowDagCycleException

__all__ = ["DagLoadError", "LoadedDags", "find_dag", "load_dags"]

_PROVIDER_POLICY_MODULE = "airflow_gpu_dag.airflow.policy"


class DagLoadError(LookupError):
    """A DAG or path the user named cannot be found; the message says what was searched."""


@dataclass
class LoadedDags:
    """DAGs found under some paths, the files that failed to import, and the DAGs that have a cycle."""

    paths: list[str]
    dags: dict[str, Any] = field(default_factory=dict)
    import_errors: dict[str, str] = field(default_factory=dict)
    cyclic: set[str] = field(default_factory=set)
    files: int = 0
    #: dag_id -> every file defining it, the one kept first (as Airflow's ``DagBag`` keeps it)
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    #: the paths given that hold no DAG file (no DAG and no file that failed to import)
    empty: list[str] = field(default_factory=list)

    def add_duplicate(self, dag_id: str, kept: Any, ignored: Any) -> None:
        """Record that ``ignored`` also defines ``dag_id``, which is kept from ``kept``."""
        files = self.duplicates.setdefault(dag_id, [str(kept)])
        if str(ignored) not in files:
            files.append(str(ignored))


@contextlib.contextmanager
def _provider_policy_skipped() -> Iterator[None]:
    """Run every ``dag_policy`` except this provider's while the block runs."""
    try:
        manager = settings.get_policy_plugin_manager()
        ours = [p for p in manager.get_plugins() if getattr(p, "__name__", None) == _PROVIDER_POLICY_MODULE]
    except Exception:
        ours = []
    if not ours:
        yield
        return
    caller = manager.subset_hook_caller("dag_policy", remove_plugins=ours)
    original = settings.dag_policy

    def dag_policy(dag: Any) -> Any:
        return caller(dag=dag)

    settings.dag_policy = dag_policy
    try:
        yield
    finally:
        settings.dag_policy = original


def _dagbag_class() -> type:
    class LintDagBag(DagBag):
        """A DagBag that keeps cyclic DAGs (in ``cyclic``) instead of dropping them, and records the
        DAG ids two files define (``duplicated``: (dag_id, kept file, ignored file))."""

        cyclic: set[str]
        duplicated: list[tuple[str, Any, Any]]

        def bag_dag(self, dag: Any) -> None:
            try:
                super().bag_dag(dag)
            except AirflowDagCycleException:
                if not hasattr(self, "cyclic"):
                    self.cyclic = set()
                self.cyclic.add(dag.dag_id)
                self.dags[dag.dag_id] = dag
            except AirflowDagDuplicatedIdException:
                if not hasattr(self, "duplicated"):
                    self.duplicated = []
                self.duplicated.append((dag.dag_id, self.dags[dag.dag_id].fileloc, dag.fileloc))
                raise

    return LintDagBag


def _no_dags_folder(folder: str, option: str) -> DagLoadError:
    """The configured DAGs folder is missing (a fresh ``AIRFLOW_HOME``): say where it comes from and
    both fixes, pointing the setting at the DAG files or naming them with ``option``."""
    return DagLoadError(
        f"the DAGs folder {folder!r} does not exist. It is [core] dags_folder (AIRFLOW__CORE__DAGS_FOLDER, "
        f"default $AIRFLOW_HOME/dags): set it to the folder of your DAG files, or name them with {option}."
    )


def load_dags(
    paths: Sequence[str | os.PathLike[str]], *, option: str = "arguments (airflow gpu-dag lint PATH ...)"
) -> LoadedDags:
    """Parse every DAG file under ``paths`` (files or folders; default: the dags folder).

    An explicitly named file is always parsed; folders follow Airflow's discovery rules
    (``.airflowignore``, ``[core] dag_discovery_safe_mode``).

    :param option: how the command names DAG files instead of the dags folder (for the message).
    :raises DagLoadError: a path does not exist (for the configured dags folder: where it comes from).
    """
    configured = not paths
    targets = [str(p) for p in paths] or [str(settings.DAGS_FOLDER)]
    result = LoadedDags(paths=targets)
    bag_class = _dagbag_class()
    parsed: set[str] = set()  # files, once each however many of the paths name them
    for target in targets:
        path = Path(target)
        if not path.exists() and configured:
            raise _no_dags_folder(target, option)
        if not path.exists():
            raise DagLoadError(f"path {target!r} does not exist; give a DAG file or a folder of DAG files.")
        safe_mode = conf.getboolean("core", "dag_discovery_safe_mode") if path.is_dir() else False
        # a DAG file's print() goes to stderr: stdout carries only the command's output (-o json)
        with _provider_policy_skipped(), contextlib.redirect_stdout(sys.stderr):
            bag = bag_class(dag_folder=str(path), safe_mode=safe_mode, load_op_links=False)
        for dag_id, kept, ignored in getattr(bag, "duplicated", []):
            result.add_duplicate(dag_id, kept, ignored)
        for dag_id, dag in bag.dags.items():
            earlier = result.dags.get(dag_id)
            if earlier is not None and _same_file(earlier.fileloc, dag.fileloc) is False:
                # What Airflow's own DagBag does within one folder; across the paths given, a later
                # file must not silently replace (and so hide) a DAG already loaded.
                result.import_errors[str(dag.fileloc)] = (
                    f"AirflowDagDuplicatedIdException: Ignoring DAG {dag_id} from {dag.fileloc} - also "
                    f"found in {earlier.fileloc}"
                )
                result.add_duplicate(dag_id, earlier.fileloc, dag.fileloc)
                continue
            result.dags[dag_id] = dag
        if not bag.dags and not bag.import_errors:
            result.empty.append(target)
        result.import_errors.update(bag.import_errors)
        result.cyclic.update(getattr(bag, "cyclic", set()))
        for stat in getattr(bag, "dagbag_stats", []) or []:
            parsed.add(os.path.realpath(path / stat.file if path.is_dir() else path))
    result.files = len(parsed)
    return result


def _same_file(a: Any, b: Any) -> bool | None:
    """Whether two ``fileloc`` values name one file (None when either is unknown)."""
    if not a or not b:
        return None
    return os.path.realpath(str(a)) == os.path.realpath(str(b))


#: The environment variables Airflow's parsing context lives in (``_AIRFLOW_PARSING_CONTEXT_DAG_ID``,
#: ``..._TASK_ID``): what :func:`get_parsing_context` reads in DAG files.
_PARSING_CONTEXT_PREFIX = "_AIRFLOW_PARSING_CONTEXT_"


@contextlib.contextmanager
def _parsing_only(dag_id: str) -> Iterator[None]:
    """Airflow's parsing context for ``dag_id`` (DAG files that call ``get_parsing_context()`` build only
    that DAG) while the files load, and the environment as it was afterwards, also when loading raises:
    Airflow's own context manager restores only a value that was set before, and left set, every later
    load in the process would build only that DAG."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(_PARSING_CONTEXT_PREFIX)}
    try:
        with _airflow_parsing_context_manager(dag_id=dag_id):
            yield
    finally:
        for key in [k for k in os.environ if k.startswith(_PARSING_CONTEXT_PREFIX) and k not in saved]:
            del os.environ[key]
        os.environ.update(saved)


def find_dag(dag_id: str, file: str | None = None) -> Any:
    """The DAG ``dag_id`` from ``file`` (a file or folder) or from the configured dags folder.

    :raises DagLoadError: the DAG is not there; the message lists the DAGs that are and the files
        that failed to import.
    """
    where = file or str(settings.DAGS_FOLDER)
    with _parsing_only(dag_id):
        loaded = load_dags([file] if file else [], option="--file PATH")
    if dag_id in loaded.dags:
        if dag_id in loaded.duplicates:
            _warn_duplicate(dag_id, loaded.duplicates[dag_id])
        return loaded.dags[dag_id]
    found = sorted(loaded.dags)
    listing = ", ".join(found[:20]) + (f", ... ({len(found)} in all)" if len(found) > 20 else "")
    message = f"DAG {dag_id!r} not found in {where} (DAGs there: {listing or 'none'})."
    if loaded.import_errors:
        failed = ", ".join(sorted(loaded.import_errors)[:5])
        message += (
            f" {len(loaded.import_errors)} file(s) failed to import ({failed}); run `airflow gpu-dag lint`."
        )
    message += " Check the DAG id, or point at its file with --file PATH."
    raise DagLoadError(message)


def _warn_duplicate(dag_id: str, files: Sequence[str]) -> None:
    """Say on stderr that several files define ``dag_id`` and which one the command reads (the one
    Airflow's ``DagBag`` kept); the output itself (stdout) stays as it is."""
    kept, *ignored = files
    sys.stderr.write(
        f"warning: DAG {dag_id!r} is defined in {len(files)} files: using {kept}, ignoring "
        f"{', '.join(ignored)} (AirflowDagDuplicatedIdException); give each DAG its own id "
        "(`airflow gpu-dag lint` reports it as an import error).\n"
    )
    sys.stderr.flush()
