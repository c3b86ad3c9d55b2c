"""Honest dependencies: what the package imports is what ``pyproject.toml`` declares, and
``constraints.txt`` pins every declared distribution at a version the declaration accepts.

Every ``import`` of ``airflow_gpu_dag/`` (parsed with :mod:`ast`, never executed) is mapped to the
distribution that provides it with :func:`importlib.metadata.packages_distributions`; for the
``airflow`` namespace, which many distributions share (core, task SDK, providers), the distribution
whose files hold the imported module wins. Then:

- an import that is not guarded by ``try: ... except ImportError`` must be a main dependency;
- a guarded (optional) import must be in an extra (e.g. ``pynvml`` in ``[nvml]``);
- every main dependency must be imported somewhere (nothing declared "just in case");
- the example DAGs (``dags/``) may use the main dependencies and the ``[examples]`` extra."""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


PACKAGE = "airflow_gpu_dag"


#: Distributions that provide another one's modules: ``apache-airflow`` is the meta-package users
#: install; it pins ``apache-airflow-core`` (where ``airflow.models``, ``airflow.configuration``, ...
#: live) to its own version.
PROVIDED_BY = {"apache-airflow-core": "apache-airflow"}


#: Main dependencies that are imported by no module on purpose.
DECLARED_NOT_IMPORTED = {
    "apache-airflow": "the meta-package; its apache-airflow-core is what the modules import",
}


IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class Import:
    module: str  # the module named (``airflow.sdk``, or ``airflow.plugins_manager`` for from-imports)
    path: Path
    line: int
    guarded: bool

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} imports {self.module}"


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in IMPORT_ERRORS for t in types)


def imports_of(path: Path) -> Iterator[Import]:
    """Every absolute import in ``path``, with whether a ``try`` that catches ImportError guards it."""
    tree = ast.parse(path.read_text(), str(path))

    def visit(node: ast.AST, guarded: bool) -> Iterator[Import]:
        if isinstance(node, ast.Try):
            body_guarded = guarded or any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                yield from visit(child, body_guarded)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                yield from visit(child, guarded)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, path, node.lineno, guarded)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                # ``from airflow import plugins_manager`` imports the module airflow.plugins_manager
                yield Import(f"{node.module}.{alias.name}", path, node.lineno, guarded)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, guarded)

    yield from visit(tree, False)


def third_party(paths: list[Path]) -> list[Import]:
    found = []
    for path in paths:
        for imp in imports_of(path):
            top = imp.module.split(".")[0]
            if top in sys.stdlib_module_names or top in (PACKAGE, "__future__"):
                continue
            found.append(imp)
    return found


@cache
def _files(distribution: str) -> frozenset[str]:
    return frozenset(str(f) for f in metadata.distribution(distribution).files or ())


@cache
def _packages_distributions() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())


@cache
def distribution_of(module: str) -> str:
    """The canonical name of the installed distribution that provides ``module``."""
    parts = module.split(".")
    candidates = sorted(set(_packages_distributions().get(parts[0], [])))
    if not candidates:
        raise LookupError(f"no installed distribution provides {parts[0]!r}")
    if len(candidates) > 1:  # a shared namespace (airflow): the deepest module a distribution holds
        for depth in range(len(parts), 0, -1):
            stem = "/".join(parts[:depth])
            owners = [d for d in candidates if {f"{stem}.py", f"{stem}/__init__.py"} & _files(d)]
            if owners:
                candidates = owners
                break
    if len(candidates) != 1:
        raise LookupError(f"{module} is provided by several distributions: {candidates}")
    return canonicalize_name(candidates[0])


def _project() -> dict:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def requirements(group: str | None = None) -> list[Requirement]:
    """The main dependencies (``group=None``) or one extra's, without self-references."""
    project = _project()
    raw = project["dependencies"] if group is None else project["optional-dependencies"][group]
    own = canonicalize_name(project["name"])
    return [r for r in map(Requirement, raw) if canonicalize_name(r.name) != own]


def declared(group: str | None = None) -> set[str]:
    return {canonicalize_name(r.name) for r in requirements(group)}


def extras() -> list[str]:
    return sorted(_project()["optional-dependencies"])


def pins() -> dict[str, str]:
    pinned = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not NAME==VERSION"
            pinned[canonicalize_name(name)] = version.strip()
    return pinned


def _provides(declarations: set[str], distribution: str) -> bool:
    return distribution in declarations or PROVIDED_BY.get(distribution) in declarations


def _package_files() -> list[Path]:
    return sorted((ROOT / PACKAGE).rglob("*.py"))


def test_the_scanner_sees_guards_and_from_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import yaml\nfrom airflow import plugins_manager\n"
        "def f():\n    try:\n        import pynvml\n    except ImportError:\n        import json\n"
        "try:\n    import rich\nexcept ValueError:\n    pass\n"
    )
    found = {(i.module, i.guarded) for i in imports_of(source)}
    assert found == {
        ("yaml", False),
        ("airflow.plugins_manager", False),
        ("pynvml", True),
        ("json", False),
        ("rich", False),  # a ValueError handler guards no import
    }
    assert distribution_of("yaml") == "pyyaml"
    assert distribution_of("airflow.sdk.BaseHook") == "apache-airflow-task-sdk"
    assert distribution_of("airflow.plugins_manager") == "apache-airflow-core"
    assert distribution_of("airflow.providers.cncf.kubernetes.operators.pod") == (
        "apache-airflow-providers-cncf-kubernetes"
    )


def test_every_import_of_the_package_is_declared() -> None:
    main = declared()
    optional = set().union(*(declared(e) for e in extras()))
    problems = []
    for imp in third_party(_package_files()):
        try:
            dist = distribution_of(imp.module)
        except LookupError as err:
            problems.append(f"{imp}: {err}")
            continue
        if _provides(main, dist):
            continue
        if imp.guarded and _provides(optional, dist):
            continue
        where = "an extra of" if imp.guarded else "[project] dependencies of"
        problems.append(f"{imp} ({dist}): declare {dist} in {where} pyproject.toml")
    assert not problems, "undeclared imports:\n" + "\n".join(problems)


def test_every_main_dependency_is_imported() -> None:
    used = {distribution_of(i.module) for i in third_party(_package_files())}
    used |= {PROVIDED_BY[d] for d in used if d in PROVIDED_BY}
    unused = declared() - used - set(DECLARED_NOT_IMPORTED)
    assert not unused, (
        f"pyproject.toml declares {sorted(unused)} as dependencies but airflow_gpu_dag imports none of "
        "them: move them to the extra that uses them (test, examples, ...) or drop them"
    )


def test_example_dags_use_declared_distributions() -> None:
    allowed = declared() | declared("examples")
    problems = []
    for imp in third_party(sorted((ROOT / "dags").glob("*.py"))):
        dist = distribution_of(imp.module)
        if not _provides(allowed, dist):
            problems.append(f"{imp} ({dist}): add it to the [examples] extra")
    assert not problems, "\n".join(problems)


def test_test_only_distributions_are_not_runtime_dependencies() -> None:
    assert {"requests", "networkx", "pytest", "hypothesis"}.isdisjoint(declared())
    assert {"requests", "networkx"} <= declared("test")


@pytest.mark.parametrize("group", [None, *extras()])
def test_constraints_pin_every_declared_distribution(group: str | None) -> None:
    pinned = pins()
    for req in requirements(group):
        name = canonicalize_name(req.name)
        assert name in pinned, f"constraints.txt does not pin {req.name} (declared in {group or 'main'})"
        assert req.specifier.contains(Version(pinned[name]), prereleases=True), (
            f"constraints.txt pins {req.name}=={pinned[name]}, which {req} does not accept"
        )
        for extra in req.extras:  # mkdocstrings[python] -> mkdocstrings-python, ...
            for sub in metadata.requires(req.name) or []:
                sub_req = Requirement(sub)
                if (
                    sub_req.marker
                    and sub_req.marker.evaluate({"extra": extra})
                    and not sub_req.marker.evaluate({"extra": ""})
                ):
                    assert canonicalize_name(sub_req.name) in pinned, (
                        f"constraints.txt does not pin {sub_req.name} (from {req})"
                    )


def test_installed_versions_are_the_pinned_ones() -> None:
    """CI installs with ``-c constraints.txt``: a declared distribution at another version here means
    the pin and the environment drifted apart (update the pin, or reinstall)."""
    pinned = pins()
    wrong = []
    for group in [None, *extras()]:
        for req in requirements(group):
            name = canonicalize_name(req.name)
            installed = metadata.version(req.name)
            if Version(installed) != Version(pinned[name]):
                wrong.append(f"{req.name}: installed {installed}, constraints.txt {pinned[name]}")
    assert not wrong, "\n".join(wrong)


def test_constraints_have_no_duplicates_and_are_sorted() -> None:
    names = [
        line.split("==", 1)[0]
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    canonical = [canonicalize_name(n) for n in names]
    assert len(canonical) == len(set(canonical)), "constraints.txt pins a distribution twice"
    lowered = [n.lower() for n in names]
    assert lowered == sorted(lowered), "keep constraints.txt sorted as pip freeze sorts (merges stay easy)"
