"""Sharding on the memory connector: rows and queues routed over several accounts, check and pending queues split,
hot partitions salted; and a graph run through a sharded service, its messages handled shard by shard."""

from __future__ import annotations

import collections
import datetime as dt
import time

import pytest

from shared import timeutil
from shared.domain.deadlines import DEADLINES_TABLE
from shared.domain.expiry import TASK_EXPIRY_TABLE
from shared.domain.groups import group_row
from shared.domain.messages import CLAIM_QUEUE, DEADLINE_QUEUE, RESOLVED_QUEUE, ResolvedCheck, Shards, pending_queues
from shared.domain.queue_runs import TASK_QUEUE_RUNS_TABLE
from shared.domain.tasks import TASKS_TABLE, task_row
from shared.outbox.rows import DISPATCH_QUEUE
from shared.runtime import GLOBAL_TABLES, Queue
from shared.storage.base import Entity, Op
from shared.storage.keys import InvalidContinuation, chain_token
from shared.storage.memory import MemoryQueues, MemoryTables
from shared.storage.sharded import (
    ShardedQueues,
    ShardedTables,
    partition_account,
    queue_account,
    scan_token,
    shard_name,
    split_shard,
)
from tests.answers import claim_work
from tests.clock import Clock
from tests.conftest import slugid, task_definition
from tests.services import memory_service
from tests.turns import others_run


def sharded_tables(accounts: int) -> tuple[ShardedTables, list[MemoryTables]]:
    stores = [MemoryTables() for _ in range(accounts)]
    return ShardedTables(stores, GLOBAL_TABLES), stores


async def test_rows_go_to_the_account_of_their_partition_and_global_tables_to_the_first() -> None:
    tables, accounts = sharded_tables(4)
    await tables.ensure_tables([TASKS_TABLE, "Clients"])
    placed: collections.Counter[int] = collections.Counter()
    for n in range(400):
        pk = slugid()
        await tables.upsert(TASKS_TABLE, Entity(pk, "task", {"n": n}))
        await tables.upsert(TASKS_TABLE, Entity(pk, "m:x", {"n": n}))  # the same partition: the same account
        holders = [i for i, a in enumerate(accounts) if await a.get(TASKS_TABLE, pk, "task") is not None]
        assert len(holders) == 1 and await accounts[holders[0]].get(TASKS_TABLE, pk, "m:x") is not None
        placed[holders[0]] += 1
        assert (await tables.get(TASKS_TABLE, pk, "task")).data == {"n": n}  # type: ignore[union-attr]
        await tables.upsert("Clients", Entity(pk, "client", {}))
    assert all(placed[i] > 60 for i in range(4)), placed  # spread over every account
    assert len((await accounts[0].query("Clients", "PartitionKey ge @lo", {"lo": ""})).entities) == 400
    # A query naming its partition asks that partition's account; a transaction goes with its partition.
    pk = slugid()
    assert await tables.transact(TASKS_TABLE, [Op("insert", Entity(pk, f"r{i}")) for i in range(5)])
    page = await tables.query(TASKS_TABLE, "PartitionKey eq @pk and RowKey ge @lo", {"pk": pk, "lo": "r2"})
    assert [e.row_key for e in page.entities] == ["r2", "r3", "r4"]


async def test_a_scan_pages_through_every_account_once() -> None:
    tables, _ = sharded_tables(4)
    await tables.ensure_tables([TASK_EXPIRY_TABLE])
    keys = {(f"2026-11-25T{h:02d}", slugid()) for h in range(24) for _ in range(100)}  # 2,400 distinct rows
    for pk, rk in keys:
        await tables.upsert(TASK_EXPIRY_TABLE, Entity(pk, rk, {"expires": "x"}))
    seen: list[tuple[str, str]] = []
    token: str | None = None
    pages = 0
    while True:
        page = await tables.query(
            TASK_EXPIRY_TABLE, "PartitionKey le @hour", {"hour": "2026-11-25T99"}, limit=97, continuation=token
        )
        assert len(page.entities) <= 97
        if pages == 0:  # every account has its share of each page: a timer's pass moves on in all of them
            assert len({partition_account(e.partition_key, 4) for e in page.entities}) == 4
        seen.extend((e.partition_key, e.row_key) for e in page.entities)
        pages += 1
        token = page.continuation
        if token is None:
            break
    assert len(seen) == len(keys) and set(seen) == keys
    assert pages <= -(-len(keys) // 97) + 4  # nearly full pages (an account that ran out leaves its share empty)
    # A page smaller than the accounts asks the first ones; nothing is skipped.
    small: list[tuple[str, str]] = []
    token = None
    while True:
        page = await tables.query(
            TASK_EXPIRY_TABLE, "PartitionKey le @hour", {"hour": "2026-11-25T0"}, limit=3, continuation=token
        )
        assert len(page.entities) <= 3
        small.extend((e.partition_key, e.row_key) for e in page.entities)
        if (token := page.continuation) is None:
            break
    assert sorted(small) == sorted(k for k in keys if k[0] <= "2026-11-25T0")
    for bad in (
        "bm90IGEgdG9rZW4",
        scan_token([False, False, False, False]),
        scan_token([None, None]),
        scan_token([None, 3, None, None]),
    ):
        with pytest.raises(InvalidContinuation):
            await tables.query(TASK_EXPIRY_TABLE, "PartitionKey le @hour", {"hour": "z"}, continuation=bad)


async def test_queues_go_to_their_account_shards_spread_and_poison_queues_go_with_theirs() -> None:
    accounts = [MemoryQueues() for _ in range(4)]
    queues = ShardedQueues(accounts)
    names = [shard_name(CLAIM_QUEUE, j) for j in range(4)]
    assert names == ["claim-expiry", "claim-expiry-s1", "claim-expiry-s2", "claim-expiry-s3"]
    assert sorted(queue_account(name, 4) for name in names) == [0, 1, 2, 3]  # K shards on K accounts
    assert split_shard("pending-abc-3-s2") == ("pending-abc-3", 2) and split_shard("pending-abc-3") == (
        "pending-abc-3",
        0,
    )
    assert queue_account("claim-expiry-s2-poison", 4) == queue_account("claim-expiry-s2", 4)
    for name in names:
        await queues.put(name, name.encode())
    for name in names:
        holder = accounts[queue_account(name, 4)]
        [message] = await holder.receive(name, 32, 30)
        assert message.content == name.encode()
        assert await queues.approximate_count(name) == 1


def test_a_tasks_messages_and_rows_go_to_the_shard_of_its_id() -> None:
    shards = Shards(checks=4, pending=3)
    counts: collections.Counter[str] = collections.Counter()
    for _ in range(2_000):
        task_id = slugid()
        queue = shards.check_queue(CLAIM_QUEUE, task_id)
        assert queue == shards.check_queue(CLAIM_QUEUE, task_id)  # every process computes the same
        counts[queue] += 1
        assert shards.salted("tq", task_id) in shards.salts("tq")
    assert set(counts) == set(shards.check_queues(CLAIM_QUEUE)) and min(counts.values()) > 350
    # claimWork reads every shard of each priority before the next priority, from a random shard on.
    queues = shards.pending_queues("prov/wt")
    assert sorted(queues) == sorted(pending_queues("prov/wt", 3)) and len(queues) == 21
    assert [split_shard(q)[0] for q in queues[:3]] == [pending_queues("prov/wt")[0]] * 3
    assert len({split_shard(q)[1] for q in queues[:3]}) == 3
    assert Shards().check_queue(CLAIM_QUEUE, "x") == CLAIM_QUEUE  # one shard: the names of old


def sharded_service(
    accounts: int = 3, shards: int = 3, clock: Clock | None = None
) -> tuple[Queue, list[MemoryTables], list[MemoryQueues]]:
    tables = [MemoryTables() for _ in range(accounts)]
    queues = [MemoryQueues() for _ in range(accounts)]
    service = memory_service(
        tables=ShardedTables(tables, GLOBAL_TABLES),
        queues=ShardedQueues(queues),
        clock=clock,
        check_shards=shards,
        pending_shards=shards,
    )
    return service, tables, queues


async def handle_resolutions(service: Queue) -> int:
    """What the check queues' triggers do with resolution messages, shard by shard: the number handled."""
    handled = 0
    shards = service.stores.shards
    for queue in [*shards.check_queues(RESOLVED_QUEUE), *shards.check_queues(CLAIM_QUEUE)]:
        for message in await service.stores.queues.receive(queue, 32, 30):
            body = message.json()
            if ResolvedCheck.carried_by(body):
                await service.resolution.follow_up(ResolvedCheck.decode(body))
                await service.stores.queues.delete(queue, message)
                handled += 1
    return handled


async def test_a_graph_runs_through_a_sharded_service() -> None:
    clock = Clock()
    service, tables, queues = sharded_service(clock=clock)
    tq = f"prov/wt-{slugid()[:8].lower()}"
    group = slugid()
    # One deadline for every task (computed once, not as each is made: creating them may cross a second, and the
    # check below counts the salted partitions of one deadline second).
    created = timeutil.now().replace(microsecond=0)
    times = {"created": timeutil.iso(created), "deadline": timeutil.iso(created + dt.timedelta(hours=1))}
    layers: list[list[str]] = []
    for width in (1, 6, 24):
        layer = [slugid() for _ in range(width)]
        for i, task_id in enumerate(layer):
            deps = [layers[-1][i % len(layers[-1])]] if layers else []
            await service.creation.create_task(
                task_id,
                task_definition(
                    taskQueueId=tq,
                    taskGroupId=group,
                    dependencies=deps,
                    schedulerId="-",
                    projectId="none",
                    requires="all-completed",
                    routes=[],
                    priority="lowest",
                    retries=5,
                    scopes=[],
                    tags={},
                    extra={},
                    **times,
                ),
            )
        layers.append(layer)
    everything = [t for layer in layers for t in layer]
    completed: set[str] = set()
    give_up = time.monotonic() + 60  # rounds until done: a loaded machine takes more of them, not other answers
    while completed != set(everything) and time.monotonic() < give_up:
        claims = await claim_work(service, tq, "g", "w", 8)
        for claim in claims:
            task_id = claim["status"]["taskId"]
            await service.lifecycle.resolve(task_id, int(claim["runId"]), "completed", "completed")
            completed.add(task_id)
        await handle_resolutions(service)
        if not claims:
            await others_run()
    assert completed == set(everything)
    for task_id in everything:
        assert (await service.queries.task(task_id)).status()["state"] == "completed"
    # Where things went: task rows on every account, the run index and deadlines salted three ways, the
    # check queues of every shard used.
    holders = [len([t for t in everything if await a.get(TASKS_TABLE, t, task_row(t)) is not None]) for a in tables]
    assert sum(holders) == len(everything) and all(holders), holders
    group_holders = [a for a in tables if (await a.get(TASKS_TABLE, group, group_row(group))) is not None]
    assert len(group_holders) == 1
    deadline_rows = [
        e for a in tables for e in (await a.query(DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""})).entities
    ]
    assert len({e.partition_key for e in deadline_rows}) == 3  # one deadline second, salted three ways
    clock.now += dt.timedelta(hours=2)  # the deadline buckets come due: their tasks enter the expiry index
    for bucket, count in collections.Counter(e.partition_key for e in deadline_rows).items():
        assert await service.checks.check_deadlines({"bucket": bucket}) == f"checked {count}"
    expiry_rows = [
        e for a in tables for e in (await a.query(TASK_EXPIRY_TABLE, "PartitionKey ge @lo", {"lo": ""})).entities
    ]
    assert len({e.partition_key for e in expiry_rows}) >= 2
    assert {e.row_key for e in expiry_rows} == set(everything)
    used = {name for q in queues for name in q._queues}
    for base in (CLAIM_QUEUE, RESOLVED_QUEUE, DEADLINE_QUEUE, DISPATCH_QUEUE):
        assert set(service.stores.shards.check_queues(base)) <= used, base
    assert len([n for n in used if n.startswith("pending-")]) >= 3


async def test_a_sharded_task_queue_lists_and_counts_its_salted_runs() -> None:
    service, tables, _ = sharded_service()
    tq = f"prov/wt-{slugid()[:8].lower()}"
    created = []
    for _ in range(45):
        task_id = slugid()
        created.append(task_id)
        await service.creation.create_task(
            task_id,
            task_definition(
                taskQueueId=tq,
                schedulerId="-",
                projectId="none",
                dependencies=[],
                requires="all-completed",
                routes=[],
                priority="lowest",
                retries=5,
                scopes=[],
                tags={},
                extra={},
            ),
        )
    partitions = {
        e.partition_key
        for a in tables
        for e in (await a.query(TASK_QUEUE_RUNS_TABLE, "PartitionKey ge @lo", {"lo": ""})).entities
    }
    assert len(partitions) == 3
    assert await service.stores.queue_runs.count_runs(tq, "pending") == 45
    listed: list[str] = []
    token: str | None = None
    while True:  # pages of 7 across the three partitions, every run once
        rows, token = await service.stores.queue_runs.runs(tq, "pending", limit=7, continuation=token)
        assert len(rows) <= 7
        listed.extend(r.row_key for r in rows)
        if token is None:
            break
    assert sorted(listed) == sorted(created)
    with pytest.raises(InvalidContinuation):
        await service.stores.queue_runs.runs(tq, "pending", limit=7, continuation=chain_token(3, None))  # 3 parts
    census = await service.stores.queue_runs.pending_census()
    assert census[tq][0] == 45
    # pollTaskUrls: every shard of every priority, highest first.
    urls, _ = await service.polling.poll_task_urls(tq)
    assert len(urls) == 21


async def test_tasks_left_in_their_deadline_rows_expire_from_every_account() -> None:
    """A lost bucket message leaves its tasks' deadline rows (salted partitions): the expiry timer's read of them
    goes through every account (a scan, a share each) and deletes each task and its row."""
    clock = Clock()
    service, tables, queues = sharded_service(clock=clock)
    expires = clock.now + dt.timedelta(hours=2)
    tasks = [slugid() for _ in range(30)]
    for task_id in tasks:
        await service.creation.create_task(
            task_id,
            task_definition(
                schedulerId="-",
                projectId="none",
                requires="all-completed",
                routes=[],
                priority="lowest",
                retries=5,
                scopes=[],
                tags={},
                extra={},
                dependencies=[],
                created=timeutil.iso(clock.now),
                deadline=timeutil.iso(clock.now + dt.timedelta(hours=1)),
                expires=timeutil.iso(expires),
            ),
        )
    holders = [len((await a.query(DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""})).entities) for a in tables]
    assert sum(holders) == len(tasks), holders
    for q in queues:
        for name in [n for n in q._queues if n.startswith(DEADLINE_QUEUE)]:
            q.clear(name)  # the buckets' messages, lost
    clock.now = expires + dt.timedelta(hours=1)
    assert await service.expiry.expire_tasks(batch=7) == len(tasks)
    for task_id in tasks:
        assert await service.tasks.get(task_id) is None
    assert [(await a.query(DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""})).entities for a in tables] == [[]] * 3
