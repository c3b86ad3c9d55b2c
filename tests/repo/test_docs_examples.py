"""What users copy from README.md and docs/*.md works against the code: the example DAG files build,
every ``airflow gpu-dag`` command line shown parses with the real CLI definition, every ``[gpu_dag]``
option named exists, and every ``airflow_gpu_dag.*`` name mentioned can be imported.

(tests/repo/test_readme.py checks what the README's DAG plans; docs/configuration.md itself is
checked by tests/repo/test_configuration_docs.py; the benchmark pages are figures, not examples.)"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


_FENCE = re.compile(r"^(\s*)```+\s*([\w-]*)")


def _blocks(page: Path) -> list[tuple[str, int, str]]:
    """(language, first line number, text) of every fenced block of ``page``."""
    lines = page.read_text().splitlines()
    out: list[tuple[str, int, str]] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, lang = len(match.group(1)), match.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        out.append((lang, i + 2, "\n".join(line[indent:] for line in lines[i + 1 : j])))
        i = j + 1
    return out


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _is_preamble(code: str) -> bool:
    """A block of imports only: the page's later blocks build on it (docs/edges.md)."""
    body = [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return bool(body) and all(line.startswith(("from ", "import ", "    ", ")")) for line in body)


def _dag_examples() -> list[Any]:
    cases = []
    for page in PAGES:
        preamble = ""
        for lang, line, code in _blocks(page):
            if lang != "python":
                continue
            if _is_preamble(code):
                preamble += code + "\n"
                continue
            if "DAG(" in code or "@dag" in code:
                cases.append(pytest.param(page, line, preamble + code, id=f"{_rel(page)}:{line}"))
    return cases


def _command_lines() -> list[tuple[str, str, bool]]:
    """(where, command after ``airflow``, is_synopsis) of every ``airflow gpu-dag`` line shown."""
    found: list[tuple[str, str, bool]] = []
    for page in PAGES:
        for lang, first, code in _blocks(page):
            if lang not in ("", "console", "bash", "sh", "text", "yaml", "shell"):
                continue
            lines = code.splitlines()
            k = 0
            while k < len(lines):
                line, where = lines[k], f"{_rel(page)}:{first + k}"
                while line.rstrip().endswith("\\") and k + 1 < len(lines):
                    k += 1
                    line = line.rstrip()[:-1] + " " + lines[k].strip()
                k += 1
                # not `airflow gpu-dag watermark: ...`, a pool description the controller writes
                match = re.match(
                    r"^\s*(?:\$\s+|- run:\s+)?airflow gpu-dag(\s+[a-z-]+(?![:\w-]).*|\s+--help)$", line
                )
                if not match:
                    continue
                command = re.split(r"\s#|\s\|\s", match.group(1))[0].strip()
                found.append((where, "gpu-dag " + command, "[" in command or " ..." in command))
        for number, text in enumerate(page.read_text().splitlines(), 1):
            for span in re.findall(r"`airflow (gpu-dag [a-z-]+ [^`]*)`", text):
                found.append((f"{_rel(page)}:{number}", span, True))
    return found


def _options_of() -> dict[str, set[str]]:
    from airflow_gpu_dag.cli.definition import get_gpu_dag_cli_commands

    (group,) = get_gpu_dag_cli_commands()
    return {
        command.name: {flag for arg in command.args for flag in arg.flags if flag.startswith("-")}
        for command in group.subcommands
    }


_NOT_OPTIONS = {"option", "options", "section", "settings", "and", "or"}


_FILES = (".py", ".yaml", ".json", ".cfg")


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for part in parts[k:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


@pytest.mark.parametrize(("page", "line", "code"), _dag_examples())
def test_example_dag_builds(page: Path, line: int, code: str, tmp_path: Path) -> None:
    """Parsed as Airflow parses a DAG file (cluster policies included): no import error, a DAG."""
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / f"doc_example_{line}.py"
    path.write_text(code + "\n")
    bag = DagBag(dag_folder=str(path))
    assert not bag.import_errors, f"{_rel(page)}:{line}: {bag.import_errors}"
    assert bag.dag_ids, f"{_rel(page)}:{line} builds no DAG"


def test_the_dag_examples_are_found() -> None:
    ids = {case.id for case in _dag_examples()}
    for page in (
        "README.md",
        "docs/getting-started.md",
        "docs/gpu-tasks.md",
        "docs/kubernetes.md",
        "docs/edges.md",
    ):
        assert any(case.startswith(page + ":") for case in ids), page


def test_every_command_line_shown_parses() -> None:
    from airflow_gpu_dag.cli.definition import get_parser

    parser = get_parser()
    options = _options_of()
    lines = _command_lines()
    assert len(lines) > 20, lines
    problems = []
    for where, command, synopsis in lines:
        tokens = shlex.split(command)
        if tokens == ["gpu-dag", "--help"]:
            continue
        if len(tokens) < 2 or tokens[1] not in options:
            problems.append(f"{where}: unknown subcommand in {command!r}")
            continue
        flags = {token.split("=")[0] for token in re.findall(r"(?<![\w-])--?[a-z][\w-]*", command)}
        unknown = sorted(flags - options[tokens[1]] - {"-h", "--help"})
        if unknown:
            problems.append(f"{where}: {tokens[1]} has no {unknown} ({command!r})")
            continue
        if synopsis or "--help" in tokens:
            continue
        try:
            parser.parse_args(tokens)
        except SystemExit as err:  # argparse's error exit
            problems.append(f"{where}: does not parse ({err}): {command!r}")
        except argparse.ArgumentError as err:
            problems.append(f"{where}: does not parse ({err}): {command!r}")
    assert not problems, "\n".join(problems)


def test_every_gpu_dag_option_named_exists() -> None:
    from airflow_gpu_dag.get_provider_info import get_provider_info

    known = set(get_provider_info()["config"]["gpu_dag"]["options"])
    problems = []
    for page in PAGES:
        for number, text in enumerate(page.read_text().splitlines(), 1):
            named = re.findall(r"\[gpu_dag\]`?\s+`?([a-z][a-z0-9_]*)", text)
            named += [m.lower() for m in re.findall(r"AIRFLOW__GPU_DAG__([A-Z0-9_]+)", text)]
            named += re.findall(r"\bgpu_dag\.([a-z][a-z0-9_]*) option", text)
            problems += [
                f"{_rel(page)}:{number}: {name}" for name in named if name not in known | _NOT_OPTIONS
            ]
    missing = "\n".join(problems)
    assert not problems, f"options the docs name that get_provider_info.py does not define:\n{missing}"


def test_every_package_name_mentioned_imports() -> None:
    names: dict[str, str] = {}
    for page in PAGES:
        for number, text in enumerate(page.read_text().splitlines(), 1):
            for match in re.finditer(r"(?<![\w/])airflow_gpu_dag(?:\.[A-Za-z_]\w*)+", text):
                name = match.group(0)
                # a table cell wrapped mid-word ("fix_hidde" + "n_dependencies") or a file path
                if text[match.end() : match.end() + 1] == " " and text.rstrip().endswith("│"):
                    continue
                if name.endswith(_FILES) or "/" in text[match.end() : match.end() + 1]:
                    continue
                names.setdefault(name, f"{_rel(page)}:{number}")
    assert len(names) > 30, names
    broken = [f"{where}: {name}" for name, where in sorted(names.items()) if not _resolves(name)]
    assert not broken, "names the docs mention that do not import:\n" + "\n".join(broken)
