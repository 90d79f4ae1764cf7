"""No module of the service over 500 lines: a module a reader can hold, split by role when it grows (issue #63).

`python tools/module_size.py` (a pre-commit hook, and tests/unit/test_habits.py) exits non-zero naming each
module over the limit. The generated schemas are not modules a reader holds, and are not counted.
"""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 500
PACKAGES = ("shared", "functions", "local_host", "worker", "queue_admin", "tools")
ROOT = Path(__file__).resolve().parent.parent


def oversized(root: Path = ROOT) -> list[str]:
    """Each module over LIMIT lines, with its size."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if "/schemas/" in relative:
                continue
            lines = len(path.read_text().splitlines())
            if lines > LIMIT:
                found.append(f"{relative}: {lines} lines (at most {LIMIT}; split it by role)")
    return found


def main() -> int:
    found = oversized()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
