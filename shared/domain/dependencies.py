"""Dependency edges, and what a task still waits for.

A task with at most IN_ROW dependencies (nearly every task of a CI graph):
- keeps the ones it still waits for on its own row (Task.waiting): its createTask writes the list with the task,
  without what was already satisfied; each dependency's resolution takes itself out of the list, conditional on
  the row's ETag, and the write that empties it schedules the task;
- writes each edge in its dependency's own `Tasks` partition (RowKey `d:<dependent>`: `require`, `count`,
  `expires`), in one transaction with the dependency's `dependentsHere` flag and its list of dependents
  (`dependents`, up to LISTED), conditional on the dependency's row (shared/operations/writes/edges.py): the
  dependency's state as of the edge, without a read; a resolution takes the dependents from the row it resolved
  (no query), or, past LISTED, lists the edges. The edge rows stay what listDependentTasks and expiry read.

A task with more keeps Taskcluster's requirement rows, so that no single row is rewritten by thousands of
resolutions:
- TaskRequirement: PartitionKey = the waiting task, RowKey = a task it still waits for. The task is blocked
  while its partition has a row; all of one task's rows share a partition, so they are written in batches.
- TaskDependency: PartitionKey = the required task, RowKey = a task that depends on it, with `require`
  (`completed` or `resolved`) and `count` (how many tasks that dependent waits for): the reverse edges that
  resolution follows, and what listDependentTasks lists (`inRow` on edges of dependents that kept their list on
  their row before their edges moved to the dependency's partition). A dependent with `count` 1 is unblocked by
  this one resolution without reading its requirements (the common fan-out). With at most POINT_READ_LIMIT
  dependencies the row also lists the dependent's `others`, whose requirement rows are then checked by point
  reads.
- The required task's own row says whether it has such dependents (`hasDependents`, Task.has_dependents): a
  dependent's createTask sets it after writing its edge, conditional on the ETag it read
  (TaskRepository.note_dependent), so a resolution either sees the flag or failed the flag's write (and the
  dependent sees the resolution). A resolution of a row whose flags are both false skips the dependents lookup:
  most tasks of a lone lifecycle have no dependents.
- TaskDependency also holds, in the required task's partition, a marker row (RowKey `~<taskId>`, after every
  taskId) written in one transaction with its first edge: what a resolution reads instead for rows written
  before the flag existed. Only for tasks created with the `dependentsMarked` flag: an older task's dependents
  may have no marker.

Deleting a requirement, or taking a dependency out of a list that no longer holds it, is idempotent, so
duplicated or re-delivered resolution messages are harmless.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from shared import timeutil
from shared.storage.base import Entity

POINT_READ_LIMIT = 16
LISTED = 250  # dependents listed on their dependency's row (Task.dependents, ~6 KiB); more are only queried
# Dependencies a task keeps on its own row: its `waiting` list is one property (JSON, 25 characters a taskId: 25,000
# at most, under the 32,768 UTF-16 characters of a property's 64 KiB), a few KiB once most have resolved. A summary
# of a large push's test chunks (300-odd) keeps its list here too; only a longer one writes requirement rows.
IN_ROW = 1000
EDGE, EDGE_END = "d:", "d;"  # the RowKeys of the edges kept in their dependency's own `Tasks` partition
HERE_PAGE, LEGACY_PAGE = "here:", "legacy:"  # continuations of `dependents`
ATTACH_AT_ONCE = 100  # edges of one task written (or deleted) at once: a page; a longer list takes more round trips
REQUIREMENTS_TABLE = "TaskRequirement"
DEPENDENCIES_TABLE = "TaskDependency"


@dataclass(frozen=True)
class Dependent:
    task_id: str
    require: str  # "completed" or "resolved"
    count: int  # how many tasks it waits for in all
    others: list[str] | None  # the other tasks it waits for, when there are few
    in_row: bool = False  # it keeps what it waits for on its own row (Task.waiting)


def listed_with(listed: list[tuple[str, str]] | None, edges: list[Entity]) -> list[tuple[str, str]] | None:
    """A dependency's list of dependents once `edges` (of `edge_here`) are written beside it: None (not listed)
    stays so, and becomes so past LISTED; an edge written again (a retried createTask) is listed once."""
    if listed is None:
        return None
    known = {task_id for task_id, _ in listed}
    added = [(e.row_key[len(EDGE) :], str(e.data["require"])) for e in edges if e.row_key[len(EDGE) :] not in known]
    return None if len(listed) + len(added) > LISTED else [*listed, *dict(added).items()]


def edge_here(dependency: str, dependent: str, require: str, count: int, expires: dt.datetime) -> Entity:
    """The edge a dependent that keeps its waiting list on its row writes in its dependency's `Tasks` partition."""
    return Entity(dependency, EDGE + dependent, {"require": require, "expires": timeutil.iso(expires), "count": count})
