"""The Index (Taskcluster's index service, built into the queue): completed tasks found by a dotted name.

An *index path* `a.b.c` names an entry: the task indexed there, its rank, data and expiry. The path without its
last word is the entry's *namespace* (`a.b`), and every prefix of a path is a namespace that listNamespaces shows
(`a`, `a.b`). One table, `Index`, laid out for the reads:

- an entry: PartitionKey `t:<namespace>`, RowKey `<name>` (the last word): findTask is one point read, listTasks
  one partition;
- a namespace: PartitionKey `n:<parent>`, RowKey `<name>`: listNamespaces is one partition.

Keys are `encode_key`'d. Entries and namespaces past `expires` are invisible, and the expiry timer deletes them.

Which entry stays when two tasks are indexed at one path (Taskcluster's rule): the one of higher rank; of equal
rank, the later one. "Later" is the time of the completion being indexed (or of the insertTask call), kept with
the entry (`indexedAt`), so that a retried indexing of an older completion does not displace a newer one.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared import errors, timeutil
from shared.storage.base import Entity, pack_json, unpack_json
from shared.storage.keys import encode_key, fitting_key

INDEX_TABLE = "Index"
ENTRY_PREFIX = "t:"
NAMESPACE_PREFIX = "n:"
MAX_PATH_LENGTH = 255  # characters of an index path (the official schemas' maxLength of `namespace`)
MAX_DEPTH = 64  # words of an index path
MAX_DATA_BYTES = 32 * 1024  # of an entry's data as JSON (Taskcluster: "errors if you store more than 32KB")
MAX_PAGE = 1000  # entries or namespaces in one listing page (Taskcluster's)
MAX_FIND_MANY = 1000  # index paths in one findTasksAtIndex body
ROUTE_PREFIX = "index."
FORBIDDEN = frozenset("/\\#?")  # characters no index path may hold (a path is one URL segment)


class InvalidIndexPath(errors.InvalidRequestArguments):
    """`{path}` is not an index path: {why}. An index path is at most 255 characters of printable ASCII without
    spaces or `/ \\ # ?`, in at most 64 dot-separated words, none of them empty"""


class IndexedTaskNotFound(errors.ResourceNotFound):
    """Indexed task not found at `{path}` (nothing was indexed there, or its entry expired)"""


class IndexDataTooLarge(errors.InputError):
    """`data` is {size} bytes of JSON; an index entry holds at most 32768"""


def words(path: str) -> list[str]:
    """The words of an index path (`[]` for the root namespace `""`), or InvalidIndexPath."""
    if path == "":
        return []
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidIndexPath(path=path[:80] + "…", why=f"it is {len(path)} characters long")
    bad = sorted({c for c in path if c in FORBIDDEN or not " " < c < "\x7f"})
    if bad:
        raise InvalidIndexPath(path=path, why=f"it holds {' '.join(repr(c) for c in bad)}")
    parts = path.split(".")
    if "" in parts:
        raise InvalidIndexPath(path=path, why="a word is empty")
    if len(parts) > MAX_DEPTH:
        raise InvalidIndexPath(path=path, why=f"it has {len(parts)} words")
    return parts


def split(path: str) -> tuple[str, str]:
    """An entry's path as (namespace, name); InvalidIndexPath for the root or a malformed path."""
    parts = words(path)
    if not parts:
        raise InvalidIndexPath(path=path, why="it is empty")
    return ".".join(parts[:-1]), parts[-1]


def join(namespace: str, name: str) -> str:
    return f"{namespace}.{name}" if namespace else name


def ancestors(namespace: str) -> list[tuple[str, str]]:
    """The namespace rows a namespace needs, as (parent, name): `a.b` needs ("", "a") and ("a", "b")."""
    parts = words(namespace)
    return [(".".join(parts[:i]), parts[i]) for i in range(len(parts))]


def entry_partition(namespace: str) -> str:
    return fitting_key(ENTRY_PREFIX + encode_key(namespace), f"namespace `{namespace[:80]}`")


def namespace_partition(parent: str) -> str:
    return fitting_key(NAMESPACE_PREFIX + encode_key(parent), f"namespace `{parent[:80]}`")


def name_key(name: str) -> str:
    """An entry's or namespace's row key: its last word."""
    return fitting_key(encode_key(name), f"index word `{name[:80]}`")


def hour_ceiling(when: dt.datetime) -> dt.datetime:
    """A namespace's stored expiry: its latest entry's, rounded up to the hour, so that the entries of one push
    (whose expiries differ by milliseconds) extend a namespace once, not once each. A namespace may so stay
    visible up to an hour after its last entry expired."""
    floor = when.replace(minute=0, second=0, microsecond=0)
    return floor if floor == when or floor.year == dt.MAXYEAR else floor + dt.timedelta(hours=1)


@dataclass(frozen=True)
class IndexedTask:
    """An entry: the task indexed at `path`."""

    path: str
    task_id: str
    rank: float | int
    data: dict[str, Any]
    expires: dt.datetime
    indexed_at: dt.datetime  # when the completion (or insertTask) it records happened: equal ranks, later wins

    def to_api(self) -> dict[str, Any]:
        return {
            "namespace": self.path,
            "taskId": self.task_id,
            "rank": self.rank,
            "data": self.data,
            "expires": timeutil.iso(self.expires),
        }

    def to_entity(self, etag: str | None = None) -> Entity:
        namespace, name = split(self.path)
        # `data` in chunks: 32 KiB of UTF-8 may take six times as many characters as escaped JSON.
        return Entity(
            entry_partition(namespace),
            name_key(name),
            {
                "taskId": self.task_id,
                "rank": json.dumps(self.rank),
                **pack_json("data", self.data),
                "expires": timeutil.iso(self.expires),
                "indexedAt": timeutil.iso(self.indexed_at),
            },
            etag,
        )

    @classmethod
    def from_entity(cls, path: str, entity: Entity) -> IndexedTask:
        d = entity.data
        return cls(
            path,
            d["taskId"],
            json.loads(d["rank"]),
            unpack_json("data", d),
            timeutil.parse(d["expires"]),
            timeutil.parse(d["indexedAt"]),
        )

    def replaces(self, current: IndexedTask, now: dt.datetime) -> bool:
        """Whether this entry is written over `current` at the same path: not when it is this same completion's
        entry written before (a retried indexing); else an expired one always, a lower rank, or an equal rank
        recorded no later than this one."""
        mine = (self.task_id, self.rank, self.data, self.expires, self.indexed_at)
        if mine == (current.task_id, current.rank, current.data, current.expires, current.indexed_at):
            return False
        if current.expires <= now:
            return True
        if self.rank != current.rank:
            return self.rank > current.rank
        return self.indexed_at >= current.indexed_at


def data_size(data: dict[str, Any]) -> int:
    """Bytes of UTF-8 JSON (not of escaped ASCII: a script other than Latin would count six times)."""
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())


def checked_rank(rank: Any) -> float | int:
    if isinstance(rank, bool) or not isinstance(rank, int | float) or not math.isfinite(rank):
        raise errors.InputError("`rank` must be a finite number")
    return rank


@dataclass(frozen=True)
class RouteEntry:
    """What a completed task's `index.<namespace>` route asks to be indexed."""

    path: str
    rank: float | int
    data: dict[str, Any]
    expires: dt.datetime


def indexed(definition: Mapping[str, Any]) -> bool:
    """Whether a task has routes to index when it completes."""
    return any(r.startswith(ROUTE_PREFIX) for r in definition.get("routes", ()))


def route_entries(definition: Mapping[str, Any]) -> tuple[list[RouteEntry], list[str]]:
    """The entries a completed task's `index.` routes ask for, with Taskcluster's rules: rank, expires and data
    from `task.extra.index` (defaults 0, the task's `expires`, `{}`); and why the others cannot be indexed (a
    malformed path, a wrong type in `extra.index`), to be logged: a completion is never refused for them."""
    paths = [r[len(ROUTE_PREFIX) :] for r in definition.get("routes", []) if r.startswith(ROUTE_PREFIX)]
    if not paths:
        return [], []
    options = (definition.get("extra") or {}).get("index") or {}
    problems: list[str] = []
    if not isinstance(options, dict):
        return [], [f"extra.index is not an object: {len(paths)} routes not indexed"]
    rank: Any = options.get("rank", 0)
    data: Any = options.get("data", {})
    expires_text: Any = options.get("expires", definition["expires"])
    try:
        rank = checked_rank(rank)
        if not isinstance(data, dict):
            raise errors.InputError("extra.index.data must be an object")
        if data_size(data) > MAX_DATA_BYTES:
            raise IndexDataTooLarge(size=data_size(data))
        if not isinstance(expires_text, str):
            raise errors.InputError("extra.index.expires must be a date-time string")
        expires = timeutil.to_ms(timeutil.parse(expires_text))
    except (errors.QueueError, ValueError, OverflowError) as exc:
        return [], [f"{exc}: {len(paths)} routes not indexed"]
    entries = []
    for path in dict.fromkeys(paths):  # a route named twice is indexed once
        try:
            split(path)
        except InvalidIndexPath as exc:
            problems.append(str(exc))
            continue
        entries.append(RouteEntry(path, rank, data, expires))
    return entries, problems
