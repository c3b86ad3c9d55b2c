"""Tests of ``airflow_gpu_dag.cli.loading``: DAG files written into ``tmp_path`` loaded with Airflow's
``DagBag`` as the CLI loads them (``test_lint.py`` checks what lint then reports)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from airflow import settings
from airflow.dag_processing.dagbag import DagBag
from airflow.policies import hookimpl
from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID as PARSING_CONTEXT

from airflow_gpu_dag.cli.loading import DagLoadError, LoadedDags, find_dag, load_dags
from tests.unit.cli.conftest import dag_file

#: Two tasks depending on each other.
CYCLE = """
with DAG("cyc", schedule=None):
    a = EmptyOperator(task_id="a")
    b = EmptyOperator(task_id="b")
    a >> b >> a
"""

#: A duration the provider's cluster policy refuses (the import error of a plain ``DagBag``).
BAD_ESTIMATE = """
with DAG("bad_estimate", schedule=None):
    EmptyOperator(task_id="t", executor_config=gpu_hints(duration="forty minutes"))
"""


def _dag(dag_id: str, task_id: str = "t") -> str:
    return f'with DAG("{dag_id}", schedule=None):\n    EmptyOperator(task_id="{task_id}")\n'


class _Recorder:
    """A cluster policy of another package: records the DAGs it sees."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def dag_policy(self, dag: Any) -> None:
        self.seen.append(dag.dag_id)


@pytest.fixture(autouse=True)
def _no_parsing_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts outside Airflow's parsing context, and leaves the environment as it found it."""
    monkeypatch.delenv(PARSING_CONTEXT, raising=False)


# -- load_dags ---------------------------------------------------------------------------------------------
def test_a_file_is_loaded_with_its_dags_and_counted(tmp_path: Path) -> None:
    path = dag_file(tmp_path, "two.py", _dag("first") + _dag("second"))
    loaded = load_dags([path])
    assert loaded.paths == [str(path)]
    assert sorted(loaded.dags) == ["first", "second"]
    assert loaded.dags["first"].fileloc == str(path)
    assert (loaded.files, loaded.import_errors, loaded.cyclic, loaded.duplicates, loaded.empty) == (
        1,
        {},
        set(),
        {},
        [],
    )


def test_a_dag_with_a_cycle_is_kept_and_named_as_cyclic(tmp_path: Path) -> None:
    """A plain ``DagBag`` drops a cyclic DAG for an import error; lint needs the DAG to name the cycle."""
    path = dag_file(tmp_path, "cyc.py", CYCLE)
    loaded = load_dags([path])
    assert loaded.cyclic == {"cyc"} and loaded.import_errors == {}
    assert sorted(t.task_id for t in loaded.dags["cyc"].tasks) == ["a", "b"]


def test_a_file_that_fails_to_import_is_an_import_error_of_that_file(tmp_path: Path) -> None:
    good = dag_file(tmp_path, "good.py", _dag("good"))
    broken = dag_file(tmp_path, "broken.py", "undefined_name\n")
    loaded = load_dags([tmp_path])
    assert list(loaded.dags) == ["good"] and loaded.files == 2
    assert list(loaded.import_errors) == [str(broken)]
    assert "NameError" in loaded.import_errors[str(broken)]
    assert str(good) not in loaded.import_errors


def test_a_path_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DagLoadError) as err:
        load_dags([dag_file(tmp_path, "ok.py", _dag("ok")), missing])
    assert (
        str(err.value) == f"path {str(missing)!r} does not exist; give a DAG file or a folder of DAG files."
    )


@pytest.mark.parametrize(
    ("option", "named"),
    [(None, "arguments (airflow gpu-dag lint PATH ...)"), ("--folder DIR", "--folder DIR")],
)
def test_a_missing_dags_folder_says_where_it_is_configured_and_how_else_to_name_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str | None, named: str
) -> None:
    missing = str(tmp_path / "dags")
    monkeypatch.setattr(settings, "DAGS_FOLDER", missing)
    with pytest.raises(DagLoadError) as err:
        load_dags([]) if option is None else load_dags([], option=option)
    assert str(err.value) == (
        f"the DAGs folder {missing!r} does not exist. It is [core] dags_folder (AIRFLOW__CORE__DAGS_FOLDER, "
        f"default $AIRFLOW_HOME/dags): set it to the folder of your DAG files, or name them with {named}."
    )


def test_without_paths_the_configured_dags_folder_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dag_file(tmp_path, "mine.py", _dag("mine"))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    loaded = load_dags([])
    assert loaded.paths == [str(tmp_path)] and list(loaded.dags) == ["mine"]


def test_a_path_without_dag_files_is_listed_as_empty(tmp_path: Path) -> None:
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "util.py").write_text("VALUE = 1\n")
    good = dag_file(tmp_path / "dags", "good.py", _dag("good"))
    loaded = load_dags([tmp_path / "helpers", good])
    assert loaded.empty == [str(tmp_path / "helpers")] and list(loaded.dags) == ["good"]


def test_folders_follow_airflows_discovery_rules_and_a_named_file_is_always_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a folder, ``.airflowignore`` hides a file and safe mode skips a file that does not mention
    'airflow'; the same files named explicitly are parsed."""
    monkeypatch.setenv("AIRFLOW__CORE__DAG_DISCOVERY_SAFE_MODE", "True")
    ignored = dag_file(tmp_path, "ignored_dag.py", _dag("ignored"))
    (tmp_path / ".airflowignore").write_text("ignored_*\n")
    quiet = tmp_path / "quiet.py"  # defines a DAG without the word: safe mode skips it
    quiet.write_text(
        'sdk = __import__("importlib").import_module("air" + "flow.sdk")\nquiet = sdk.DAG("quiet")\n'
    )
    dag_file(tmp_path, "seen.py", _dag("seen"))
    assert list(load_dags([tmp_path]).dags) == ["seen"]
    assert sorted(load_dags([ignored, quiet]).dags) == ["ignored", "quiet"]


def test_two_files_of_a_folder_defining_one_dag_id_are_recorded_with_the_one_kept_first(
    tmp_path: Path,
) -> None:
    one = dag_file(tmp_path, "one.py", _dag("same", "a"))
    two = dag_file(tmp_path, "two.py", _dag("same", "b"))
    loaded = load_dags([tmp_path])
    files = loaded.duplicates["same"]
    assert sorted(files) == [str(one), str(two)]
    kept, ignored = files  # the folder's order decides which one Airflow keeps
    assert loaded.dags["same"].fileloc == kept
    assert list(loaded.import_errors) == [ignored]
    assert "AirflowDagDuplicatedIdException" in loaded.import_errors[ignored]


def test_a_later_path_does_not_replace_a_dag_already_loaded(tmp_path: Path) -> None:
    first = dag_file(tmp_path / "a", "dag.py", _dag("same", "first"))
    second = dag_file(tmp_path / "b", "dag.py", _dag("same", "second"))
    loaded = load_dags([first, second])
    assert [t.task_id for t in loaded.dags["same"].tasks] == ["first"]
    assert loaded.duplicates == {"same": [str(first), str(second)]}
    assert loaded.import_errors == {
        str(second): (
            f"AirflowDagDuplicatedIdException: Ignoring DAG same from {second} - also found in {first}"
        )
    }


def test_one_file_named_twice_is_loaded_and_counted_once(tmp_path: Path) -> None:
    path = dag_file(tmp_path, "only.py", _dag("only"))
    dag_file(tmp_path, "other.py", _dag("other"))
    loaded = load_dags([tmp_path, path, os.path.relpath(path)])
    assert sorted(loaded.dags) == ["only", "other"]
    assert loaded.files == 2 and loaded.import_errors == {} and loaded.duplicates == {}


def test_what_a_dag_file_prints_goes_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """stdout carries only the command's output (``-o json``)."""
    path = dag_file(tmp_path, "loud.py", 'print("parsing loud")\n' + _dag("loud"))
    assert list(load_dags([path]).dags) == ["loud"]
    captured = capsys.readouterr()
    assert "parsing loud" not in captured.out and "parsing loud" in captured.err


def test_the_providers_cluster_policy_is_skipped_and_every_other_one_runs(tmp_path: Path) -> None:
    """Lint validates the provider's DAGs itself (with the pools given): its policy must not turn a bad
    estimate into the file's import error, while another package's policy still sees every DAG."""
    path = dag_file(tmp_path, "bad.py", BAD_ESTIMATE)
    recorder = _Recorder()
    manager = settings.get_policy_plugin_manager()
    manager.register(recorder, name="test-recorder")
    original = settings.dag_policy
    try:
        assert list(DagBag(dag_folder=str(path), load_op_links=False).import_errors) == [str(path)]
        assert recorder.seen == ["bad_estimate"]
        loaded = load_dags([path])
    finally:
        manager.unregister(name="test-recorder")
    assert loaded.import_errors == {} and list(loaded.dags) == ["bad_estimate"]
    assert recorder.seen == ["bad_estimate", "bad_estimate"]
    assert settings.dag_policy is original  # restored after loading


def test_add_duplicate_keeps_the_first_file_and_lists_each_other_once() -> None:
    loaded = LoadedDags(paths=[])
    loaded.add_duplicate("d", Path("a.py"), Path("b.py"))
    loaded.add_duplicate("d", "a.py", "b.py")
    loaded.add_duplicate("d", "ignored-kept.py", "c.py")  # the first file stays the kept one
    assert loaded.duplicates == {"d": ["a.py", "b.py", "c.py"]}


# -- find_dag ----------------------------------------------------------------------------------------------
def test_find_dag_returns_the_dag_of_a_file_or_folder(tmp_path: Path) -> None:
    path = dag_file(tmp_path, "pair.py", _dag("x", "tx") + _dag("y", "ty"))
    assert [t.task_id for t in find_dag("y", str(path)).tasks] == ["ty"]
    assert find_dag("x", str(tmp_path)).dag_id == "x"


def _generating_dag_file(folder: Path) -> Path:
    """DAGs ``gen_a`` and ``gen_b``; when parsed for one DAG (``get_parsing_context().dag_id``, as when a
    task runs), only that one. It prints the DAG id it is parsed for on stderr."""
    return dag_file(
        folder,
        "gen.py",
        "import sys\n"
        "from airflow.sdk import get_parsing_context\n"
        "asked = get_parsing_context().dag_id\n"
        'print("asked", asked, file=sys.stderr)\n'
        'for name in ("gen_a", "gen_b"):\n'
        "    if asked in (None, name):\n"
        "        globals()[name] = DAG(name, schedule=None)\n",
    )


def test_find_dag_parses_with_airflows_parsing_context_of_the_dag_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _generating_dag_file(tmp_path)
    assert sorted(load_dags([path]).dags) == ["gen_a", "gen_b"]  # no context: every DAG
    assert "asked None" in capsys.readouterr().err
    assert find_dag("gen_b", str(path)).dag_id == "gen_b"
    assert "asked gen_b" in capsys.readouterr().err


def test_the_parsing_context_of_find_dag_ends_when_it_returns(tmp_path: Path) -> None:
    """Loading after ``find_dag`` in the same process parses every DAG again, not only the one asked
    for before."""
    path = _generating_dag_file(tmp_path)
    assert find_dag("gen_b", str(path)).dag_id == "gen_b"
    assert sorted(load_dags([path]).dags) == ["gen_a", "gen_b"]


def test_find_dag_of_an_unknown_id_lists_the_dags_and_the_files_that_failed_to_import(tmp_path: Path) -> None:
    dag_file(tmp_path, "many.py", "".join(_dag(f"d{i:02d}") for i in range(22)))
    broken = dag_file(tmp_path, "broken.py", "raise ValueError('no')\n")
    with pytest.raises(DagLoadError) as err:
        find_dag("zz", str(tmp_path))
    listed = ", ".join(f"d{i:02d}" for i in range(20))
    assert str(err.value) == (
        f"DAG 'zz' not found in {tmp_path} (DAGs there: {listed}, ... (22 in all)). 1 file(s) failed to "
        f"import ({broken}); run `airflow gpu-dag lint`. Check the DAG id, or point at its file with "
        "--file PATH."
    )


def test_find_dag_in_a_folder_without_dags_says_none(tmp_path: Path) -> None:
    (tmp_path / "util.py").write_text("VALUE = 1\n")
    with pytest.raises(DagLoadError) as err:
        find_dag("zz", str(tmp_path))
    assert str(err.value) == (
        f"DAG 'zz' not found in {tmp_path} (DAGs there: none). Check the DAG id, or point at its file "
        "with --file PATH."
    )


def test_find_dag_reads_the_configured_dags_folder_without_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path / "dags"))
    with pytest.raises(
        DagLoadError, match=r"set it to the folder of your DAG files, or name them with --file PATH\.$"
    ):
        find_dag("mine")
    dag_file(tmp_path / "dags", "mine.py", _dag("mine"))
    assert find_dag("mine").dag_id == "mine"


def test_find_dag_of_a_dag_two_files_define_warns_on_stderr_which_it_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dag_file(tmp_path, "one.py", _dag("same", "a"))
    dag_file(tmp_path, "two.py", _dag("same", "b"))
    dag = find_dag("same", str(tmp_path))
    captured = capsys.readouterr()
    ignored = str(tmp_path / ("two.py" if dag.fileloc.endswith("one.py") else "one.py"))
    assert captured.out == ""
    assert (
        f"warning: DAG 'same' is defined in 2 files: using {dag.fileloc}, ignoring {ignored} "
        "(AirflowDagDuplicatedIdException); give each DAG its own id (`airflow gpu-dag lint` reports it "
        "as an import error).\n"
    ) in captured.err
