"""Every structured log call names only known fields: `fields(...)` raises on an unknown one, and a call that
runs rarely (a timer that moved parked checks) once failed its function that way, at run time."""

from __future__ import annotations

import ast

from shared.logs import FIELDS
from tests.conftest import PROJECT


def test_every_fields_call_in_the_code_names_known_fields():
    unknown = []
    for folder in ("shared", "functions", "local_host", "worker"):
        for path in sorted((PROJECT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "fields":
                    unknown += [
                        f"{path.relative_to(PROJECT)}:{node.lineno} {k.arg}"
                        for k in node.keywords
                        if k.arg is not None and k.arg not in FIELDS
                    ]
    assert not unknown, f"log fields not in shared/logs.py FIELDS: {unknown}"
