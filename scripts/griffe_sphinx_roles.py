"""A griffe extension for the API reference (mkdocs.yml): Sphinx cross-reference roles -> links.

The package's docstrings are Sphinx-style (``:param x:``, ``:class:`TaskGraph```). mkdocstrings'
Sphinx parser reads the fields but leaves the roles as text; this extension rewrites every
``:class:``, ``:func:``, ``:meth:``, ``:attr:``, ``:mod:``, ``:data:``, ``:exc:`` and ``:obj:`` role into
an mkdocs-autorefs link (``[`TaskGraph`][airflow_gpu_dag.core.model.graph.TaskGraph]``) when its target
is an object of the package that the reference renders, resolving names as Python would from where
the docstring is (``:meth:`stop``` inside a class, an imported name in a module, ``~`` for the short
form; ``.name`` for the one object whose path ends so, as in Sphinx). Any other target (a private
helper, an Airflow class) becomes inline code. A reST literal-block marker (``Example::``) becomes
a plain colon.

``python scripts/griffe_sphinx_roles.py`` lists the roles it could not link.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import griffe

PACKAGE = "airflow_gpu_dag"
ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|exc|obj):`(~?)([\w.]+)(?:\(\))?`")
LITERAL_BLOCK = re.compile(r"(\S)::(\n[ \t]*\n)")


@dataclass
class Report:
    """What one run linked, and what it left as code (``(docstring owner, role text)``)."""

    linked: int = 0
    unlinked: list[tuple[str, str]] = field(default_factory=list)


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)  # type: ignore[arg-type]


def _documented(obj: griffe.Object | griffe.Alias) -> bool:
    """Rendered by the reference: inside the package, no private part on its path."""
    return obj.path.split(".")[0] == PACKAGE and not any(
        part.startswith("_") and not part.startswith("__") for part in obj.path.split(".")
    )


KINDS = {"mod": "module", "class": "class", "exc": "class", "func": "function", "meth": "function"}


def _by_suffix(owner: griffe.Object, suffix: str, role: str) -> str | None:
    """Sphinx's ``.name`` form: the one rendered object of the role's kind whose path ends with ``.name``."""
    package = owner.modules_collection[PACKAGE]
    kind = KINDS.get(role)
    found = {
        o.path
        for o in _walk(package)
        if o.path.endswith(f".{suffix}") and _documented(o) and (kind is None or o.kind.value == kind)
    }
    return found.pop() if len(found) == 1 else None


def resolve(owner: griffe.Object, name: str, role: str = "obj") -> str | None:
    """The canonical path of ``name`` as seen from ``owner``'s docstring, if the reference renders it."""
    if name.startswith("."):
        return _by_suffix(owner, name.lstrip("."), role)
    collection = owner.modules_collection
    first, _, rest = name.partition(".")
    candidates = []
    if first == PACKAGE:
        candidates.append(name)
    scope: griffe.Object | None = owner
    while scope is not None:  # the owner's scope, then its parents' (a method, its class, the module)
        try:
            base = scope.resolve(first)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        candidates.append(f"{base}.{rest}" if rest else base)
        break
    for path in candidates:
        try:
            target = collection.get_member(path)
            if target.is_alias:
                target = target.final_target
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        if _documented(target):
            return str(target.path)
    return None


def rewrite(owner: griffe.Object, text: str, report: Report) -> str:
    def link(match: re.Match[str]) -> str:
        role, short, name = match.groups()
        shown = name.rsplit(".", 1)[-1] if short else name.lstrip(".")
        path = resolve(owner, name, role)
        if path is None:
            report.unlinked.append((owner.path, match.group(0)))
            return f"`{shown}`"
        report.linked += 1
        return f"[`{shown}`][{path}]"

    return LITERAL_BLOCK.sub(r"\1:\2", ROLE.sub(link, text))


def convert(package: griffe.Module, report: Report | None = None) -> Report:
    """Rewrite the roles of every docstring of ``package`` in place."""
    report = report or Report()
    for obj in _walk(package):
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj, obj.docstring.value, report)
    return report


class SphinxRoles(griffe.Extension):
    """The griffe extension (mkdocs.yml: ``extensions: [scripts/griffe_sphinx_roles.py:SphinxRoles]``)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name == PACKAGE:
            convert(pkg)


def main() -> int:
    package = griffe.load(PACKAGE, search_paths=["."], docstring_parser=griffe.Parser.sphinx)
    report = convert(package)  # type: ignore[arg-type]
    for owner, role in report.unlinked:
        print(f"{owner}: {role}")
    print(f"{report.linked} roles linked, {len(report.unlinked)} left as code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
