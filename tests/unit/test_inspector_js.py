"""The inspector's JavaScript logic that needs no page (ANSI parsing, the log model, addresses, the group model),
tested by node's own test runner (tests/unit/js/inspector_units.mjs); the browser tests prove it on the page."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import PROJECT


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node (make test installs it with Azurite)")
def test_the_inspectors_logic_passes_its_node_tests():
    done = subprocess.run(
        ["node", "--test", str(PROJECT / "tests" / "unit" / "js" / "inspector_units.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# pass 8" in done.stdout and "# fail 0" in done.stdout
