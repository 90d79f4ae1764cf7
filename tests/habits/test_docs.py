"""The docs that are generated from the code are current, every route declares its scopes, and no doc or comment
points at a file that is not there."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from shared.api.auth_v1 import api as auth_api
from shared.api.index_v1 import api as index_api
from shared.api.object_v1 import api as object_api
from shared.api.purge_cache_v1 import api as purge_cache_api
from shared.api.queue_v1 import api
from shared.api.queue_v1.tasks import CREATE_TASK_SCOPES
from shared.api.reference import render
from shared.api.routing import render_scopes

pytestmark = pytest.mark.habits  # runs tools: `make lint`

PROJECT = Path(__file__).resolve().parents[2]


def test_api_reference_is_current():
    rendered = render([api, object_api, auth_api, index_api, purge_cache_api])
    assert (PROJECT / "docs" / "api.md").read_text() == rendered, (
        "docs/api.md is stale: run `python -m shared.api.reference > docs/api.md`"
    )


def test_every_route_declares_scopes_or_is_public_on_purpose():
    monitoring = {"ping", "heartbeat", "lbheartbeat", "version"}
    public = {r.name for r in api.routes if r.scopes is None}
    # uploadArtifactData is authorized by its URL's signature, as a presigned S3 URL is (operations/s3_uploads.py)
    assert public == {*monitoring, "uploadArtifactData"}
    assert {r.name for r in object_api.routes if r.scopes is None} == {*monitoring, "uploadObjectData"}
    # What a caller asks about its own credentials needs none, nor what other services ask about their callers
    # and client libraries about their signing (as in Taskcluster's auth service).
    assert {r.name for r in auth_api.routes if r.scopes is None} == {
        *monitoring,
        "currentScopes",
        "authenticateHawk",
        "testAuthenticate",
        "testAuthenticateGet",
    }
    assert {r.name for r in purge_cache_api.routes if r.scopes is None} == monitoring


def test_create_task_scopes_render_like_taskclusters():
    rendered = render_scopes(
        CREATE_TASK_SCOPES,
        {
            "scopes": ["secrets:get:a"],
            "routes": ["index.x"],
            "projectId": "proj",
            "schedulerId": "sched",
            "priorities": ["highest", "very-high"],
            "provisionerId": "prov",
            "workerType": "wt",
        },
    )
    assert rendered == {
        "AllOf": [
            "secrets:get:a",
            "queue:route:index.x",
            "queue:create-task:project:proj",
            "queue:scheduler-id:sched",
            {"AnyOf": ["queue:create-task:highest:prov/wt", "queue:create-task:very-high:prov/wt"]},
        ]
    }


# A path a doc or a comment names: a folder of the repository, then a file with an extension.
POINTER = re.compile(
    r"(?<![\w/.-])((?:shared|local_host|functions|tests|bench|tools|infra|docs|\.ci)/[\w/.-]*\w"
    r"\.(?:py|js|mjs|md|bicep|yml|yaml|json|css|html|toml|sh))(?!\w)"
)
# A bare module name in the server's own comments (`(claims.py, follow_up.py)`): some file of that name exists.
BARE = re.compile(r"(?<![\w/.-])([a-z_][a-z0-9_]*\.(?:py|js))(?!\w)")
GENERATED = {"shared/build.json"}  # written when the app is packaged (shared/version.py)
OUTSIDE = {"signaturevalidator.js"}  # Taskcluster's own files, named where this code follows them
INSPECTOR_TESTS = "shared/api/inspector/tests/"  # its log corpora quote other projects' files
JOURNALS = ("CHANGELOG.md", "docs/performance-history.md")  # what was, in the words of the day


def tracked() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=PROJECT, capture_output=True, text=True, check=True).stdout.split()


def test_no_doc_or_comment_points_at_a_file_that_is_not_there():
    files = tracked()
    if not files:  # not a git checkout (a package): nothing to hold
        return
    known = set(files) | GENERATED
    names = {Path(f).name for f in files} | OUTSIDE
    stale = []
    for name in files:
        if not re.search(r"\.(py|js|mjs|md|bicep|toml)$", name) or name.startswith(("shared/schemas/", "changes/")):
            continue
        if name in JOURNALS or name == "tests/habits/test_habits.py":  # the habits test names made-up modules
            continue
        text = (PROJECT / name).read_text()
        stale += [f"{name}: {m.group(1)}" for m in POINTER.finditer(text) if m.group(1) not in known]
        if name.startswith("shared/") and not name.startswith(INSPECTOR_TESTS):
            stale += [f"{name}: {m.group(1)}" for m in BARE.finditer(text) if m.group(1) not in names]
    assert not stale, f"pointers to files that are not there: {stale}"


def test_the_docs_map_names_every_doc():
    readme = (PROJECT / "docs" / "README.md").read_text()
    for doc in sorted((PROJECT / "docs").glob("*.md")):
        if doc.name != "README.md":
            assert f"]({doc.name}" in readme, f"docs/README.md does not name {doc.name}"


def test_the_glossary_names_symbols_that_are_in_the_files_it_names():
    """A glossary row's `where` names files and, in brackets, a symbol defined there: `release` once pointed at a
    file that did not define it. Each (file, symbol) pair is checked, a symbol against the file named just before."""
    wrong = []
    for row in (PROJECT / "docs" / "glossary.md").read_text().splitlines():
        if not row.startswith("| **"):
            continue
        where = row.rstrip(" |").rsplit("|", 1)[1]
        for path, symbol in re.findall(r"`([\w/.]+\.py)` \(`(\w+)`\)", where):
            text = (PROJECT / path).read_text()
            if not re.search(rf"^\s*(?:async def|def|class) {symbol}\b|^{symbol}\b\s*[:=]", text, re.MULTILINE):
                wrong.append(f"{path}: {symbol}")
    assert not wrong, f"the glossary names symbols its files do not define: {wrong}"


def test_the_docs_map_has_a_row_for_every_room():
    """Every top-level folder and every package of shared/ is named in the map's rooms (docs/README.md)."""
    readme = (PROJECT / "docs" / "README.md").read_text()
    rooms = readme.split("## Rooms", 1)[1].split("##", 1)[0]
    folders = {Path(f).parts[0] for f in tracked() if len(Path(f).parts) > 1}
    packages = {f"shared/{Path(f).parts[1]}" for f in tracked() if f.startswith("shared/") and len(Path(f).parts) > 2}
    missing = sorted(name for name in folders | packages if f"`{name}/" not in rooms)
    assert not missing, f"docs/README.md's rooms do not name: {missing}"
