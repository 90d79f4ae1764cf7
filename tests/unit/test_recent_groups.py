"""The recent task groups (shared/domain/recent_groups.py): a group is listed once it has a second task (a push),
newest first, a row per group, not per task; days past DAYS_KEPT are deleted by the expiry timer."""

from __future__ import annotations

import datetime as dt

from shared.domain.recent_groups import RECENT_GROUPS_TABLE
from shared.runtime import Queue
from shared.storage.memory import MemoryTables
from shared.stores import recent_groups
from shared.stores.recent_groups import RecentGroups
from tests.conftest import schema_defaults, slugid, task_definition
from tests.services import memory_service
from tests.turns import others_run


class CountingTables(MemoryTables):
    def __init__(self) -> None:
        super().__init__()
        self.recent_writes = 0

    async def upsert(self, table, entity):
        self.recent_writes += table == RECENT_GROUPS_TABLE
        return await super().upsert(table, entity)


async def create(service: Queue, group: str, task_id: str | None = None) -> str:
    task_id = task_id or slugid()
    definition = task_definition(taskGroupId=group)
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id


async def test_a_group_is_listed_once_its_second_task_joins_and_only_once() -> None:
    tables = CountingTables()
    service = memory_service(tables=tables)
    lone = slugid()
    await create(service, lone, lone)  # a task in the group named after it: not a push
    decision = slugid()
    await create(service, decision, decision)
    assert await service.stores.groups.recent.recent(service.stores.now(), 10) == []
    for _ in range(5):
        await create(service, decision)  # the decision task's tasks: the first makes it a push
    other = slugid()
    await create(service, other)  # a group named after none of its tasks: a push from its first task
    listed = await service.stores.groups.recent.recent(service.stores.now(), 10)
    assert [g["taskGroupId"] for g in listed] == [other, decision]  # newest first
    assert tables.recent_writes == 2  # a row per group, not per task
    assert await service.stores.groups.unresolved(decision)


async def test_days_past_those_kept_are_deleted() -> None:
    tables = MemoryTables()
    recent = RecentGroups(tables)
    now = dt.datetime(2026, 11, 28, 12, tzinfo=dt.UTC)
    for back in (0, 3, recent_groups.DAYS_KEPT + 1, recent_groups.DAYS_KEPT + 5):
        await recent.add(slugid(), "s", now - dt.timedelta(days=back), now + dt.timedelta(days=30))
    assert len(await recent.recent(now, 10)) == 2  # the last DAYS_LISTED days only
    assert await recent.forget_before(now) == 2
    assert await recent.forget_before(now) == 0
    assert len(await recent.recent(now, 10)) == 2


async def test_the_listing_is_answered_from_one_read_for_a_few_seconds(monkeypatch) -> None:
    """listRecentTaskGroups costs ~300 storage reads (a group's row, unfinished rows and failures each): a process
    lists once per RECENT_GROUPS_CACHE_SECONDS whatever the callers and limits."""
    from shared.operations import groups as groups_mod

    ticks = [0.0]
    monkeypatch.setattr(groups_mod.time, "monotonic", lambda: ticks[0])
    service = memory_service()
    push = slugid()
    await create(service, push)
    await create(service, push)
    lists = []
    original = service.stores.groups.recent.recent

    async def counted(*args, **kwargs):
        lists.append(1)
        return await original(*args, **kwargs)

    monkeypatch.setattr(service.stores.groups.recent, "recent", counted)
    for limit in (20, 5, 100, 20):
        found = await service.groups.recent(limit)
        assert [g["taskGroupId"] for g in found] == [push] and found[0]["unresolved"]
    assert len(lists) == 1
    ticks[0] += 5.1
    await service.groups.recent(20)
    assert len(lists) == 2


async def test_callers_that_find_the_listing_stale_together_share_one(monkeypatch) -> None:
    """Round four: 50 concurrent listRecentTaskGroups after the copy expired each ran their own listing (3,100 gets,
    6,450 queries, 16 s). Whoever finds it stale while it is being made waits for that one; a caller that leaves
    does not cancel it for the others."""
    import asyncio

    service = memory_service()
    push = slugid()
    await create(service, push)
    await create(service, push)
    lists: list[int] = []
    gate = asyncio.Event()
    original = service.stores.groups.recent.recent

    async def slow(*args, **kwargs):
        lists.append(1)
        await gate.wait()
        return await original(*args, **kwargs)

    monkeypatch.setattr(service.stores.groups.recent, "recent", slow)
    callers = [asyncio.ensure_future(service.groups.recent(20)) for _ in range(50)]
    await others_run()
    callers[0].cancel()  # one leaves
    gate.set()
    answers = await asyncio.gather(*callers[1:])
    assert len(lists) == 1 and all([g["taskGroupId"] for g in a] == [push] for a in answers)
