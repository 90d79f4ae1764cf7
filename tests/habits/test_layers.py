"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml) are kept."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT

pytestmark = pytest.mark.habits  # runs tools: `make lint`

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(*args: str, cwd: Path = PROJECT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_every_layer_contract_is_kept():
    checked = lint_imports()
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert "0 broken" in checked.stdout
    for contract in (
        "shared's layers",
        "records call no store",
        "no circles",
        "shared knows no entry point",
        "the reference worker is a client of the API",
    ):
        assert f"{contract} KEPT" in checked.stdout


def test_an_import_upward_breaks_the_contracts(tmp_path):
    # A copy of the tree with storage importing operations (one layer reaching up): the contracts catch it.
    copy = tmp_path / "tree"
    for package in ("shared", "functions", "local_host", "worker", "queue_admin"):
        shutil.copytree(PROJECT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    shutil.copy(PROJECT / "pyproject.toml", copy / "pyproject.toml")
    base = copy / "shared" / "storage" / "base.py"
    base.write_text(base.read_text() + "\nfrom shared.operations.writes import stores  # noqa: E402\n")
    checked = lint_imports(cwd=copy)
    assert checked.returncode != 0
    assert "shared.storage is not allowed to import shared.operations" in checked.stdout


def test_records_call_no_store():
    """shared/domain/ holds records: no module there awaits or takes a store (issue #88); stores are shared/stores/."""
    calling = [
        path.name
        for path in sorted((PROJECT / "shared" / "domain").glob("*.py"))
        if any(word in path.read_text() for word in ("await ", "TableStore", "QueueStore", "BlobStore"))
    ]
    assert calling == [], f"these records call a store: move the store to shared/stores/: {calling}"
