"""docs/cli.md lists the finding codes ``airflow gpu-dag lint`` really emits, and only those."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_CODE = re.compile(r"^[a-z]+(?:-[a-z0-9]+)*$")
#: The calls that give a finding its code: ``Finding(severity, code, ...)``, a contract problem
#: ``problem(key, code, ...)`` / ``ContractProblem(key, code, ...)``, ``replace(finding, code=...)``.
_CODE_ARGUMENT = {"Finding": 1, "ContractProblem": 1, "problem": 1}
#: The codes a GPU task's declaration can raise with (operators/gpu_spec.py, gpu_partial.py, @task.gpu),
#: besides the request checks of core/analysis/gpu_requests.py.
DECLARATION_CODES = {
    "bad-gpu-request",
    "bad-estimate",
    "bad-lease-timeout",
    "pool-slots-mismatch",
    "gpu-in-default-pool",
    "unknown-gpu-keyword",
    "mapped-gpu-request",
    "impossible-request",
    "unknown-gpu-type",
    "implausible-gpu-memory",
    "pool-type-mismatch",
    "bad-pool-name",
}


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def emitted_codes() -> set[str]:
    """Every code a finding of the package's source is built with (the ``import-error`` row of lint's
    plain output included)."""
    codes: set[str] = set()
    for path in (ROOT / "airflow_gpu_dag").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                index = _CODE_ARGUMENT.get(_name(node.func))
                values = node.args[index : index + 1] if index is not None else []
                values += [k.value for k in node.keywords if k.arg == "code"]
            elif isinstance(node, ast.Dict) and path.name == "lint.py":  # its rows of import errors
                values = [
                    v
                    for k, v in zip(node.keys, node.values, strict=True)
                    if getattr(k, "value", None) == "code"
                ]
            else:
                continue
            codes |= {v.value for v in values if isinstance(v, ast.Constant) and _CODE.match(str(v.value))}
    return codes


def documented_codes() -> set[str]:
    """The codes in the first column of docs/cli.md's table of lint findings."""
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text.split("| Code | Severity | Meaning |", 1)[1].split("\n\n", 1)[0]
    return {code for row in table.splitlines()[2:] for code in re.findall(r"`([^`]+)`", row.split("|")[1])}


def test_every_code_docs_cli_lists_is_one_lint_can_emit() -> None:
    assert documented_codes() - emitted_codes() == set()


def test_every_code_lint_can_emit_is_listed_in_docs_cli() -> None:
    assert emitted_codes() - documented_codes() == set()


def test_the_gpu_declaration_codes_are_emitted_and_listed() -> None:
    assert DECLARATION_CODES - emitted_codes() == set()
    assert DECLARATION_CODES - documented_codes() == set()
