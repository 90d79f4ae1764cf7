"""No module of the service over 500 lines of logic: a module a reader can hold, split by role when it grows
(issues #63, #75).

`python tools/module_size.py` (a pre-commit hook, and tests/habits/test_habits.py) exits non-zero naming each
module over the limit, with its top-level parts, so that it is split by what they do, not cut at a line count.
Declarations are not counted: a module-level constant or table (a dict of exchanges, a tuple of scopes) and a
class that only declares fields (settings, a dataclass record, a TypedDict) are read as a list, not held in mind
as logic; docstrings and comments count. The generated schemas are not modules a reader holds, and are not
counted.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

LIMIT = 500
PACKAGES = ("shared", "functions", "local_host", "worker", "queue_admin", "tools")
ROOT = Path(__file__).resolve().parent.parent
FIELD_STATEMENTS = (ast.AnnAssign, ast.Assign, ast.Pass, ast.Expr)  # an Expr: the class's docstring


def _declares_only(node: ast.ClassDef) -> bool:
    """A class whose body declares fields and nothing else (no method, no nested logic)."""
    return all(isinstance(statement, FIELD_STATEMENTS) for statement in node.body)


def declaration_lines(tree: ast.Module) -> int:
    """The lines of the module's top-level declarations: constants and tables, and classes of fields only."""
    counted = 0
    for node in tree.body:
        declarative = isinstance(node, ast.Assign | ast.AnnAssign) or (
            isinstance(node, ast.ClassDef) and _declares_only(node)
        )
        if declarative and node.end_lineno is not None:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            counted += node.end_lineno - first + 1
    return counted


def parts(tree: ast.Module) -> list[str]:
    """The module's top-level classes and functions: what a split by role sorts out."""
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]


def oversized(root: Path = ROOT) -> list[str]:
    """Each module over LIMIT lines of logic, with its size and its parts."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if "/schemas/" in relative:
                continue
            text = path.read_text()
            tree = ast.parse(text)
            logic = len(text.splitlines()) - declaration_lines(tree)
            if logic > LIMIT:
                named = ", ".join(parts(tree)[:12]) or "no class or function"
                found.append(
                    f"{relative}: {logic} lines of logic (at most {LIMIT}; split it by role: its parts are {named})"
                )
    return found


def main() -> int:
    found = oversized()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
