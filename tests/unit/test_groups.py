"""A group's active set on the memory connector: "is anything unresolved?" by point reads of members this process
saw, else by the range query, with the same answer either way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared import timeutil
from shared.domain.groups import ACTIVE, GROUPS_TABLE
from shared.operations.writes.group_store import TaskGroupStore
from shared.outbox.log import EventLog
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.conftest import slugid

EXPIRES = timeutil.parse("2030-01-01T00:00:00.000Z")


class CountingTables(MemoryTables):
    def __init__(self) -> None:
        super().__init__()
        self.queries = 0

    async def query(self, *args: Any, **kwargs: Any) -> Any:
        self.queries += 1
        return await super().query(*args, **kwargs)


def store(tables: MemoryTables) -> TaskGroupStore:
    return TaskGroupStore(tables, EventLog(tables, MemoryQueues(), dispatching=False))


async def joined(groups: TaskGroupStore, group: str, count: int) -> list[str]:
    tasks = [slugid() for _ in range(count)]
    for task_id in tasks:
        await groups.join(group, "-", task_id, EXPIRES, EXPIRES, await groups.check_joinable(group, "-"))
    return tasks


async def test_a_member_seen_unresolved_answers_without_the_range_query() -> None:
    tables = CountingTables()
    groups, group = store(tables), slugid()
    first, second, last = await joined(groups, group, 3)
    assert await groups.resolve_member(group, first) is False
    assert await groups.resolve_member(group, second) is False
    assert tables.queries == 0  # `last`, seen joining, was still active both times
    assert await groups.resolve_member(group, last) is True
    assert tables.queries == 1  # nothing seen is left: the range query decides


async def test_another_process_knowing_nothing_gets_the_same_answers() -> None:
    tables = CountingTables()
    group = slugid()
    tasks = await joined(store(tables), group, 4)
    other = store(tables)
    answers = [await other.resolve_member(group, t) for t in tasks]
    assert answers == [False, False, False, True]
    # The query's rows seed the probes: after the first query, the member it returned answers until it resolves.
    assert tables.queries < len(tasks)


async def test_a_probe_that_finds_a_member_resolved_forgets_it() -> None:
    tables = CountingTables()
    groups, group = store(tables), slugid()
    first, second = await joined(groups, group, 2)
    await tables.delete(GROUPS_TABLE, group, ACTIVE + second)  # resolved by another process
    assert await groups.resolve_member(group, first) is True
    assert second not in groups.seen.groups[group]


@pytest.mark.parametrize("size", [2, 5])
async def test_the_last_members_resolving_together_resolve_the_group(size: int) -> None:
    """Each deletes its own row before looking, so whichever looks last finds none: at least one says so."""
    tables = MemoryTables()
    group = slugid()
    tasks = await joined(store(tables), group, size)
    processes = [store(tables) for _ in tasks]
    for process in processes:  # each saw every member join
        process.seen.saw(group, list(tasks))
    answers = await asyncio.gather(*(p.resolve_member(group, t) for p, t in zip(processes, tasks, strict=True)))
    assert any(answers)


def resolved_event(group: Any) -> list[Any]:
    from shared.domain.groups import group_changed

    return [group_changed("task-group-resolved", group, timeutil.now())]


async def test_a_groups_only_member_resolves_it_in_one_transaction() -> None:
    tables = CountingTables()
    groups, group = store(tables), slugid()
    (only,) = await joined(groups, group, 1)
    assert (await groups.get(group)).sole == only
    assert await groups.resolve_sole(group, only, resolved_event) is True
    assert tables.queries == 0
    assert await tables.get(GROUPS_TABLE, group, ACTIVE + only) is None
    assert (await groups.get(group)).event_seq == 1  # task-group-resolved recorded
    # A repeated resolution message finds the active row gone: nothing is written; resolve_member decides.
    assert await groups.resolve_sole(group, only, resolved_event) is False
    assert (await groups.get(group)).event_seq == 1


async def test_a_second_member_ends_the_sole_path() -> None:
    tables = MemoryTables()
    groups, group = store(tables), slugid()
    first, _ = await joined(groups, group, 2)
    assert (await groups.get(group)).sole == ""
    assert await groups.resolve_sole(group, first, resolved_event) is False
    assert await tables.get(GROUPS_TABLE, group, ACTIVE + first) is not None  # nothing written


async def test_a_join_racing_the_only_members_resolution_is_seen_by_one_side() -> None:
    """The resolving process's group row is stale (the join happened elsewhere): its transaction fails on the
    ETag, and the active set then shows the new member. The other order: the join's check fails and it clears
    `sole` on the re-read row."""
    tables = MemoryTables()
    group = slugid()
    resolver, other = store(tables), store(tables)
    (only,) = await joined(resolver, group, 1)  # the resolver remembers the row with sole = only
    (late,) = await joined(other, group, 1)
    assert await resolver.resolve_sole(group, only, resolved_event) is False
    assert await resolver.resolve_member(group, only) is False
    assert await tables.get(GROUPS_TABLE, group, ACTIVE + late) is not None  # the group waits for it

    group2 = slugid()
    (only2,) = await joined(resolver, group2, 1)
    stale = await other.check_joinable(group2, "-")  # read before the resolution
    assert stale is not None and stale.sole == only2
    assert await resolver.resolve_sole(group2, only2, resolved_event) is True
    late2 = slugid()
    await other.join(group2, "-", late2, EXPIRES, EXPIRES, stale)
    assert (await other.get(group2)).sole == ""
    assert await tables.get(GROUPS_TABLE, group2, ACTIVE + late2) is not None


class CallCounting(MemoryTables):
    """Counts every call by operation."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name in ("get", "query", "delete", "transact", "commit", "upsert", "replace", "insert"):

            async def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] = self.calls.get(name, 0) + 1
                return await attr(*args, **kwargs)

            return counted
        return attr


async def test_members_resolving_together_leave_in_one_transaction_that_proves_another_unresolved() -> None:
    """60 members of a group resolving at once in one process: their deletes are one transaction, with a merge of
    no property into the active row of the 61st (seen unresolved), which proves the group not empty: no delete
    and read each, no look after; exactly one of them resolves it."""
    tables = CallCounting()
    groups, group = store(tables), slugid()
    tasks = await joined(groups, group, 61)
    witness = await tables.get(GROUPS_TABLE, group, ACTIVE + tasks[60])
    tables.calls.clear()
    answers = await asyncio.gather(*(groups.resolve_member(group, t) for t in tasks[:60]))
    assert not any(answers)  # the 61st is still active
    assert tables.calls.get("transact", 0) == 1, tables.calls  # (the memory store's transact calls its commit)
    assert tables.calls.get("delete", 0) == 0 and tables.calls.get("get", 0) + tables.calls.get("query", 0) == 0
    assert (await tables.get(GROUPS_TABLE, group, ACTIVE + tasks[60])).data == witness.data
    tables.calls.clear()
    assert await groups.resolve_member(group, tasks[60]) is True
    tables.calls.clear()
    # Repeated (resolution messages delivered again): the rows are gone, a delete each; the group still resolved.
    assert (await asyncio.gather(*(groups.resolve_member(group, t) for t in tasks))).count(True) == 1
    assert tables.calls.get("delete", 0) <= len(tasks)


async def test_leaving_many_groups_at_once_leaves_nothing_behind() -> None:
    """500 groups with members leaving together: each group's leave is its own (none waits for another group's),
    and nothing is kept per group once they have left."""
    tables = MemoryTables()
    groups = store(tables)
    members = {slugid(): await joined(groups, g, 2) for g in [slugid() for _ in range(500)] for _ in [0]}
    answers = await asyncio.gather(*(groups.resolve_member(g, t) for g, ts in members.items() for t in ts))
    assert answers.count(True) == 500
    assert groups.leaving.pending() == 0
