"""The inspector's JavaScript (shared/api/inspector/app) as its own tools check it (shared/api/inspector/package.json,
installed by `make test`): ESLint, tsc --checkJs, and the unit tests of its logic that needs no page (ANSI parsing,
the log model, addresses, the group model) by node's own test runner; the browser tests prove it on the page."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import PROJECT

TOOLS = PROJECT / "shared" / "api" / "inspector"  # the inspector's room: its app, tests and tools
UNITS = TOOLS / "tests" / "inspector_units.mjs"
pytestmark = [
    pytest.mark.habits,  # runs the inspector's tools: `make lint`
    pytest.mark.skipif(shutil.which("npm") is None, reason="needs node and npm (make test installs Azurite with them)"),
    pytest.mark.skipif(not (TOOLS / "node_modules").is_dir(), reason="make test installs shared/api/inspector first"),
]


def npm(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["npm", "--prefix", str(TOOLS), "run", "--silent", script], capture_output=True, text=True, timeout=180
    )


def test_the_inspectors_logic_passes_its_node_tests():
    done = npm("test")
    assert done.returncode == 0, done.stdout + done.stderr
    declared = len(re.findall(r"^test\(", UNITS.read_text(), re.M))
    assert declared > 0
    assert f"# pass {declared}\n" in done.stdout and "# fail 0\n" in done.stdout, done.stdout[-800:]


def test_eslint_finds_nothing():
    done = npm("lint")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_javascript_type_checks():
    done = npm("typecheck")
    assert done.returncode == 0, done.stdout + done.stderr
