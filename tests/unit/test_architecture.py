"""The architecture rules of docs/architecture.md, checked on the source: no import cycle between the
package's modules (function-level imports included: they do not make a cycle go away), dependencies
point down the layers, and no module grows much over 500 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import airflow_gpu_dag

PACKAGE = Path(airflow_gpu_dag.__file__).parent
ROOT = "airflow_gpu_dag"

#: Layers from docs/architecture.md, bottom up: a module may import modules of its own layer or below.
LAYERS: dict[str, int] = {
    "core": 0,
    "hints": 1,
    "settings": 1,
    "metrics": 1,
    "log_once": 1,
    "datasets": 1,
    "rendering": 1,
    "airflow": 2,
    "hooks": 2,
    "gpu": 2,
    "budget": 3,
    "kubernetes": 3,
    "priority": 3,
    "triggers": 4,
    "operators": 5,
    "sensors": 5,
    "decorators": 5,
    "authoring": 6,
    "priority_strategy": 7,
    "plugins": 7,
    "cli": 7,
    "watermark": 7,
    "testing": 7,
    "get_provider_info": 7,
    "__init__": 8,
}
#: A module may be somewhat longer than this; far longer means it holds more than one concept.
MAX_LINES = 520


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([ROOT, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[str]:
    """Every ``airflow_gpu_dag`` module name imported anywhere in ``tree`` (function bodies included),
    except under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            yield from (name for child in node.orelse for name in _imports(child))
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == ROOT)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == ROOT:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)  # `from pkg import submodule`
        yield from _imports(node)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = {target for target in _imports(tree) if target in modules and target != name}
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    if key not in LAYERS:
        pytest.fail(f"{module}: its package {key!r} has no layer in LAYERS (and in docs/architecture.md)")
    return LAYERS[key]


def _is_package_init(module: str, target: str) -> bool:
    """A package's ``__init__`` re-exporting its own submodules."""
    return target.startswith(module + ".")


def test_no_import_cycle_inside_the_package() -> None:
    graph = _graph()
    edges = {m: {t for t in targets if not _is_package_init(m, t)} for m, targets in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycle = [*stack[stack.index(target) :], target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


def test_dependencies_point_down_the_layers() -> None:
    wrong = [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in sorted(_graph().items())
        for target in sorted(targets)
        if not _is_package_init(module, target) and _layer(target) > _layer(module)
    ]
    assert not wrong, "dependencies must point down (docs/architecture.md):\n" + "\n".join(wrong)


def test_no_module_is_much_over_500_lines() -> None:
    long = {
        name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these modules by concept: {long}"


def test_the_check_sees_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """The import reader finds function-level imports (the kind that hid the old cycles)."""
    code = (
        "from airflow_gpu_dag.core.graph import TaskGraph\n"
        "def f():\n"
        "    from airflow_gpu_dag.cli import render\n"
        "    import airflow_gpu_dag.watermark.controller\n"
        "if TYPE_CHECKING:\n"
        "    from airflow_gpu_dag.plugins import plugin\n"
    )
    found = set(_imports(ast.parse(code)))
    expected = {"airflow_gpu_dag.core.graph", "airflow_gpu_dag.cli", "airflow_gpu_dag.watermark.controller"}
    assert expected <= found
    assert "airflow_gpu_dag.plugins" not in found
