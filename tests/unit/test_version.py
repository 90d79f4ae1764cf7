"""shared/version.py: the version object from a package's build file, or from the checkout."""

from __future__ import annotations

import json

from shared import __version__, version


def test_a_packaged_build_file_names_the_commit_and_build(tmp_path, monkeypatch):
    build = tmp_path / "build.json"
    build.write_text(json.dumps({"source": "https://example.com/q.git", "commit": "abc123", "build": "packaged x"}))
    monkeypatch.setattr(version, "BUILD_FILE", build)
    version.version_object.cache_clear()
    try:
        assert version.version_object() == {
            "source": "https://example.com/q.git",
            "version": __version__,
            "commit": "abc123",
            "build": "packaged x",
        }
    finally:
        version.version_object.cache_clear()


def test_writing_the_build_file_records_this_checkouts_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(version, "BUILD_FILE", tmp_path / "build.json")
    written = version.write_build_file()
    stored = json.loads((tmp_path / "build.json").read_text())
    assert stored["commit"] == written["commit"] == version.from_checkout()["commit"]
    assert len(stored["commit"].removesuffix("-dirty")) == 40 and stored["build"].startswith("packaged ")


def test_without_git_or_a_build_file_it_says_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(version, "PROJECT", tmp_path)  # no checkout here
    assert version.from_checkout() == {
        "source": "tc-azure-queue",
        "version": __version__,
        "commit": "unknown",
        "build": "unknown",
    }


def test_the_source_never_says_a_token_or_a_local_path():
    cases = {
        "https://gitlab-ci-token:glcbt-SECRET@gitlab.example.com/group/queue.git": (
            "https://gitlab.example.com/group/queue.git"
        ),
        "https://user:pass@github.com:8443/o/r": "https://github.com:8443/o/r",
        "git@github.com:owner/repo.git": "https://github.com/owner/repo.git",
        "ssh://git@github.com/owner/repo.git": "https://github.com/owner/repo.git",
        "https://github.com/o/r?token=x#frag": "https://github.com/o/r",
        "/home/someone/work/queue": "tc-azure-queue",
        "file:///srv/git/queue.git": "tc-azure-queue",
        "../queue": "tc-azure-queue",
        "C:/work/queue": "tc-azure-queue",
        "": "tc-azure-queue",
    }
    for origin, shown in cases.items():
        assert version.public_source(origin) == shown, origin


def test_a_build_file_written_before_is_answered_without_its_token(tmp_path, monkeypatch):
    build = tmp_path / "build.json"
    build.write_text(json.dumps({"source": "https://u:t0ken@example.com/q.git", "commit": "c", "build": "b"}))
    monkeypatch.setattr(version, "BUILD_FILE", build)
    version.version_object.cache_clear()
    try:
        assert version.version_object()["source"] == "https://example.com/q.git"
    finally:
        version.version_object.cache_clear()
