"""A commit message's subject (its first line) is 72 characters at most: the why goes in the body.

`python tools/commit_subject.py <message file>` (pre-commit's commit-msg hook) exits non-zero, saying why, when the
subject is longer; `--range A..B` checks every commit of a range (tests/habits/test_habits.py runs it on history).
"""

from __future__ import annotations

import subprocess
import sys

LIMIT = 72


def too_long(subject: str) -> str | None:
    """Why the subject is refused, or None when it is within the limit."""
    if len(subject) <= LIMIT:
        return None
    return f"subject of {len(subject)} characters ({LIMIT} at most; the why goes in the body): {subject}"


def subjects(revisions: str) -> list[str]:
    log = subprocess.run(["git", "log", "--format=%s", revisions], capture_output=True, text=True, check=True)
    return log.stdout.splitlines()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--range":
        refused = [reason for s in subjects(argv[1]) if (reason := too_long(s))]
    elif len(argv) == 1:
        with open(argv[0], encoding="utf-8") as message:
            first = next((line.rstrip("\n") for line in message if not line.startswith("#")), "")
        refused = [reason] if (reason := too_long(first)) else []
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for reason in refused:
        print(reason, file=sys.stderr)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
