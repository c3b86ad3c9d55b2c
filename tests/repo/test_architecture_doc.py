"""docs/architecture.md stays true: every module, folder and object it names exists, every package
folder and core group is named on it, its layers table is ``LAYERS`` of ``test_architecture.py`` and
its core groups table is ``CORE_GROUPS``, with every core module in the row of its group."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


PACKAGE = ROOT / "airflow_gpu_dag"


PAGE = ROOT / "docs" / "architecture.md"


#: Folders of the repository a path on the page may start with, besides the package's own.
REPOSITORY_FOLDERS = ("airflow_gpu_dag", "benchmarks", "dags", "docs", "scripts", "tests")


_PATH = re.compile(r"^[a-z_]+(?:/[a-z_]+)*(?:/|\.py)$|^[a-z_]+(?:/[a-z_]+)+(?:\.[a-z_]+)?$")


_DOTTED = re.compile(r"^(?:airflow_gpu_dag|core)(?:\.[a-z_A-Z]+)+$")


_IN_DIAGRAM = re.compile(r"[a-z_]+(?:/[a-z_]+)+(?:\.[a-z_]+)?/?|[a-z_]+/|core(?:\.[a-z_]+)+")


def _page() -> str:
    return PAGE.read_text()


def _names_on_page(text: str) -> set[str]:
    """What the page names in inline code, and the paths and dotted names of its process diagram."""
    names = set(re.findall(r"`([^`\n]+)`", text))
    for block in re.findall(r"```text\n(.*?)```", text, flags=re.S):
        names.update(_IN_DIAGRAM.findall(block))
    return {name.removesuffix(".*") for name in names}


def _defines(module: Path, name: str) -> bool:
    tree = ast.parse(module.read_text(), str(module))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def _exists(name: str) -> bool:
    """A path relative to the package (or to the repository for its other folders), ``folder/module``,
    ``folder/module.attr``,
    a dotted ``core...`` / ``airflow_gpu_dag...`` name down to an object, or a bare ``x.py`` file name."""
    if "/" not in name and "." not in name.removesuffix(".py"):
        if name.startswith("test_"):
            return any((ROOT / "tests").rglob(name))
        return any(PACKAGE.rglob(name))
    if "/" in name:
        base = ROOT if name.split("/")[0] in REPOSITORY_FOLDERS else PACKAGE
        if (base / name).exists() or (base / f"{name}.py").is_file():
            return True
        stem, _, attr = name.rpartition(".")
        return bool(attr) and (base / f"{stem}.py").is_file() and _defines(base / f"{stem}.py", attr)
    parts = name.removeprefix("airflow_gpu_dag.").split(".")
    for i in range(len(parts), 0, -1):
        path = PACKAGE.joinpath(*parts[:i])
        rest = parts[i:]
        for module in (path.with_suffix(".py"), path / "__init__.py"):
            if module.is_file():
                return len(rest) == 0 or (len(rest) == 1 and _defines(module, rest[0]))
    return False


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line starts with ``header``, cell by cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _architecture_rules() -> dict[str, dict[str, int]]:
    """``LAYERS`` and ``CORE_GROUPS`` as test_architecture.py writes them (read, not imported)."""
    (path,) = (ROOT / "tests").rglob("test_architecture.py")
    rules = {}
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in ("LAYERS", "CORE_GROUPS")
            and node.value is not None
        ):
            rules[node.target.id] = ast.literal_eval(node.value)
    return rules


def test_every_module_the_page_names_exists() -> None:
    names = sorted(
        name
        for name in _names_on_page(_page())
        if (_PATH.match(name) or _DOTTED.match(name) or name.endswith(".py")) and "<" not in name
    )
    assert len(names) > 60, names
    missing = [name for name in names if not _exists(name)]
    assert not missing, f"docs/architecture.md names what does not exist (moved? renamed?): {missing}"


def test_the_check_sees_a_stale_name() -> None:
    assert _exists("airflow/dag_reader.py") and _exists("airflow/history.learned_task_graph")
    assert _exists("core.policy.reservation.decide_pool") and _exists("benchmarks/makespan.py")
    assert not _exists("airflow/graph.py") and not _exists("airflow/history.plan_dag")
    assert not _exists("core.planning.planner.no_such_thing") and not _exists("hints.py")


def test_every_package_folder_and_core_group_is_named() -> None:
    named = {name.rstrip("/") for name in _names_on_page(_page())}
    inits = [init for init in PACKAGE.rglob("__init__.py") if init.parent != PACKAGE]
    folders = sorted(str(init.parent.relative_to(PACKAGE)) for init in inits)
    assert "core/model" in folders
    missing = [folder for folder in folders if folder not in named]
    assert not missing, f"docs/architecture.md does not name these package folders: {missing}"


def test_the_layers_table_is_the_architecture_tests_layers() -> None:
    rows = _table_rows(_page(), "| layer | package or module |")
    on_page = {}
    for layer, name, *_ in rows:
        key = name.strip("`").rstrip("/").removesuffix(".py")
        assert key not in on_page, f"{name} is in the layers table twice"
        on_page[key] = int(layer)
    assert on_page == _architecture_rules()["LAYERS"]


def test_the_core_groups_table_is_core_groups_and_names_every_core_module() -> None:
    rows = _table_rows(_page(), "| level | group |")
    on_page = {}
    for level, group, holds in rows:
        name = group.strip("`").removeprefix("core/").rstrip("/")
        on_page[name] = int(level)
        modules = sorted(p.name for p in (PACKAGE / "core" / name).glob("*.py") if p.name != "__init__.py")
        unnamed = [m for m in modules if f"`{m}`" not in holds]
        assert not unnamed, f"the core/{name}/ row of docs/architecture.md does not name {unnamed}"
    assert on_page == _architecture_rules()["CORE_GROUPS"]
    assert {p.parent.name for p in (PACKAGE / "core").glob("*/__init__.py")} == set(on_page)
