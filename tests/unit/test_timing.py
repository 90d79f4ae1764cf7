"""The timing heuristics live in shared/timing.py, each with the reason for its value (issue #63): a wait, linger,
pause or cache age defined in another module of shared/ fails here."""

from __future__ import annotations

import ast
import re

from shared import timing
from tests.conftest import PROJECT

HEURISTIC = re.compile(
    r"(WAIT|LINGER|PAUSES?|PATIENCE|SMOOTHING|KEEPING_UP|READ_AGAIN|CACHE_SECONDS|STALE_SECONDS|VISIBILITY|MARGIN)"
)
# Not heuristics of this service: the protocol's own bound, and a transport's tie to the server it talks to.
ELSEWHERE = {
    "shared/auth/hawk.py": {"HAWK_SKEW_SECONDS"},  # Hawk's allowed clock skew, Taskcluster's 15 minutes
    "shared/storage/rest/http.py": {"KEEPALIVE_SECONDS"},  # under Azurite's 5 s idle close
    "shared/storage/azure/queues.py": {"MAX_VISIBILITY"},  # Azure Queue's longest visibility timeout (7 days)
    "shared/storage/rest/queues.py": {"MAX_VISIBILITY"},
}


def module_constants(tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            found += [(t.id, node.lineno) for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id.isupper():
            found.append((node.target.id, node.lineno))
    return found


def test_no_timing_heuristic_is_defined_outside_timing_py():
    strays = []
    for path in sorted((PROJECT / "shared").rglob("*.py")):
        relative = path.relative_to(PROJECT).as_posix()
        if relative == "shared/timing.py" or "/schemas/" in relative:
            continue
        for name, line in module_constants(ast.parse(path.read_text())):
            if HEURISTIC.search(name) and name not in ELSEWHERE.get(relative, set()):
                strays.append(f"{relative}:{line} {name}")
    assert not strays, f"timing heuristics belong in shared/timing.py, with their reason: {strays}"


def test_each_heuristic_says_why_it_is_there():
    lines = (PROJECT / "shared" / "timing.py").read_text().splitlines()
    names = [name for name, _ in module_constants(ast.parse("\n".join(lines)))]
    assert len(names) >= 15
    for name, line in module_constants(ast.parse("\n".join(lines))):
        above = lines[line - 2] if line >= 2 else ""
        assert above.startswith("# "), f"{name} (timing.py:{line}) has no comment above it saying why"
        assert isinstance(getattr(timing, name), float | tuple), name
