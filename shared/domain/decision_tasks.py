"""What a push is, read from its decision task (the task a task group is named after, as taskgraph and Taskcluster's
GitHub service make it): its name and owner, and the project and revision it built, from the first of
- a Treeherder route: `tc-treeherder.v2.<project>.<revision>[.<pushId>]` (or `tc-treeherder.<project>.<revision>`),
- an Index route with `.v2.<project>.revision.<revision>.` (gecko.v2.<project>.revision.<rev>.taskgraph.decision),
- its environment: `<X>_HEAD_REV` and `<X>_HEAD_REPOSITORY` (taskgraph's decision task sets both),
- its `metadata.source`: `https://hg.mozilla.org/<path>/raw-file/<rev>/...`,
  `https://github.com/<owner>/<repo>/{raw,blob,tree}/<rev>/...`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_REVISION = r"[0-9a-f]{12,40}"
_TREEHERDER = re.compile(rf"^tc-treeherder(?:-staging)?\.(?:v2\.)?([^.]+)\.({_REVISION})(?:\.|$)")
_INDEX = re.compile(rf"^index\..*\bv2\.([^.]+)\.revision\.({_REVISION})\.")
_HG_SOURCE = re.compile(rf"^https?://[^/]+/(?:[^/]+/)*?([^/]+)/(?:raw-file|file|rev)/({_REVISION})(?:/|$)")
_GITHUB_SOURCE = re.compile(rf"^https?://github\.com/[^/]+/([^/]+)/(?:raw|blob|tree|commit)/({_REVISION})(?:/|$)")


def _from_routes(routes: list[Any]) -> tuple[str, str] | None:
    for pattern in (_TREEHERDER, _INDEX):
        for route in routes:
            found = pattern.match(str(route))
            if found:
                return found.group(1), found.group(2)
    return None


def _from_env(env: Any) -> tuple[str, str] | None:
    if not isinstance(env, dict):
        return None
    for key, value in env.items():
        if str(key).endswith("_HEAD_REV") and re.fullmatch(_REVISION, str(value)):
            repository = str(env.get(str(key)[: -len("_REV")] + "_REPOSITORY", ""))
            project = repository.rstrip("/").rsplit("/", 1)[-1] if repository else ""
            return project, str(value)
    return None


def _from_source(source: str) -> tuple[str, str] | None:
    for pattern in (_GITHUB_SOURCE, _HG_SOURCE):
        found = pattern.match(source)
        if found:
            return found.group(1), found.group(2)
    return None


def push_of(task_id: str, definition: Mapping[str, Any]) -> dict[str, Any]:
    """The decision task `task_id` (its name, owner, source) and, when found, the project and revision it built."""
    metadata = definition.get("metadata") or {}
    payload = definition.get("payload") or {}
    found = (
        _from_routes(list(definition.get("routes") or []))
        or _from_env(payload.get("env") if isinstance(payload, dict) else None)
        or _from_source(str(metadata.get("source", "")))
    )
    push: dict[str, Any] = {
        "decisionTask": {
            "taskId": task_id,
            "name": str(metadata.get("name", "")),
            "owner": str(metadata.get("owner", "")),
            "source": str(metadata.get("source", "")),
        }
    }
    if found is not None:
        project, revision = found
        if project:
            push["project"] = project
        push["revision"] = revision
    return push
