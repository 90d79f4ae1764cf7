"""The inspector's JavaScript (shared/api/inspector/app) as its own tools check it (shared/api/inspector/package.json,
installed by `make test`): ESLint, tsc --checkJs, and the unit tests of its logic that needs no page (ANSI parsing,
the log model, addresses, the group model) by node's own test runner; the browser tests prove it on the page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from shared.domain.decision_tasks import push_of
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


def test_the_group_page_reads_a_push_as_the_queue_does():
    """The group page names its push from its decision task in JavaScript (pushes.js `pushOf`); the start page's
    pushes come from the queue's reading (shared/domain/decision_tasks.py `push_of`): the two agree on every form."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    cases = [
        {"routes": [f"tc-treeherder.v2.autoland.{rev}.42"]},
        {"routes": [f"tc-treeherder-staging.try.{rev[:12]}"]},
        {"routes": ["index.x", f"index.gecko.v2.mozilla-central.revision.{rev}.taskgraph.decision"]},
        {"payload": {"env": {"GECKO_HEAD_REV": rev, "GECKO_HEAD_REPOSITORY": "https://hg.mozilla.org/try/"}}},
        {"payload": {"env": {"X_HEAD_REV": "not-hex"}}},
        {"metadata": {"source": f"https://github.com/o/repo/blob/{rev}/.taskcluster.yml"}},
        {"metadata": {"source": f"https://hg.mozilla.org/integration/autoland/raw-file/{rev}/.taskcluster.yml"}},
        {"metadata": {"source": "https://example.com/"}},
        {},
    ]
    definitions = [
        {"routes": [], "payload": {}, **case, "metadata": {"name": "d", "source": "", **case.get("metadata", {})}}
        for case in cases
    ]
    script = (
        "import('./app/pushes.js').then(({pushOf}) => console.log(JSON.stringify("
        f"{json.dumps(definitions)}.map(pushOf))))"
    )
    done = subprocess.run(["node", "-e", script], cwd=TOOLS, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    expected = []
    for definition in definitions:
        push = push_of("x", definition)
        expected.append({"project": push["project"], "revision": push["revision"]} if "revision" in push else None)
    for got, want in zip(json.loads(done.stdout), expected, strict=True):
        if want is not None and "project" not in want:
            want = {"project": "", "revision": want["revision"]}
        assert got == want


def test_the_vendored_json_e_is_the_librarys_own_build():
    """app/json-e.js is json-e's dist/index.js unchanged (below its 4-line header), the version package.json pins:
    the page has no build step, so the library's build is served as it is published."""
    vendored = (TOOLS / "app" / "json-e.js").read_text().split("\n", 4)[4]
    published = (TOOLS / "node_modules" / "json-e" / "dist" / "index.js").read_text()
    pinned = json.loads((TOOLS / "package.json").read_text())["devDependencies"]["json-e"]
    assert vendored == published and f"json-e {pinned}" in (TOOLS / "app" / "json-e.js").read_text()[:200]
