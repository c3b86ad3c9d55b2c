"""The package uses Airflow's public API: no import of an Airflow module or name whose dotted path has a
segment starting with ``_`` (``airflow.sdk._shared...``, ``airflow._shared...``, ``..._internal...``,
``from airflow.x import _private``). Private modules move or vanish between Airflow minor versions
without notice; a provider that imports them breaks on an upgrade it allows.

The few private imports left are listed in :data:`ALLOWED`, each with the reason that no public
alternative exists; an entry that is no longer used fails too, so the list only shrinks."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import airflow_gpu_dag

PACKAGE = Path(airflow_gpu_dag.__file__).parent


#: (file relative to the package, dotted name) -> why there is no public alternative.
ALLOWED: dict[tuple[str, str], str] = {
    ("airflow/declaring.py", "airflow.sdk.definitions._internal.contextmanager"): (
        "DagContext and TaskGroupContext: the DAG and task group a `with` block declares; the Task SDK has "
        "no public getter (BaseOperator reads them the same way)"
    ),
    ("authoring/fallback.py", "airflow.sdk.definitions._internal.mixins"): (
        "`a >> ladder` needs the base class of everything that takes part in `>>`; the SDK exports none"
    ),
    ("cli/definition.py", "airflow.cli.cli_parser._add_command"): (
        "builds the parser of the gpu-dag group alone (docs and tests); the public get_parser() parses "
        "every provider's commands (9 s here)"
    ),
    ("cli/loading.py", "airflow.sdk.definitions._internal.dag_parsing_context"): (
        "_airflow_parsing_context_manager sets the parsing context (get_parsing_context()) while a DAG is "
        "loaded for one dag_id, as Airflow's own CLI does (airflow.utils.cli.get_bagged_dag); no public "
        "setter"
    ),
    ("decorators/gpu.py", "airflow.sdk.bases.decorator._TaskDecorator"): (
        "@task.gpu subclasses the decorator class task_decorator_factory returns; the SDK exports only "
        "its TaskDecorator protocol"
    ),
}


def _private(name: str) -> bool:
    return name.split(".")[0] == "airflow" and any(part.startswith("_") for part in name.split(".")[1:])


def private_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, dotted name)`` of every private Airflow import in ``tree``: the module of an
    ``import``/``from`` and each name a ``from`` imports (function-level and TYPE_CHECKING ones too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # a private module names the import; else each private name it imports
            names = (
                [node.module] if _private(node.module) else [f"{node.module}.{a.name}" for a in node.names]
            )
        else:
            continue
        yield from ((node.lineno, name) for name in names if _private(name))


def _found() -> dict[tuple[str, str], int]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, name in private_imports(ast.parse(path.read_text(), str(path))):
            found.setdefault((path.relative_to(PACKAGE).as_posix(), name), line)
    return found


def test_no_private_airflow_import() -> None:
    found = _found()
    unexplained = [
        f"{file}:{line}: {name}" for (file, name), line in found.items() if (file, name) not in ALLOWED
    ]
    assert not unexplained, "private Airflow imports (use a public API, or allow-list with the reason):\n" + (
        "\n".join(unexplained)
    )


def test_every_allowed_private_import_is_still_used() -> None:
    stale = set(ALLOWED) - set(_found())
    assert not stale, f"allowed but no longer imported (drop them from ALLOWED): {sorted(stale)}"


def test_the_scan_sees_every_form_of_private_import() -> None:
    source = (
        "import airflow._shared.x\n"
        "from airflow.sdk._shared.observability.metrics import stats\n"
        "from airflow.cli.cli_parser import _add_command, get_parser\n"
        "def f():\n    from airflow.sdk.definitions._internal import mixins\n"
        "import airflow.sdk.observability.stats\n"
        "from airflow.sdk import DAG\n"
        "from . import _local\n"
        "import _thread\n"
    )
    assert [name for _, name in private_imports(ast.parse(source))] == [
        "airflow._shared.x",
        "airflow.sdk._shared.observability.metrics",
        "airflow.cli.cli_parser._add_command",
        "airflow.sdk.definitions._internal",
    ]
