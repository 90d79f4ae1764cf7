"""A resolved member leaving its group's active set, and whether it was the last (the group store's half that a
run's resolution calls: `GroupLeaving.resolve_member`).

Before the range query "is anything unresolved?", a resolution tries point reads of active rows this process saw
lately (members it added or the query returned, `MembersSeen`): in a large group one is almost always still there,
and on Azurite, whose queries scan and sort the whole table, that query was the costliest call of a graph's run
(docs/performance.md). Both answer the same question after the task's own row is deleted, so two last members
resolving together still see each other's deletes. The members that resolve in one process within LEAVE_LINGER
seconds leave together: one transaction of deletes and one look for all of them, usually in that transaction: a
merge of no property into the active row of a member this process saw unresolved, which fails the transaction if
that row is gone (`_leave_proving`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from shared import timing
from shared.domain.groups import ACTIVE, GROUPS_TABLE
from shared.operations.writes.group_members import GroupMembers, active_delete
from shared.storage.base import BATCH_LIMIT, Entity, Op, TableStore, all_at_once
from shared.storage.grouped import GroupCommit, GroupedUpserts

SEEN_GROUPS, SEEN_PER_GROUP = 256, 64  # active members remembered per process, for the probes below
PROBES = 3  # point reads tried before the range query


class MembersSeen:
    """Per group, members this process saw unresolved lately (newest last), at most SEEN_PER_GROUP of
    SEEN_GROUPS groups: candidates for a probe."""

    def __init__(self) -> None:
        self.groups: OrderedDict[str, deque[str]] = OrderedDict()

    def saw(self, task_group_id: str, task_ids: list[str]) -> None:
        seen = self.groups.get(task_group_id)
        if seen is None:
            seen = self.groups[task_group_id] = deque(maxlen=SEEN_PER_GROUP)
            while len(self.groups) > SEEN_GROUPS:
                self.groups.popitem(last=False)
        else:
            self.groups.move_to_end(task_group_id)
        seen.extend(t for t in task_ids if t not in seen)

    def forget(self, task_group_id: str, resolved: set[str]) -> deque[str] | None:
        """The members seen unresolved in the group, `resolved` taken out."""
        seen = self.groups.get(task_group_id)
        if seen is not None:
            for task_id in resolved:
                if task_id in seen:
                    seen.remove(task_id)
        return seen


@dataclass
class _Leave:
    """A resolved member leaving its group's active set; `emptied`: it is the one that found none left."""

    task_id: str
    emptied: bool = False


class GroupLeaving:
    def __init__(self, tables: TableStore, seen: MembersSeen, members: GroupMembers) -> None:
        self.tables, self.seen, self.members = tables, seen, members
        self._rows = GroupedUpserts(tables)
        self._leaves: GroupCommit[str, _Leave] = GroupCommit(self._leave_together, len)

    def pending(self) -> int:
        """Groups whose leaving members wait to be written."""
        return self._leaves.pending()

    async def resolve_member(self, task_group_id: str, task_id: str) -> bool:
        """Take a resolved task out of the active set; True when the group has no unresolved task left (for one
        of the members that leave together). The members of a group resolving here within LEAVE_LINGER seconds
        leave together: their deletes in one transaction, then one look at what is left, for all of them."""
        leave = _Leave(task_id)
        await self._leaves.add(task_group_id, leave, linger=timing.LEAVE_LINGER)
        return leave.emptied

    async def _leave_together(self, task_group_id: str, leaves: list[_Leave]) -> None:
        """The deletes of the members' active rows (one transaction), then whether any is left: after every
        delete, so that two last members leaving in two processes see each other's. Usually one call: the
        deletes with a proof that a member this process saw unresolved still is (`_leave_proving`)."""
        leaving = {leave.task_id for leave in leaves}
        if await self._leave_proving(task_group_id, leaving):
            return
        await all_at_once(self._rows.delete(GROUPS_TABLE, task_group_id, ACTIVE + task_id) for task_id in leaving)
        if await self._probe_active(task_group_id, leaving):
            return
        active = await self.members.first(task_group_id, ACTIVE, PROBES)
        self.seen.saw(task_group_id, active)
        leaves[0].emptied = not active  # one announcement is enough

    async def _leave_proving(self, task_group_id: str, leaving: set[str]) -> bool:
        """The active rows' deletes in one transaction with a merge of no property into the active row of the
        newest member this process saw unresolved (any ETag, so it fails only if that row is gone): applied, the
        group still had an unresolved member once they were deleted, as a point read after them would show, and
        none of them was its last. False (nothing done) when no such member is known, or the transaction failed
        (that member resolved meanwhile, or a row of `leaving` is deleted already): the deletes one by one, then
        the look, as before."""
        seen = self.seen.forget(task_group_id, leaving)
        if not seen or len(leaving) >= BATCH_LIMIT:
            return False
        witness = seen[-1]
        ops = [
            *(active_delete(task_group_id, task_id) for task_id in sorted(leaving)),
            Op("merge", Entity(task_group_id, ACTIVE + witness, {})),
        ]
        return await self.tables.transact(GROUPS_TABLE, ops)

    async def _probe_active(self, task_group_id: str, resolved: set[str]) -> bool:
        """Whether one of the members this process saw unresolved still is (a point read each, newest first);
        the ones found resolved are forgotten. False when none is known or none of PROBES is."""
        seen = self.seen.forget(task_group_id, resolved)
        for _ in range(PROBES):
            if not seen:
                return False
            candidate = seen[-1]
            if await self.members.is_active(task_group_id, candidate):
                return True
            if candidate in seen:  # another resolution may have dropped it meanwhile
                seen.remove(candidate)
        return False
