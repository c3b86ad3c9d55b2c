"""The architecture rules of docs/architecture.md, checked on the source: no import cycle between the
package's modules (function-level and type-only imports included: they do not make a cycle go away),
dependencies point down the layers and down the core's groups, and every function-level import says
why it is not at the top of its module."""

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
    "version": 0,
    "contract": 1,
    "executor_config": 1,
    "settings": 1,
    "metrics": 1,
    "log_once": 1,
    "datasets": 1,
    "charts": 1,
    "airflow": 2,
    "hooks": 2,
    "gpu": 2,
    "pool_claim": 2,
    "deferral": 2,
    "budget": 3,
    "kubernetes": 3,
    "priority": 3,
    "triggers": 4,
    "operators": 5,
    "decorators": 5,
    "sensors": 6,
    "authoring": 7,
    "priority_strategy": 8,
    "plugins": 8,
    "cli": 8,
    "watermark": 8,
    "testing": 8,
    "get_provider_info": 8,
    "__init__": 9,
}


#: The core's groups from docs/architecture.md, bottom up: a core module imports its own group or below.
CORE_GROUPS: dict[str, int] = {"model": 0, "analysis": 1, "policy": 2, "simulation": 3, "planning": 4}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([ROOT, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.AST) -> Iterator[str]:
    """Every ``airflow_gpu_dag`` module name imported anywhere in ``tree``: function bodies and
    ``if TYPE_CHECKING:`` blocks included (a type-only import is still a dependency a reader follows)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == ROOT)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == ROOT:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)  # `from pkg import submodule`


def _function_level_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports inside a function or method body (not module-level, not ``if TYPE_CHECKING:``)."""
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    yield node


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


def _core_group(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 3 or parts[1] != "core":
        return None
    if parts[2] not in CORE_GROUPS:
        pytest.fail(f"{module}: core module outside the groups {sorted(CORE_GROUPS)} (docs/architecture.md)")
    return CORE_GROUPS[parts[2]]


#: What a function-level import's comment must name: an optional dependency (a package an extra installs,
#: or one a deployment may lack), or a process boundary (a module this process must not load when it
#: imports the caller: the scheduler, the dag-processor or the ``airflow`` CLI at start-up).
FUNCTION_IMPORT_REASONS = ("optional", "process", "start-up")


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


def test_core_groups_point_down() -> None:
    """model <- analysis <- policy <- simulation <- planning: a group never imports one above it."""
    wrong = []
    for module, targets in sorted(_graph().items()):
        group = _core_group(module)
        if group is None:
            continue
        for target in sorted(targets):
            target_group = _core_group(target)
            if target_group is not None and target_group > group:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "core groups must point down (docs/architecture.md):\n" + "\n".join(wrong)


def test_operators_and_sensors_do_not_import_each_other_both_ways() -> None:
    """Sensors may use an operator's helpers (the start deadline reads the fallback ladder's XCom); the
    operators never import a sensor, so neither folder needs a hidden import to load."""
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(_graph().items())
        if module.startswith(f"{ROOT}.operators")
        for target in sorted(targets)
        if target.startswith(f"{ROOT}.sensors")
    ]
    assert not wrong, "\n".join(wrong)


def test_every_function_level_import_says_why() -> None:
    """An import at the top of a module is its real dependency list; one inside a function is kept only
    to break an optional dependency or a process boundary (a module the caller's process must not load
    at import time), with a one-line comment on the import or the line above it saying which."""
    silent = []
    for path in _modules().values():
        lines = path.read_text().splitlines()
        for node in _function_level_imports(ast.parse("\n".join(lines), str(path))):
            here, above = lines[node.lineno - 1], lines[node.lineno - 2] if node.lineno > 1 else ""
            end = lines[(node.end_lineno or node.lineno) - 1]
            comment = " ".join(part.split("#", 1)[1] for part in (here, end, above) if "#" in part).lower()
            if not any(reason in comment for reason in FUNCTION_IMPORT_REASONS):
                silent.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {here.strip()}")
    assert not silent, (
        "a function-level import needs a one-line comment naming why it is not at the top "
        f"({', '.join(FUNCTION_IMPORT_REASONS)}):\n" + "\n".join(silent)
    )


def test_the_check_sees_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """The import reader finds function-level and type-only imports (the kinds that hide cycles)."""
    code = (
        "from airflow_gpu_dag.core.model.graph import TaskGraph\n"
        "def f():\n"
        "    from airflow_gpu_dag.cli import render\n"
        "    import airflow_gpu_dag.watermark.controller\n"
        "if TYPE_CHECKING:\n"
        "    from airflow_gpu_dag.plugins import plugin\n"
    )
    found = set(_imports(ast.parse(code)))
    expected = {
        "airflow_gpu_dag.core.model.graph",
        "airflow_gpu_dag.cli",
        "airflow_gpu_dag.watermark.controller",
    }
    assert expected <= found


def test_unit_tests_mirror_the_package() -> None:
    """``tests/unit/<folder>/test_<module>.py`` tests ``airflow_gpu_dag/<folder>/<module>.py`` (or a data
    file of that folder, such as ``watermark/watermark.schema.json``): one home for each module's tests.
    Checks of the repository go under ``tests/repo/``, tests of the benchmark scripts under
    ``tests/benchmarks/`` (CONTRIBUTING.md)."""
    unit = Path(__file__).resolve().parents[1] / "unit"
    strays = []
    for path in sorted(unit.rglob("test_*.py")):
        folder = PACKAGE / path.parent.relative_to(unit)
        name = path.stem.removeprefix("test_")
        data = [
            *folder.glob(f"{name}.*"),
            *folder.glob(name.replace("_", ".") + ".*"),
        ]
        homes = [folder / f"{name}.py", folder / f"_{name}.py", *data]  # data: watermark.schema.json
        if not any(home.is_file() for home in homes):
            strays.append(str(path.relative_to(unit.parent.parent)))
    assert not strays, "tests with no module of that name in airflow_gpu_dag/: " + ", ".join(strays)
