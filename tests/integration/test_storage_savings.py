"""Storage savings on Azurite, through the lean REST client: remembered task rows (KnownTasks), group commit of
index rows, createTask's group reads (none for a task that is its own group), receives shared by claimWork calls,
and the put announcement the local host wakes its triggers by. Each test fails without its feature."""

from __future__ import annotations

import asyncio
import collections

import pytest

from shared import timeutil
from shared.domain.groups import GROUPS_TABLE, TaskGroupSchedulerConflict
from shared.domain.messages import pending_queue
from shared.domain.tasks import TASKS_TABLE
from shared.operations.claims import Claim, ClaimRefusal
from shared.runtime import Queue
from shared.storage.base import PUT_LISTENERS, Entity
from shared.storage.grouped import GroupedUpserts
from shared.storage.rest import RestQueues, RestTables
from tests.conftest import schema_defaults, slugid, task_definition
from tests.services import azurite_service


class CountingTables(RestTables):
    """RestTables that counts point reads by table and transactions."""

    def __init__(self, connection: str) -> None:
        super().__init__(connection)
        self.reads: dict[str, int] = {}
        self.transactions = 0

    async def get(self, table, partition_key, row_key):
        self.reads[table] = self.reads.get(table, 0) + 1
        return await super().get(table, partition_key, row_key)

    async def commit(self, table, ops):
        self.transactions += 1
        return await super().commit(table, ops)


def services(connection: str) -> tuple[Queue, Queue, CountingTables]:
    """Two services on one Azurite (two processes, nothing remembered in common); the first counts its reads."""
    tables = CountingTables(connection)
    one = azurite_service(connection, tables=tables)
    other = azurite_service(connection)
    return one, other, tables


async def create(service: Queue) -> str:
    task_id = slugid()
    definition = task_definition()
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id


def test_remembered_rows_save_reads_and_never_decide_alone(azurite):
    async def go():
        one, other, tables = services(azurite.connection_string)
        try:
            # A lifecycle in one process reads no task row: each step starts from the row the last one wrote,
            # with the ETag Azurite returned in the transaction's response.
            task_id = await create(one)
            assert tables.reads.get(TASKS_TABLE, 0) == 0
            assert isinstance(await one.claims.claim(task_id, 0, "g", "w"), Claim)
            await one.lifecycle.resolve(task_id, 0, "completed", "completed")
            assert tables.reads.get(TASKS_TABLE, 0) == 0
            # Another process changes a task behind the first one's back: the first one's remembered row is
            # stale, and neither a claim nor a refusal is decided on it.
            stale = await create(one)
            await other.lifecycle.cancel_task(stale)
            assert await one.claims.claim(stale, 0, "g", "w") is ClaimRefusal.CONFLICT
            retried = await create(one)
            assert isinstance(await one.claims.claim(retried, 0, "g", "w"), Claim)
            await other.lifecycle.resolve(retried, 0, "exception", "worker-shutdown")  # run 1 pending, unknown to `one`
            claimed = await one.claims.claim(retried, 1, "g", "w2")
            assert isinstance(claimed, Claim) and claimed.run.worker_id == "w2"
            assert (await other.queries.task(retried)).status()["runs"][1]["state"] == "running"
        finally:
            await asyncio.gather(one.close(), other.close())

    asyncio.run(go())


async def create_in(service: Queue, group: str, task_id: str | None = None, scheduler: str = "-") -> str:
    task_id = task_id or slugid()
    definition = task_definition(taskGroupId=group, schedulerId=scheduler)
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id


def test_create_task_reads_a_group_row_only_when_it_must(azurite):
    async def go():
        one, other, tables = services(azurite.connection_string)
        try:
            # A task that is its own group (the default) inserts its group without reading it first.
            task_id = await create(one)
            assert tables.reads.get(GROUPS_TABLE, 0) == 0
            assert (await one.stores.groups.get(task_id)) is not None
            tables.reads.clear()
            # A group another process made is read once; this process's next task in it reads nothing.
            group = await create(other)
            await create_in(one, group)
            await create_in(one, group)
            assert tables.reads.get(GROUPS_TABLE, 0) == 1
            # A task named like a group that exists already (another scheduler's) finds out when its insert
            # fails: it is refused, as before.
            taken = slugid()
            await create_in(other, taken, scheduler="other-scheduler")
            with pytest.raises(TaskGroupSchedulerConflict):
                await create_in(one, taken, task_id=taken)
        finally:
            await asyncio.gather(one.close(), other.close())

    asyncio.run(go())


def test_index_rows_arriving_together_go_in_one_transaction(azurite):
    async def go():
        tables = CountingTables(azurite.connection_string)
        grouped = GroupedUpserts(tables)
        name, partition = "GroupedIndex", slugid()
        try:
            await tables.ensure_tables([name])
            await asyncio.gather(*(grouped.upsert(name, Entity(partition, f"r{i:02d}", {"n": i})) for i in range(40)))
            # The first row goes alone (a plain upsert); the 39 that arrived meanwhile in one transaction.
            assert tables.transactions == 1
            page = await tables.query(name, "PartitionKey eq @pk", {"pk": partition})
            assert [e.data["n"] for e in page.entities] == list(range(40))
        finally:
            await tables.close()

    asyncio.run(go())


def test_claim_work_calls_waiting_together_share_their_receives(azurite):
    async def go():
        queues = CountingQueues(azurite.connection_string)
        service = azurite_service(azurite.connection_string, queues=queues)
        try:
            definition = task_definition()
            tq = definition["taskQueueId"]
            ids = [slugid() for _ in range(8)]
            for task_id in ids:
                await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
            queues.receives.clear()
            claims = await asyncio.gather(*(service.work.claim_work(tq, "g", f"w{i}", 1) for i in range(8)))
            assert sorted(c.task.task_id for found in claims for c in found) == sorted(ids)  # each claimed once
            assert queues.receives[pending_queue(tq, "lowest")] < 8  # eight workers, fewer receives
        finally:
            await service.close()

    asyncio.run(go())


def test_callers_that_come_while_a_receive_finds_a_queue_empty_take_its_answer(azurite):
    """On Azurite: an empty queue, one receive in flight, three more callers: one receive in all, each told
    the queue is empty, and told when that receive was sent (claimWork skips the queue only if no hint was put
    here since)."""
    from shared.operations.writes.receiving import SharedReceives

    async def go():
        queues = CountingQueues(azurite.connection_string)
        try:
            await queues.ensure_queues(["shared-empty"])
            shared = SharedReceives(queues)
            first = asyncio.ensure_future(shared.receive("shared-empty", 1, 30))
            await asyncio.sleep(0)  # its receive is in flight
            answers = await asyncio.gather(first, *(shared.receive("shared-empty", 2, 30) for _ in range(3)))
            assert queues.receives["shared-empty"] == 1
            assert [list(a) for a in answers] == [[]] * 4 and len({a.sent_at for a in answers}) == 1
        finally:
            await queues.close()

    asyncio.run(go())


class CountingQueues(RestQueues):
    def __init__(self, connection: str) -> None:
        super().__init__(connection)
        self.receives: collections.Counter[str] = collections.Counter()

    async def receive(self, queue, max_messages, visibility_timeout):
        self.receives[queue] += 1
        return await super().receive(queue, max_messages, visibility_timeout)


def test_a_put_visible_at_once_is_announced_to_the_local_host(azurite):
    async def go():
        queues = RestQueues(azurite.connection_string)
        heard: list[str] = []
        PUT_LISTENERS.append(heard.append)
        try:
            await queues.ensure_queues(["announced-now", "announced-later"])
            await queues.put("announced-now", b"{}")
            await queues.put("announced-later", b"{}", visible_in=30)  # a check for later wakes nothing
            assert heard == ["announced-now"]
        finally:
            PUT_LISTENERS.remove(heard.append)
            await queues.close()

    asyncio.run(go())


def test_a_groups_only_member_resolves_it_without_the_active_set_query(azurite):
    """On Azurite: the sole member's resolution is one transaction (no query of the group's active set), records
    task-group-resolved; a member that joined through another process makes that transaction fail on the group
    row's ETag, writing nothing, and the general path then finds the new member active."""
    from shared.domain.groups import ACTIVE, group_changed
    from shared.timeutil import now

    def resolved(group):
        return [group_changed("task-group-resolved", group, now())]

    class QueryCounting(CountingTables):
        queries = 0

        async def query(self, *args, **kwargs):
            self.queries += 1
            return await super().query(*args, **kwargs)

    async def go():
        tables = QueryCounting(azurite.connection_string)
        one = azurite_service(azurite.connection_string, tables=tables)
        spare, other, _ = services(azurite.connection_string)
        try:
            alone = await create(one)  # its own group, alone in it
            groups = one.stores.groups
            before = tables.transactions
            assert await groups.resolve_sole(alone, alone, resolved) is True
            assert (tables.transactions - before, tables.queries) == (1, 0)
            assert await tables.get(GROUPS_TABLE, alone, ACTIVE + alone) is None
            assert (await other.stores.groups.get(alone)).event_seq == 1

            first = await create(one)
            late = await create_in(other, first)  # joins through another process: `one` has a stale group row
            assert (await other.stores.groups.get(first)).sole == ""
            assert await groups.resolve_sole(first, first, resolved) is False
            assert await tables.get(GROUPS_TABLE, first, ACTIVE + first) is not None  # nothing written
            assert await groups.resolve_member(first, first) is False  # `late` is active
            assert await tables.get(GROUPS_TABLE, first, ACTIVE + late) is not None
        finally:
            await asyncio.gather(one.close(), other.close(), spare.close())

    asyncio.run(go())


def test_a_task_alone_in_its_group_writes_the_group_in_its_own_transactions(azurite):
    """On Azurite: a task whose group is named after it (the default) is created in one transaction with its group,
    and its resolution (nothing depends on it) resolves the group in the same transaction, with no resolution
    message (the claim check is deleted); a member that joined through another process makes the group row's
    condition fail that transaction, and the resolution is written again without the group, which stays open."""
    from shared.domain.groups import ACTIVE
    from shared.domain.messages import CLAIM_QUEUE, RESOLVED_QUEUE

    async def go():
        one, other, tables = services(azurite.connection_string)
        try:
            before = tables.transactions
            alone = await create(one)
            assert tables.transactions - before == 1
            assert isinstance(await one.claims.claim(alone, 0, "g", "w"), Claim)
            await one.stores.settled()
            claim_check = (await one.tasks.load(alone)).checks["claim"]
            before = tables.transactions
            await one.lifecycle.resolve(alone, 0, "completed", "completed")
            await one.stores.settled()
            assert tables.transactions - before == 1
            assert await tables.get(GROUPS_TABLE, alone, ACTIVE + alone) is None
            events, _ = await other.groups.events(alone, limit=10, continuation=None)
            assert [e.exchange for _, e in events] == ["task-group-resolved"]
            mine = [
                m
                for name in (CLAIM_QUEUE, RESOLVED_QUEUE)
                for m in await one.stores.queues.receive(name, 32, 1)
                if m.id == claim_check[0] or m.json().get("taskId") == alone
            ]
            assert mine == []  # the claim check deleted, no resolution message put

            first = await create(one)
            late = await create_in(other, first)  # `one` still has the group row from before this join
            assert isinstance(await one.claims.claim(first, 0, "g", "w"), Claim)
            before = tables.transactions
            await one.lifecycle.resolve(first, 0, "completed", "completed")
            assert tables.transactions - before == 2  # with the group (failed), then without it
            assert (await other.queries.task(first)).status()["state"] == "completed"
            assert await tables.get(GROUPS_TABLE, first, ACTIVE + first) is not None  # left to the resolution
            await one.stores.settled()  # which this process does after the answer, as its message would
            assert await tables.get(GROUPS_TABLE, first, ACTIVE + first) is None
            assert await tables.get(GROUPS_TABLE, first, ACTIVE + late) is not None  # the group waits for it
            events, _ = await other.groups.events(first, limit=10, continuation=None)
            assert events == []
        finally:
            await asyncio.gather(one.close(), other.close())

    asyncio.run(go())


def test_the_resolving_process_unblocks_dependents_and_deletes_the_hidden_resolution_message(azurite):
    """On Azurite: a completed task's resolution message (its claim check, updated) stays hidden while the
    process that resolved the task unblocks the dependent itself, and then deletes it (unreceived: a host polling
    this Azurite cannot have taken it). With no grace, the process leaves the message to its handler."""
    from shared.domain.messages import CLAIM_QUEUE

    class CountingQueues(RestQueues):
        claim_deletes = 0

        async def delete(self, queue, message):
            self.claim_deletes += queue == CLAIM_QUEUE
            return await super().delete(queue, message)

    async def go(grace: int) -> tuple[str, int]:
        queues = CountingQueues(azurite.connection_string)
        queue = azurite_service(azurite.connection_string, queues=queues, resolution_grace=grace)
        try:
            root = await create(queue)
            definition = task_definition(dependencies=[root])
            dependent = slugid()
            await queue.creation.create_task(dependent, dict(definition, **schema_defaults(definition)))
            assert isinstance(await queue.claims.claim(root, 0, "g", "w"), Claim)
            await queue.lifecycle.resolve(root, 0, "completed", "completed")
            await queue.stores.settled()
            return (await queue.queries.task(dependent)).status()["state"], queues.claim_deletes
        finally:
            await queue.close()

    assert asyncio.run(go(10)) == ("pending", 1)  # unblocked here; the message (the claim check) deleted here
    assert asyncio.run(go(0))[1] == 0  # the message is its handler's


def test_a_dependent_flags_its_dependency_row_and_a_stale_resolution_decides_again(azurite):
    """On Azurite: a dependent created through another process flags the root's row (merge on its ETag, with its
    edge); the
    first process resolves the root from the row it remembers, fails on the ETag, decides again on the flagged
    row, and its resolution (here, in its own process after the answer) unblocks the dependent."""

    async def go():
        one, other, _ = services(azurite.connection_string)
        try:
            root = await create(one)
            assert isinstance(await one.claims.claim(root, 0, "g", "w"), Claim)
            assert one.tasks.known.get(root).dependents_here is False
            definition = task_definition(dependencies=[root])
            dependent = slugid()
            await other.creation.create_task(dependent, dict(definition, **schema_defaults(definition)))
            assert (await other.tasks.get(root)).dependents_here is True
            await one.lifecycle.resolve(root, 0, "completed", "completed")
            await one.stores.settled()
            assert (await other.tasks.get(dependent)).state == "pending"
        finally:
            await asyncio.gather(one.close(), other.close())

    asyncio.run(go())


class RecordingTables(RestTables):
    """RestTables that records every query (table, filter), point read (table, RowKey) and the ops of every
    transaction."""

    def __init__(self, connection: str) -> None:
        super().__init__(connection)
        self.queries: list[tuple[str, str]] = []
        self.gets: list[tuple[str, str]] = []
        self.transactions: list[tuple[str, list[str]]] = []

    async def get(self, table, partition_key, row_key):
        self.gets.append((table, row_key))
        return await super().get(table, partition_key, row_key)

    async def query(self, table, filter, parameters, **kwargs):
        self.queries.append((table, filter))
        return await super().query(table, filter, parameters, **kwargs)

    async def commit(self, table, ops):
        self.transactions.append((table, [op.entity.row_key for op in ops]))
        return await super().commit(table, ops)


def recorded(connection: str) -> tuple[Queue, RecordingTables]:
    """A queue on Azurite whose tables record their queries and transactions."""
    tables = RecordingTables(connection)
    return azurite_service(connection, tables=tables), tables


def test_dependents_listed_on_their_dependencys_row_are_released_without_a_query(azurite):
    """On Azurite: dependents created through another process are listed on their dependency's row with the
    edges' transaction; resolving it in this process releases each of them with no query of its edges (nor any
    other query), and every one is pending."""

    async def go():
        one, tables = recorded(azurite.connection_string)
        _, other, _ = services(azurite.connection_string)
        try:
            root = await create(one)
            dependents = []
            for requires in ("all-completed", "all-resolved", "all-completed"):
                definition = task_definition(dependencies=[root], requires=requires)
                dependents.append(slugid())
                await other.creation.create_task(dependents[-1], dict(definition, **schema_defaults(definition)))
            assert isinstance(await one.claims.claim(root, 0, "g", "w"), Claim)
            tables.queries.clear()
            await one.lifecycle.resolve(root, 0, "completed", "completed")
            await one.stores.settled()
            assert tables.queries == []
            for dependent in dependents:
                assert (await other.queries.task(dependent)).status()["state"] == "pending"
        finally:
            await one.close()
            await other.close()

    asyncio.run(go())


def test_members_of_a_group_resolving_together_leave_its_active_set_in_one_transaction(azurite):
    """On Azurite: 30 members of one group (and one more still running) resolving at once in one process leave
    the group's active set in one transaction of deletes, not one each, proving in it that the running member is
    still active (no read after), and the group stays unresolved until the last member resolves."""
    from shared.domain.groups import ACTIVE

    async def go():
        one, tables = recorded(azurite.connection_string)
        try:
            group = slugid()
            members = []
            for _ in range(31):
                definition = task_definition(taskGroupId=group)
                members.append(slugid())
                await one.creation.create_task(members[-1], dict(definition, **schema_defaults(definition)))
                assert isinstance(await one.claims.claim(members[-1], 0, "g", "w"), Claim)
            await one.stores.settled()
            tables.transactions.clear()
            await asyncio.gather(*(one.lifecycle.resolve(m, 0, "completed", "completed") for m in members[:30]))
            await one.stores.settled()
            leaving = [
                rows
                for table, rows in tables.transactions
                if table == GROUPS_TABLE and any(r.startswith(ACTIVE) for r in rows)
            ]
            # The deletes, and the merge proving the running member still active: no look after them.
            assert len(leaving) == 1 and sorted(leaving[0]) == sorted(ACTIVE + m for m in members), leaving
            assert not [g for g in tables.gets if g[1].startswith(ACTIVE)] and not tables.queries
            assert (await one.queries.task(members[30])).status()["state"] == "running"
            witness = await one.stores.tables.get(GROUPS_TABLE, group, ACTIVE + members[30])
            assert witness is not None and witness.data.get("since")  # the merge of no property kept it as it was
            tables.transactions.clear()
            await one.lifecycle.resolve(members[30], 0, "completed", "completed")
            await one.stores.settled()
            assert await one.stores.tables.get(GROUPS_TABLE, group, ACTIVE + members[30]) is None
        finally:
            await one.close()

    asyncio.run(go())


def test_a_leave_whose_witness_resolved_elsewhere_looks_again(azurite):
    """On Azurite: the member a leave would prove still active has left meanwhile (another process): the leave's
    transaction is refused (its merge finds no row), nothing of it applied; the deletes then go alone and the
    look that follows finds the other member still active; the group resolves with the last one."""
    from shared.domain.groups import ACTIVE

    async def go():
        one, tables = recorded(azurite.connection_string)
        try:
            group = slugid()
            first, second, third = await joined(one, group, 3)
            await one.stores.tables.delete(GROUPS_TABLE, group, ACTIVE + third)  # resolved by another process
            tables.transactions.clear()
            assert await one.stores.groups.resolve_member(group, first) is False
            assert [rows for _, rows in tables.transactions][:1] == [[ACTIVE + first, ACTIVE + third]]
            assert await one.stores.tables.get(GROUPS_TABLE, group, ACTIVE + first) is None
            assert await one.stores.tables.get(GROUPS_TABLE, group, ACTIVE + second) is not None
            assert await one.stores.groups.resolve_member(group, second) is True
        finally:
            await one.close()

    asyncio.run(go())


async def joined(queue: Queue, group: str, count: int) -> list[str]:
    """`count` members of `group` joined through `queue`'s group store (seen unresolved by it)."""
    groups = queue.stores.groups
    await queue.stores.ready()
    expires = timeutil.parse("2030-01-01T00:00:00.000Z")
    members = [slugid() for _ in range(count)]
    for task_id in members:
        await groups.join(group, "-", task_id, expires, expires, await groups.check_joinable(group, "-"))
    return members
