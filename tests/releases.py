"""The latest release (RELEASES.md) as code to run: its version and commit, and its tree unpacked from this
repository's history (`git archive`), for the release test and the fault campaign's rollout (bench.soak)."""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

from shared import __version__

PROJECT = Path(__file__).resolve().parent.parent


class ReleaseNotInHistory(RuntimeError):
    """The release's commit is not in this clone's history (a shallow clone?)."""


def latest_release() -> tuple[str, str]:
    """The newest release in RELEASES.md that is not this code's own version: its version and commit."""
    rows = re.findall(r"^\| ([0-9][^ |]*) \| ([0-9a-f]{40}) \|", (PROJECT / "RELEASES.md").read_text(), re.M)
    earlier = [(version, commit) for version, commit in rows if version != __version__]
    assert earlier, "RELEASES.md names no release before this code"
    return earlier[-1]


def unpack_release(folder: Path) -> tuple[str, Path]:
    """The latest release's version and its code, unpacked into `folder`/code."""
    version, commit = latest_release()
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=PROJECT, capture_output=True)
    if known.returncode != 0:
        raise ReleaseNotInHistory(f"release {version} ({commit}) is not in this clone's history (a shallow clone?)")
    archive = folder / "code.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), commit], cwd=PROJECT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "code", filter="data")
    archive.unlink()
    return version, folder / "code"
