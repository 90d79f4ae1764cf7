"""Which release is running: Dockerflow's version object (`source`, `version`, `commit`, `build`), as every
Taskcluster service answers it at `/__version__`.

The version is `shared.__version__` (pyproject.toml reads it from there: one source). The commit and build are
written into `shared/build.json` when the app is packaged (`python -m shared.version write`, the azd `prepackage`
hook); a checkout without that file asks git, and anything else says `unknown`.

    python -m shared.version          # print the version object
    python -m shared.version write    # write shared/build.json for a package of this checkout
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from shared import __version__

BUILD_FILE = Path(__file__).with_name("build.json")
PROJECT = Path(__file__).resolve().parent.parent
SOURCE = "tc-azure-queue"  # the project's name when its origin's URL is not known
UNKNOWN = "unknown"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=PROJECT, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


_SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?([A-Za-z0-9.-]+):(?!/)([^\s]+)$")  # git@github.com:owner/repo.git


def public_source(origin: str | None) -> str:
    """What `/__version__` may say of where the code came from: an http(s) URL without its userinfo (a token in
    `https://user:<token>@host/...`, as CI job checkouts have, stays out), an ssh origin as the https URL of the same
    path, and the project's name for anything else (a local path, `file:`): it is answered to anyone."""
    if not origin:
        return SOURCE
    scp = _SCP_LIKE.match(origin)
    if scp and "://" not in origin:
        return f"https://{scp.group(1)}/{scp.group(2)}"
    parts = urllib.parse.urlsplit(origin)
    if parts.scheme not in ("http", "https", "ssh", "git") or not parts.hostname:
        return SOURCE
    host = parts.hostname + (f":{parts.port}" if parts.port and parts.scheme in ("http", "https") else "")
    scheme = parts.scheme if parts.scheme in ("http", "https") else "https"
    return urllib.parse.urlunsplit((scheme, host, parts.path, "", ""))


def from_checkout() -> dict[str, str]:
    """The commit of this checkout (`-dirty` when it has uncommitted changes), its origin, and a local build."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"source": SOURCE, "version": __version__, "commit": UNKNOWN, "build": UNKNOWN}
    if _git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return {
        "source": public_source(_git("remote", "get-url", "origin")),
        "version": __version__,
        "commit": commit,
        "build": "local checkout",
    }


@functools.cache
def version_object() -> dict[str, str]:
    """What `/__version__` answers (read once per process)."""
    try:
        written: Any = json.loads(BUILD_FILE.read_text())
    except (OSError, ValueError):
        return from_checkout()
    fields = {key: str(written.get(key) or UNKNOWN) for key in ("source", "commit", "build")}
    source = public_source(fields["source"])  # a build file an older release wrote may hold more
    return {"source": source, "version": __version__, "commit": fields["commit"], "build": fields["build"]}


def write_build_file() -> dict[str, str]:
    """Record this checkout's commit in shared/build.json, for a package that has no git beside it."""
    found = from_checkout()
    found["build"] = f"packaged {dt.datetime.now(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
    BUILD_FILE.write_text(json.dumps({k: found[k] for k in ("source", "commit", "build")}) + "\n")
    return found


def main(argv: list[str]) -> int:
    if argv[1:] == ["write"]:
        print(json.dumps(write_build_file()))
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(version_object()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
