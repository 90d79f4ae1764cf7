"""Both storage adapters through the fault proxy on Azurite: for each fault Azure produces (busy, 500
OperationTimedOut after applying, a reset before the request, a reset after it was applied, a delay) and each
operation kind, the outcome equals the fault-free outcome. Also: a call gives up within its budget with
StorageUnavailable, and every request carries a client request id and this project's User-Agent."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from local_host.fault_proxy import KINDS, FaultProxy, Faults
from local_host.limits import Limits
from shared import __version__
from shared.storage.azure import AzureQueues, AzureTables
from shared.storage.base import Entity, Op
from shared.storage.rest import RestQueues, RestTables
from shared.storage.retry import RetryPolicy, StorageUnavailable

ADAPTERS = {"rest": (RestTables, RestQueues), "sdk": (AzureTables, AzureQueues)}
# Room for Azurite's own stalls (in memory, it stops for seconds now and then under a full test run): a fault
# here is one injected answer, and what is proven is that the call then ends as without it, not how fast.
POLICY = RetryPolicy(budget=20, backoff=0.05, max_backoff=0.2, timeout=10, connect_timeout=2)
Scenario = Callable[[Any, Any, str], Awaitable[Any]]


def fresh() -> str:
    return f"F{uuid.uuid4().hex[:12]}"


async def _insert(tables, queues, name):
    written = await tables.insert(name, Entity("p", "r", {"n": 1}))
    return written is not None, (await tables.get(name, "p", "r")).data


async def _insert_existing(tables, queues, name):
    await tables.upsert(name, Entity("p", "r", {"n": "theirs"}))
    written = await tables.insert(name, Entity("p", "r", {"n": "ours"}))
    return written, (await tables.get(name, "p", "r")).data


async def _replace(tables, queues, name):
    first = await tables.insert(name, Entity("p", "r", {"n": 1}))
    written = await tables.replace(name, Entity("p", "r", {"n": 2}, first.etag))
    stored = await tables.get(name, "p", "r")
    return written is not None and written.etag == stored.etag, stored.data


async def _replace_stale(tables, queues, name):
    first = await tables.insert(name, Entity("p", "r", {"n": 1}))
    await tables.upsert(name, Entity("p", "r", {"n": "theirs"}))
    written = await tables.replace(name, Entity("p", "r", {"n": "ours"}, first.etag))
    return written, (await tables.get(name, "p", "r")).data


async def _upsert(tables, queues, name):
    await tables.upsert(name, Entity("p", "r", {"n": 1}))
    return (await tables.get(name, "p", "r")).data


async def _delete(tables, queues, name):
    first = await tables.insert(name, Entity("p", "r", {"n": 1}))
    return await tables.delete(name, "p", "r", first.etag), await tables.get(name, "p", "r")


async def _delete_changed(tables, queues, name):
    first = await tables.insert(name, Entity("p", "r", {"n": 1}))
    await tables.upsert(name, Entity("p", "r", {"n": 2}))
    return await tables.delete(name, "p", "r", first.etag), (await tables.get(name, "p", "r")).data


async def _get_and_query(tables, queues, name):
    for i in range(3):
        await tables.upsert(name, Entity("p", f"r{i}", {"i": i}))
    page = await tables.query(name, "PartitionKey eq @pk", {"pk": "p"}, limit=2)
    rest = await tables.query(name, "PartitionKey eq @pk", {"pk": "p"}, continuation=page.continuation)
    return (await tables.get(name, "p", "r1")).data, [e.data for e in page.entities + rest.entities]


async def _transaction(tables, queues, name):
    first = await tables.insert(name, Entity("p", "a", {"n": 1}))
    done = await tables.transact(
        name, [Op("replace", Entity("p", "a", {"n": 2}, first.etag)), Op("insert", Entity("p", "b", {"n": 3}))]
    )
    rows = await tables.query(name, "PartitionKey eq @pk", {"pk": "p"})
    return done, [e.data for e in rows.entities]


async def _transaction_conflict(tables, queues, name):
    first = await tables.insert(name, Entity("p", "a", {"n": 1}))
    await tables.upsert(name, Entity("p", "a", {"n": "theirs"}))
    done = await tables.transact(
        name, [Op("replace", Entity("p", "a", {"n": 2}, first.etag)), Op("insert", Entity("p", "b", {"n": 3}))]
    )
    rows = await tables.query(name, "PartitionKey eq @pk", {"pk": "p"})
    return done, [e.data for e in rows.entities]


async def _received(queues, queue, wait: float = 3.0) -> set[bytes]:
    """What the queue holds, within `wait` seconds (a message received by an attempt whose answer was lost is
    hidden for that attempt's visibility timeout, 1 s here)."""
    seen: set[bytes] = set()
    give_up = time.monotonic() + wait
    while time.monotonic() < give_up:
        for message in await queues.receive(queue, 32, 1):
            seen.add(message.content)
            await queues.delete(queue, message)
        if seen:
            return seen
        await asyncio.sleep(0.2)
    return seen


async def _put(tables, queues, name):
    queue = name.lower()
    await queues.put(queue, b"hint")  # the queue is made on first use
    # A put whose answer was lost may leave the message twice: the same hint, handled idempotently.
    return await _received(queues, queue)


async def _receive_and_delete(tables, queues, name):
    queue = name.lower()
    await queues.ensure_queues([queue])
    await queues.put(queue, b"one")
    return await _received(queues, queue), await queues.approximate_count(queue)


async def _release(tables, queues, name):
    queue = name.lower()
    await queues.ensure_queues([queue])
    await queues.put(queue, b"one")
    [message] = await queues.receive(queue, 1, 30)
    await queues.release(queue, message, 0)  # visible again at once
    return await _received(queues, queue)


SCENARIOS: dict[str, tuple[str, Scenario]] = {  # name -> (the operation the fault hits, scenario)
    "insert": ("table.insert", _insert),
    "insert-existing": ("table.insert", _insert_existing),
    "replace": ("table.replace", _replace),
    "replace-stale": ("table.replace", _replace_stale),
    "upsert": ("table.upsert", _upsert),
    "delete": ("table.delete", _delete),
    "delete-changed": ("table.delete", _delete_changed),
    "get": ("table.get", _get_and_query),
    "query": ("table.query", _get_and_query),
    "transaction": ("table.batch", _transaction),
    "transaction-conflict": ("table.batch", _transaction_conflict),
    "queue-put": ("queue.put", _put),
    "queue-receive": ("queue.receive", _receive_and_delete),
    "queue-delete": ("queue.delete", _receive_and_delete),
    "queue-update": ("queue.update", _release),
}


def _comparable(outcome: Any) -> Any:
    """An outcome without ETags (they differ between two runs of the same thing)."""
    if isinstance(outcome, Entity):
        return ("entity", outcome.partition_key, outcome.row_key, outcome.data)
    if isinstance(outcome, tuple | list):
        return type(outcome)(_comparable(o) for o in outcome)
    return outcome


async def _run(adapter: str, storage: str, scenario: Scenario, name: str) -> Any:
    Tables, Queues = ADAPTERS[adapter]
    tables, queues = Tables(storage, policy=POLICY), Queues(storage, policy=POLICY)
    try:
        await tables.ensure_tables([name])
        return _comparable(await scenario(tables, queues, name))
    finally:
        await tables.close()
        await queues.close()


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_on_each_operation_ends_as_without_faults(azurite, adapter, kind):
    async def go() -> None:
        async with FaultProxy(azurite.connection_string, Faults(delay=0.2)) as proxy:
            for scenario_name, (op, scenario) in SCENARIOS.items():
                expected = await _run(adapter, azurite.connection_string, scenario, fresh())
                injected_before = proxy.injected[(kind, op)]
                proxy.inject(kind, op)
                got = await _run(adapter, proxy.connection_string, scenario, fresh())
                assert proxy.injected[(kind, op)] == injected_before + 1, f"{scenario_name}: no {kind} injected"
                assert got == expected, f"{adapter} {scenario_name} with {kind}: {got!r} != {expected!r}"

    asyncio.run(go())


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_storage_that_stays_busy_fails_within_the_budget(azurite, adapter):
    async def go() -> None:
        Tables, _ = ADAPTERS[adapter]
        async with FaultProxy(azurite.connection_string, Faults(rate=1.0, kinds=("busy",))) as proxy:
            tables = Tables(proxy.connection_string, policy=RetryPolicy(budget=1.0, backoff=0.05, max_backoff=0.2))
            started = time.monotonic()
            try:
                with pytest.raises(StorageUnavailable) as raised:
                    await tables.get("Whatever", "p", "r")
            finally:
                await tables.close()
            assert time.monotonic() - started < 1.5
            assert raised.value.status == 503 and "503 ServerBusy" in raised.value.message
            assert proxy.injected[("busy", "table.get")] >= 3  # it did retry

    asyncio.run(go())


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_an_outage_refused_then_busy_fails_calls_within_budget_and_its_end_serves_again(azurite, adapter):
    """The fault campaign's storage outage (bench.soak --storage-outage): connections refused, then every answer
    503, then storage back on the same endpoints; an adapter's pooled connections recover by themselves."""

    async def go() -> None:
        Tables, Queues = ADAPTERS[adapter]
        async with FaultProxy(azurite.connection_string) as proxy:
            policy = RetryPolicy(budget=1.0, backoff=0.05, max_backoff=0.2, timeout=2, connect_timeout=1)
            tables, queues = (
                Tables(proxy.connection_string, policy=policy),
                Queues(proxy.connection_string, policy=policy),
            )
            name = fresh()
            try:
                await tables.ensure_tables([name])
                await tables.insert(name, Entity("p", "r", {"n": 1}))  # a connection in the pool
                for state, seen in (("refused", "connect"), ("busy", "503 ServerBusy")):
                    await proxy.outage(state)
                    with pytest.raises(StorageUnavailable) as raised:
                        await tables.get(name, "p", "r")
                    assert seen in raised.value.message.lower() if state == "refused" else seen in raised.value.message
                    with pytest.raises(StorageUnavailable):
                        await queues.approximate_count("whatever")
                await proxy.outage("well")
                assert (await tables.get(name, "p", "r")).data == {"n": 1}
                assert await queues.approximate_count("whatever") == 0
            finally:
                await tables.close()
                await queues.close()

    asyncio.run(go())


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_requests_carry_a_client_request_id_and_user_agent(azurite, adapter):
    async def go() -> None:
        Tables, Queues = ADAPTERS[adapter]
        async with FaultProxy(azurite.connection_string) as proxy:
            tables, queues = Tables(proxy.connection_string), Queues(proxy.connection_string)
            try:
                await tables.get("Whatever", "p", "r")
                await queues.approximate_count("whatever")
            finally:
                await tables.close()
                await queues.close()
            for op in ("table.get", "queue.count"):
                headers = proxy.last_headers[op]
                uuid.UUID(headers["x-ms-client-request-id"])
                assert f"tc-azure-queue/{__version__}" in headers["user-agent"], headers["user-agent"]

    asyncio.run(go())


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_the_scale_model_throttles_a_hot_partition_and_the_adapters_ride_it_out(azurite, adapter):
    """Azure's partition target at 1/200 (10 entities/s): 40 concurrent upserts to one partition are refused
    503 ServerBusy beyond it, and every one of them is written in the end (the adapters' retries)."""

    async def go() -> None:
        Tables, _ = ADAPTERS[adapter]
        limits = Limits(factor=200)
        async with FaultProxy(azurite.connection_string, limits=limits) as proxy:
            tables = Tables(proxy.connection_string, policy=POLICY)
            name = fresh()
            try:
                await tables.ensure_tables([name])
                await asyncio.gather(*(tables.upsert(name, Entity("hot", f"r{i}", {"n": i})) for i in range(40)))
                stored = await tables.query(name, "PartitionKey eq @pk", {"pk": "hot"}, limit=1000)
            finally:
                await tables.close()
            assert sorted(e.data["n"] for e in stored.entities) == list(range(40))
            assert limits.throttled[f"partition {name}/hot"] > 0 and limits.first_throttled() == "partition"

    asyncio.run(go())
