"""Task groups in one table partition per group: the group, its members and its unresolved ("active") set.

The partitions are in the Tasks table, so that a group whose id is a task's (a task that is its own group, as
most are: taskGroupId defaults to taskId) shares that task's partition: its creation is written in the task's
own transaction, and so is its resolution when nothing else waits for the task and the writing process
knows the group row.
PartitionKey = taskGroupId, and RowKey
- `group:<taskGroupId>`: schedulerId, expires, sealed, and `sole`: the one task that has joined, while only one
  has (most tasks are their own group, alone in it)
- `m:<taskId>`: a member (for listing), with its expires
- `a:<taskId>`: a member that has not resolved yet; the group is resolved when no such row is left
- `f:<taskId>`: a member whose newest run failed or ended in an exception, and what its waiting rerun waits for
  (shared/domain/group_outcomes.py: the start page's counts and the inspector's "reruns after")
- `group-event:<seq>:<taskGroupId>`, `group-events:<taskGroupId>`: the group's events and their dispatch cursor
  (shared/outbox/log.py; tagged apart from its task's `event:` rows)

How the rows are written, and what this process remembers of them: shared/operations/writes/group_store.py;
read: group_members.py; a resolved member leaving: group_leaving.py.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from shared import errors, timeutil
from shared.domain.events import Event, group_event
from shared.domain.tasks import TASKS_TABLE
from shared.storage.base import Entity

GROUP_STREAMS = "TaskGroups"  # the family of the groups' event streams (shared/outbox/rows.py STORED_WITH)
GROUPS_TABLE = TASKS_TABLE  # where the groups' rows are
GROUP_ROW = "group:"
MEMBER, ACTIVE = "m:", "a:"
# A group that must outlive a task outlives it by this much more (a tenth of the task's lifetime when shorter), so
# that the tasks a push creates over the next minutes, their `expires` a little later each, do not rewrite the
# group row (a write every member's join would wait for). Taskcluster adds 1 hour (72 days before v44).
EXPIRES_EXTENSION = dt.timedelta(hours=1)


def group_row(task_group_id: str) -> str:
    """The group row's RowKey, with the group's id in it (see shared.domain.tasks.task_row for why)."""
    return GROUP_ROW + task_group_id


class TaskGroupSchedulerConflict(errors.RequestConflict):
    """Task group `{taskGroupId}` belongs to schedulerId `{existing}`; this task has schedulerId `{schedulerId}`"""


class TaskGroupSealed(errors.RequestConflict):
    """Task group `{taskGroupId}` is sealed: no tasks can be added to it"""


class TaskGroupNotFound(errors.ResourceNotFound):
    """Task group `{taskGroupId}` not found"""


@dataclass(frozen=True)
class TaskGroup:
    task_group_id: str
    scheduler_id: str
    expires: dt.datetime
    sealed: dt.datetime | None
    etag: str | None = None
    event_seq: int = 0  # the group's last recorded event
    sole: str = ""  # the only task that has joined; "" once another has (or in a row older than this field)

    def to_entity(self) -> Entity:
        return Entity(
            self.task_group_id,
            group_row(self.task_group_id),
            {
                "schedulerId": self.scheduler_id,
                "expires": timeutil.iso(self.expires),
                "sealed": timeutil.iso(self.sealed) if self.sealed else "",
                "eventSeq": self.event_seq,
                "sole": self.sole,
            },
            self.etag,
        )

    @classmethod
    def from_entity(cls, entity: Entity) -> TaskGroup:
        sealed = entity.data.get("sealed")
        return cls(
            entity.partition_key,
            entity.data["schedulerId"],
            timeutil.parse(entity.data["expires"]),
            timeutil.parse(sealed) if sealed else None,
            entity.etag,
            int(entity.data.get("eventSeq", 0)),
            str(entity.data.get("sole") or ""),
        )


def group_changed(exchange: str, group: TaskGroup, now: dt.datetime) -> Event:
    """task-group-resolved / task-group-sealed: the task-group-changed-message."""
    return group_event(
        exchange,
        group.task_group_id,
        group.scheduler_id,
        now=now,
        expires=timeutil.iso(group.expires),
        **({"sealed": timeutil.iso(group.sealed)} if group.sealed else {}),
    )


def extended(expires: dt.datetime, since: dt.datetime) -> dt.datetime:
    """When a group that must outlive a task expiring at `expires` (created at `since`) expires."""
    return expires + min(EXPIRES_EXTENSION, max(expires - since, dt.timedelta(0)) / 10)
