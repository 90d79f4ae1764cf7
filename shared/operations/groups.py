"""Task group operations: reading a group and its members, sealing it, cancelling it, changing the priority of
its tasks, and its recorded events. The group's rows are kept by `TaskGroupStore` (shared/domain/groups.py)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from shared import errors, timing
from shared.domain.decision_tasks import push_of
from shared.domain.events import Event, group_event
from shared.domain.group_outcomes import Unsuccessful
from shared.domain.groups import GROUP_STREAMS, TaskGroup, TaskGroupNotFound, group_changed
from shared.domain.tasks import RESOLVED_STATES, Priority, Task
from shared.operations.lifecycle import Lifecycle
from shared.operations.paging import PAGE_BYTES, tasks_page
from shared.operations.scheduling import deadline_passed
from shared.operations.writes.repository import LOAD_CONCURRENCY, TaskRepository
from shared.outbox.rows import Stream

MAX_PAGE = 1000


class TaskGroupNotSealed(errors.RequestConflict):
    """Task group `{taskGroupId}` must be sealed before it can be cancelled"""


@dataclass(frozen=True)
class GroupChange:
    """What a change to every task of a group did: the group, how many tasks it has, which ones changed."""

    group: TaskGroup
    size: int
    task_ids: list[str]


RECENT_LISTED = 100  # groups listRecentTaskGroups answers at most (a page of the start page)
PUSHES_KNOWN = 2 * RECENT_LISTED  # decision tasks' descriptions remembered per process (a few hundred bytes each)


class TaskGroups:
    def __init__(self, tasks: TaskRepository, lifecycle: Lifecycle, page_bytes: int = PAGE_BYTES) -> None:
        self.tasks, self.lifecycle = tasks, lifecycle
        self.page_bytes = page_bytes  # what a page of members weighs at most (shared/operations/paging.py)
        self.stores = tasks.stores
        self._recent: tuple[float, list[dict[str, Any]]] | None = None  # the last listing, and until when it holds
        self._listing: asyncio.Future[list[dict[str, Any]]] | None = None  # the listing being made, if one is
        self._pushes: OrderedDict[str, dict[str, Any]] = OrderedDict()  # decision tasks read, by group (`_push`)

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest groups of more than one task (pushes), each with whether it is sealed and whether a task of
        it is unresolved, from a listing at most RECENT_GROUPS_CACHE_SECONDS old (one for every `limit`). One
        listing at a time: callers that find it stale while it is being made wait for that one (round four: 50 at
        once each made their own, 3,100 reads)."""
        now = time.monotonic()
        if self._recent is not None and self._recent[0] > now:
            return self._recent[1][:limit]
        if self._listing is None or self._listing.done():
            self._listing = asyncio.ensure_future(self._list_recent())
        listing = self._listing
        listed = await asyncio.shield(listing)  # a caller that leaves does not cancel the others' listing
        if self._listing is listing:
            self._recent = (time.monotonic() + timing.RECENT_GROUPS_CACHE_SECONDS, listed)
        return listed[:limit]

    async def _list_recent(self) -> list[dict[str, Any]]:
        stores = self.stores
        await stores.ready()
        listed = await stores.groups.recent.recent(stores.now(), RECENT_LISTED)
        # A group written twice (two of its first joins racing) is listed once, where it is newest.
        rows = list({row["taskGroupId"]: row for row in reversed(listed)}.values())  # the newest row of each
        rows.sort(key=lambda row: listed.index(row))

        async def described(row: dict[str, str]) -> dict[str, Any]:
            group_id = row["taskGroupId"]
            group, active, push = await asyncio.gather(
                stores.groups.get(group_id), stores.groups.count_unresolved(group_id), self._push(group_id)
            )
            counts = await stores.groups.outcomes.counts(group_id, active)
            described = {**row, "sealed": bool(group and group.sealed), "unresolved": active[0] > 0}
            return {**described, **push, "counts": counts.to_json()}

        return list(await asyncio.gather(*(described(r) for r in rows)))

    async def _push(self, task_group_id: str) -> dict[str, Any]:
        """The push's decision task (the task the group is named after) and what it built; {} without one. A
        definition never changes: each is read once per process (the last PUSHES_KNOWN)."""
        known = self._pushes.get(task_group_id)
        if known is not None:
            self._pushes.move_to_end(task_group_id)
            return known
        task = await self.tasks.get(task_group_id)
        push = push_of(task_group_id, task.definition) if task is not None else {}
        if task is not None:  # a group named after no task yet may get one: asked again next time
            self._pushes[task_group_id] = push
            while len(self._pushes) > PUSHES_KNOWN:
                self._pushes.popitem(last=False)
        return push

    async def get(self, task_group_id: str) -> TaskGroup:
        """The group; 404 when there is none."""
        await self.stores.ready()
        group = await self.stores.groups.get(task_group_id)
        if group is None:
            raise TaskGroupNotFound(taskGroupId=task_group_id)
        return group

    async def failures(
        self, task_group_id: str, *, limit: int, continuation: str | None
    ) -> tuple[list[Unsuccessful], str | None]:
        """A page of the group's tasks whose newest run failed or ended in an exception."""
        return await self.stores.groups.outcomes.page(
            task_group_id, limit=min(limit, MAX_PAGE), continuation=continuation
        )

    async def members(
        self, task_group_id: str, *, limit: int, continuation: str | None
    ) -> tuple[TaskGroup, list[Task], str | None]:
        """A page of the group's tasks (a member whose task is gone, expired, is left out)."""
        group = await self.get(task_group_id)

        async def member_ids(count: int, token: str | None) -> tuple[list[str], str | None]:
            return await self.stores.groups.members(task_group_id, limit=count, continuation=token)

        tasks, token = await tasks_page(
            member_ids,
            self.tasks.load_many,
            limit=min(limit, MAX_PAGE),
            continuation=continuation,
            budget=self.page_bytes,
        )
        return group, tasks, token

    async def seal(self, task_group_id: str) -> TaskGroup:
        await self.stores.ready()
        now = self.stores.now()
        return await self.stores.groups.seal(task_group_id, now, lambda g: [group_changed("task-group-sealed", g, now)])

    async def cancel(self, task_group_id: str) -> GroupChange:
        """Cancel every unresolved task of a sealed group whose deadline has not passed."""
        group = await self.get(task_group_id)
        if not group.sealed:
            raise TaskGroupNotSealed(taskGroupId=task_group_id)
        ids = await self.stores.groups.all_members(task_group_id)
        now = self.stores.now()
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def cancel(task: Task) -> str | None:
            if task.state in RESOLVED_STATES or deadline_passed(task, now):
                return None
            async with limit:
                _, changed = await self.lifecycle.cancel(task.task_id, now)
            return task.task_id if changed else None

        cancelled = [t for t in await asyncio.gather(*(cancel(t) for t in await self.tasks.load_many(ids))) if t]
        return GroupChange(group, len(ids), cancelled)

    async def change_priority(self, task_group_id: str, new_priority: Priority) -> GroupChange:
        group = await self.get(task_group_id)
        ids = await self.stores.groups.all_members(task_group_id)
        limit = asyncio.Semaphore(LOAD_CONCURRENCY)

        async def change(task_id: str) -> str | None:
            async with limit:
                try:
                    changed = await self.lifecycle.change_priority(task_id, new_priority, strict=False)
                except errors.TaskNotFound:
                    return None
                return task_id if changed else None

        changed = [t for t in await asyncio.gather(*(change(t) for t in ids)) if t]
        now = self.stores.now()
        await self.stores.groups.update(
            task_group_id,
            lambda g: g,
            lambda g: [
                group_event(
                    "task-group-priority-changed",
                    g.task_group_id,
                    g.scheduler_id,
                    now=now,
                    newPriority=new_priority,
                    tasksAffected=len(changed),
                )
            ],
        )
        return GroupChange(group, len(ids), changed)

    async def events(
        self, task_group_id: str, *, limit: int, continuation: str | None
    ) -> tuple[list[tuple[int, Event]], str | None]:
        """The group's recorded events (sealed, resolved, priority changed), in order."""
        await self.get(task_group_id)
        return await self.stores.events.list(
            Stream(GROUP_STREAMS, task_group_id), limit=min(limit, MAX_PAGE), continuation=continuation
        )
