"""The changelog is kept with each change: a fragment per change in changes/ (`<issue>.<type>.md`), which towncrier
joins into CHANGELOG.md at a release."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import PROJECT

pytestmark = pytest.mark.habits  # runs tools: `make lint`

CONFIG = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["towncrier"]


def test_every_fragment_names_its_issue_and_a_known_type():
    types = {t["directory"] for t in CONFIG["type"]}
    fragments = [p for p in (PROJECT / CONFIG["directory"]).iterdir() if not p.name.startswith(".")]
    for fragment in fragments:
        match = re.fullmatch(r"(\d+)\.([a-z]+)(\.\d+)?\.md", fragment.name)
        assert match and match.group(2) in types, f"{fragment.name}: name it <issue>.<{'|'.join(sorted(types))}>.md"
        assert fragment.read_text().strip(), f"{fragment.name} is empty"


def test_the_unreleased_fragments_join_into_a_draft_release():
    draft = subprocess.run(
        [sys.executable, "-m", "towncrier", "build", "--draft", "--version", "next"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert draft.returncode == 0, draft.stderr
    for fragment in (PROJECT / CONFIG["directory"]).glob("*.md"):
        first_words = " ".join(fragment.read_text().split()[:6])
        assert first_words in " ".join(draft.stdout.split()), fragment.name
    assert CONFIG["start_string"].strip() in (PROJECT / CONFIG["filename"]).read_text()
