"""How a task group's rows are written (their layout: shared/domain/groups.py); its members' rows are read in
group_members.py, and a resolved member leaves the active set in group_leaving.py.

A group's three kinds of rows live in one partition, so joining a group is one transaction, and "is anything
unresolved?" is a range query that reads at most a few rows. A group's only member needs neither: its active row's
delete and the group's resolution are one transaction, conditional on the group row's ETag (`resolve_sole`). A
second task's join clears `sole` in the join's own transaction, conditional likewise, so one of two racing writes
fails and its writer decides again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from shared import timeutil, timing
from shared.domain.events import Event
from shared.domain.groups import (
    ACTIVE,
    GROUP_STREAMS,
    GROUPS_TABLE,
    MEMBER,
    TaskGroup,
    TaskGroupNotFound,
    TaskGroupSchedulerConflict,
    TaskGroupSealed,
    extended,
    group_row,
)
from shared.operations.writes.group_leaving import GroupLeaving, MembersSeen
from shared.operations.writes.group_members import GroupMembers, active_delete
from shared.outbox.log import EventLog
from shared.outbox.rows import Stream, cursor_entity, event_ops
from shared.storage.base import Entity, Op, TableStore, all_at_once
from shared.storage.grouped import GroupedUpserts
from shared.stores.group_outcomes import GroupOutcomes
from shared.stores.recent_groups import RecentGroups

KNOWN_GROUPS = 10_000  # group rows remembered per process


@dataclass(frozen=True)
class GroupRows:
    """A group's rows to write in its task's transaction (the group's id is the task's: the same partition)."""

    stream: Stream
    ops: list[Op]
    announce: int | None  # the group's last event among them, to announce before the write; None: no events
    done: Callable[[Sequence[str | None] | None], None]  # called with the ops' ETags once written; None: not


def _new_group(
    task_group_id: str, scheduler_id: str, task_id: str, expires: dt.datetime, since: dt.datetime
) -> tuple[TaskGroup, list[Op]]:
    """A new group's row, `task_id` its only member, and a fresh dispatch cursor (one left by an expired group of
    the same id must not skip events)."""
    group = TaskGroup(task_group_id, scheduler_id, extended(expires, since), None, sole=task_id)
    return group, [
        Op("insert", group.to_entity()),
        Op("upsert", cursor_entity(Stream(GROUP_STREAMS, task_group_id), 0)),
    ]


def _member_rows(task_group_id: str, task_id: str, expires: dt.datetime, since: dt.datetime) -> list[Op]:
    """The member and active rows of a task joining (the active row's `since` lets the reconciler find the
    unresolved tasks it has not looked at for a while)."""
    stored = timeutil.iso(expires)
    return [
        Op("upsert", Entity(task_group_id, MEMBER + task_id, {"expires": stored})),
        Op("upsert", Entity(task_group_id, ACTIVE + task_id, {"expires": stored, "since": timeutil.iso(since)})),
    ]


def _change_ops(
    group: TaskGroup, changed: TaskGroup, events: list[Event], more: Sequence[Op]
) -> tuple[TaskGroup, list[Op]]:
    """The group row `group` replaced by `changed` (conditional on its ETag), counting `events`, with the events'
    rows and `more` rows of the partition: the group as written, and the transaction's ops."""
    changed = replace(changed, event_seq=group.event_seq + len(events))
    stream = Stream(GROUP_STREAMS, group.task_group_id)
    return changed, [Op("replace", changed.to_entity()), *event_ops(stream, group.event_seq + 1, events), *more]


class TaskGroupStore:
    def __init__(self, tables: TableStore, events: EventLog) -> None:
        self.tables, self.events = tables, events
        self.recent = RecentGroups(tables)  # the groups of more than one task, newest first (the start page's)
        self.outcomes = GroupOutcomes(tables)  # its members that failed or ended in an exception
        self.seen = MembersSeen()  # members this process saw unresolved lately: the leaving's probes
        self.rows = GroupMembers(tables)
        self.leaving = GroupLeaving(tables, self.seen, self.rows)
        # Their calls, as the group store's: callers ask the group store about a group.
        self.resolve_member = self.leaving.resolve_member
        self.is_active = self.rows.is_active
        self.forget_member = self.rows.forget_member
        self.active_since = self.rows.active_since
        self.unresolved = self.rows.unresolved
        self.count_unresolved = self.rows.count_unresolved
        self.members = self.rows.members
        self.all_members = self.rows.all_members
        self._rows = GroupedUpserts(tables)
        self._refreshing: dict[str, asyncio.Future[TaskGroup | None]] = {}  # background reads (`get`), by group
        # Group rows this process read or wrote lately, with when it stops trusting them for check_joinable; an
        # update starts from one whatever its age (its write is conditional on the row's ETag).
        self._cache: OrderedDict[str, tuple[float, TaskGroup]] = OrderedDict()

    def _remember(self, group: TaskGroup) -> None:
        self._cache[group.task_group_id] = (time.monotonic() + timing.GROUP_CACHE_SECONDS, group)
        self._cache.move_to_end(group.task_group_id)
        while len(self._cache) > KNOWN_GROUPS:
            self._cache.popitem(last=False)

    async def get(self, task_group_id: str, *, cached: bool = False) -> TaskGroup | None:
        """The group row; `cached`: as this process knew it within GROUP_CACHE_SECONDS, or, known within
        GROUP_STALE_SECONDS, as it knew it while a read in the background brings it up to date (a busy group's
        createTask calls then never wait for that read)."""
        if cached:
            hit = self._cache.get(task_group_id)
            now = time.monotonic()
            if hit is not None and hit[0] > now:
                return hit[1]
            if hit is not None and hit[0] + timing.GROUP_STALE_SECONDS - timing.GROUP_CACHE_SECONDS > now:
                if task_group_id not in self._refreshing:
                    refresh = asyncio.ensure_future(self.get(task_group_id))
                    self._refreshing[task_group_id] = refresh
                    refresh.add_done_callback(
                        lambda done: (self._refreshing.pop(task_group_id, None), done.cancelled() or done.exception())
                    )
                return hit[1]
        entity = await self.tables.get(GROUPS_TABLE, task_group_id, group_row(task_group_id))
        group = TaskGroup.from_entity(entity) if entity is not None else None
        if group is not None:
            self._remember(group)
        return group

    async def _latest(self, task_group_id: str) -> TaskGroup | None:
        """The group row this process last knew, whatever its age, else read: a start for a write conditional on
        its ETag (a stale one fails that write, and the writer reads again)."""
        known = self._cache.get(task_group_id)
        return known[1] if known is not None else await self.get(task_group_id)

    async def check_joinable(
        self, task_group_id: str, scheduler_id: str, *, likely_new: bool = False
    ) -> TaskGroup | None:
        """Refuse a task that may not join: another scheduler's group, or a sealed one. `likely_new`: the group
        is probably not there yet (a task that is its own group, as most are): unless this process knows the group,
        nothing is read, and `join` inserts it, finding out then (and checking) if it existed."""
        if likely_new and task_group_id not in self._cache:
            return None
        group = await self.get(task_group_id, cached=True)
        if group is not None:
            if group.scheduler_id != scheduler_id:
                raise TaskGroupSchedulerConflict(
                    taskGroupId=task_group_id, existing=group.scheduler_id, schedulerId=scheduler_id
                )
            if group.sealed:
                raise TaskGroupSealed(taskGroupId=task_group_id)
        return group

    async def reactivate(self, task_group_id: str, task_id: str, expires: dt.datetime, since: dt.datetime) -> None:
        """A resolved member given a new run (a rerun) is unresolved again: its active row, written before the run
        is (a rerun that fails to be written leaves a row the reconciler finds resolved), so that its group reads
        unresolved until the run resolves and the group is resolved again (as Taskcluster announces a group
        resolved again after a rerun)."""
        await self.tables.upsert(
            GROUPS_TABLE,
            Entity(task_group_id, ACTIVE + task_id, {"expires": timeutil.iso(expires), "since": timeutil.iso(since)}),
        )

    async def join(
        self,
        task_group_id: str,
        scheduler_id: str,
        task_id: str,
        expires: dt.datetime,
        since: dt.datetime,
        group: TaskGroup | None,
    ) -> None:
        """Add a task to its group (member and active rows, and the group row when new, when its expiry must
        grow or when this task is not its only member), in one transaction; re-checked and retried when the group
        changed meanwhile. `group`: what the caller's check_joinable just answered (a new group's row is not read
        twice)."""
        rows = _member_rows(task_group_id, task_id, expires, since)
        while True:
            written: TaskGroup | None
            # Its second task, or a first one not named after it: the group is a push, listed as recent once.
            push = group is None or group.sole not in ("", task_id)
            if group is None:
                written, ops = _new_group(task_group_id, scheduler_id, task_id, expires, since)
            elif group.expires < expires or group.sole not in ("", task_id):
                # Conditional on the ETag: a sole member's resolution (resolve_sole) and this join race safely.
                written = replace(
                    group,
                    expires=max(group.expires, extended(expires, since)),
                    sole=group.sole if group.sole == task_id else "",
                )
                ops = [Op("replace", written.to_entity())]
            else:
                # Only its own rows, which no condition guards: written with the rows of the members joining at the
                # same time (a push's 50 createTask calls at once), a transaction for many.
                await all_at_once(self._rows.upsert(GROUPS_TABLE, op.entity) for op in rows)
                self._joined(task_group_id, task_id, None, None)
                return
            ops += rows
            etags = await self.tables.commit(GROUPS_TABLE, ops)
            if etags is not None:
                if group is None:
                    self.events.recorded(Stream(GROUP_STREAMS, task_group_id), ops, etags)
                self._joined(task_group_id, task_id, written, etags[0])
                if push:
                    await self.recent.add(task_group_id, scheduler_id, since, written.expires)
                return
            group = await self.get(task_group_id)  # created, raised or sealed meanwhile: decide again
            if group is not None:
                await self.check_joinable(task_group_id, scheduler_id)

    def _joined(self, task_group_id: str, task_id: str, written: TaskGroup | None, etag: str | None) -> None:
        if written is not None:  # what this process wrote is the group now: the next join reads nothing
            self._remember(replace(written, etag=etag))
        self.seen.saw(task_group_id, [task_id])

    def new_sole(self, task_id: str, scheduler_id: str, expires: dt.datetime, since: dt.datetime) -> GroupRows:
        """A new group whose id is `task_id`'s, that task its only member: the rows to write in the task's own
        transaction (the same partition: the group row's insert fails that transaction if the group exists, and
        then its writer joins as usual)."""
        written, ops = _new_group(task_id, scheduler_id, task_id, expires, since)
        ops += _member_rows(task_id, task_id, expires, since)

        def done(etags: Sequence[str | None] | None) -> None:
            if etags is not None:
                self._joined(task_id, task_id, written, etags[0])

        return GroupRows(Stream(GROUP_STREAMS, task_id), ops, None, done)

    def resolve_sole_ops(self, task_id: str, announce: Callable[[TaskGroup], list[Event]]) -> GroupRows | None:
        """A task resolving that is the only member of the group named after it: the rows that resolve the group
        in the task's own transaction (the group row, conditional on its ETag, so that a second member's join
        fails it; the group's events; the active row's delete). None when the group is not known here to be
        that (a row this process read or wrote, whatever its age: the condition catches a stale one): then the
        resolution's handler resolves the group (`resolve_sole`, `resolve_member`). Not read when unknown: the
        read would be one more round trip before the resolution's write (the handler reads it after the answer)."""
        known = self._cache.get(task_id)
        group = known[1] if known is not None else None
        if group is None or group.sole != task_id or group.etag is None:
            return None
        events = announce(group)
        changed, ops = _change_ops(group, group, events, [active_delete(task_id, task_id)])

        def done(etags: Sequence[str | None] | None) -> None:
            if etags is None:
                self._cache.pop(task_id, None)  # the group row may be what failed: read it next time
                return
            self._remember(replace(changed, etag=etags[0]))
            self.seen.forget(task_id, {task_id})

        return GroupRows(Stream(GROUP_STREAMS, task_id), ops, changed.event_seq if events else None, done)

    async def update(
        self,
        task_group_id: str,
        change: Callable[[TaskGroup], TaskGroup | None],
        announce: Callable[[TaskGroup], list[Event]],
    ) -> TaskGroup:
        """Read-modify-write the group row (conditional on its ETag, retried on a lost race), together with the
        events `announce` builds from the changed group, in one transaction. `change` returns None for no change."""
        group = await self._latest(task_group_id)
        while True:
            if group is None:
                raise TaskGroupNotFound(taskGroupId=task_group_id)
            changed = change(group)
            if changed is None:
                return group
            events = announce(changed)
            written = await self._write(group, changed, events)
            if written is not None:
                return written
            group = await self.get(task_group_id)  # a lost race reads the row again

    async def _write(
        self, group: TaskGroup, changed: TaskGroup, events: list[Event], more: Sequence[Op] = ()
    ) -> TaskGroup | None:
        """Replace the group row `group` (conditional on its ETag) by `changed`, with `events` and `more` rows of
        the partition, in one transaction; the group written, or None when the transaction failed."""
        task_group_id = group.task_group_id
        stream = Stream(GROUP_STREAMS, task_group_id)
        changed, ops = _change_ops(group, changed, events, more)
        with self.events.in_flight.writing(GROUP_STREAMS, task_group_id):
            if events:
                await self.events.announce(stream, changed.event_seq)
            etags = await self.events.commit_change(GROUPS_TABLE, stream, ops)
        if etags is None:
            return None
        self._remember(replace(changed, etag=etags[0]))
        return replace(changed, etag=None)

    async def seal(
        self, task_group_id: str, stamp: dt.datetime, announce: Callable[[TaskGroup], list[Event]]
    ) -> TaskGroup:
        """Seal once, announcing it; sealing again keeps the first time and announces nothing."""
        return await self.update(task_group_id, lambda g: None if g.sealed else replace(g, sealed=stamp), announce)

    async def resolve_sole(
        self, task_group_id: str, task_id: str, announce: Callable[[TaskGroup], list[Event]]
    ) -> bool:
        """A resolved task that is its group's only member: delete its active row and record the group's
        resolution (`announce`) in one transaction, instead of a delete, a look at the active set and then the
        group's update. False, having written nothing, when it is not the only member (any more), or its active
        row is already gone (a repeated resolution message): then `resolve_member` decides."""
        group = await self._latest(task_group_id)
        if group is None or group.sole != task_id:
            return False
        if await self._write(group, group, announce(group), [active_delete(task_group_id, task_id)]) is None:
            return False
        self.seen.forget(task_group_id, {task_id})
        return True

    async def delete_if_empty(self, task_group_id: str, cutoff: dt.datetime) -> dt.datetime | None:
        """Delete an expired group that has no members left. A group left empty before it expires (it outlives its
        tasks: `extended`) is not deleted: when to look again is answered (its `expires`), else None (deleted,
        gone, or a member left, whose own expiry will look again)."""
        group = await self.get(task_group_id)
        if group is None or await self.rows.first(task_group_id, MEMBER, 1):
            return None
        if group.expires > cutoff:
            return group.expires
        if not await self.tables.delete(GROUPS_TABLE, task_group_id, group_row(task_group_id), group.etag):
            return None  # a task joined meanwhile
        self._cache.pop(task_group_id, None)
        await self.events.forget(Stream(GROUP_STREAMS, task_group_id), group.event_seq)
        return None
