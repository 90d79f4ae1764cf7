"""Index rows written a partition at a time (shared.storage.grouped.GroupedUpserts)."""

from __future__ import annotations

import asyncio

import pytest

from shared.storage.base import Entity
from shared.storage.grouped import GroupedUpserts
from shared.storage.memory import MemoryTables
from tests.turns import others_run


class SlowTables(MemoryTables):
    """Each write takes a moment (as over a network) and is recorded; `failing` rows make their batch fail."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[str]]] = []
        self.failing: set[str] = set()

    async def upsert(self, table, entity):
        self.calls.append(("upsert", [entity.row_key]))
        await asyncio.sleep(0.01)
        return await super().upsert(table, entity)

    async def transact(self, table, ops):
        self.calls.append(("transact", [op.entity.row_key for op in ops]))
        await asyncio.sleep(0.01)
        if any(op.entity.row_key in self.failing for op in ops):
            raise ConnectionError("storage unreachable")
        return await super().transact(table, ops)


@pytest.fixture
def tables():
    tables = SlowTables()
    asyncio.run(tables.ensure_tables(["Index"]))
    return tables


async def test_rows_that_arrive_while_one_is_written_go_together(tables):
    grouped = GroupedUpserts(tables)
    first = asyncio.create_task(grouped.upsert("Index", Entity("q", "r0", {"n": 0})))
    await others_run()  # the first is on its way alone
    await asyncio.gather(first, *(grouped.upsert("Index", Entity("q", f"r{i}", {"n": i})) for i in range(1, 21)))
    assert tables.calls == [("upsert", ["r0"]), ("transact", [f"r{i}" for i in range(1, 21)])]
    assert [(await tables.get("Index", "q", f"r{i}")).data["n"] for i in range(21)] == list(range(21))


async def test_partitions_are_written_apart_and_a_row_never_twice_in_one_transaction(tables):
    grouped = GroupedUpserts(tables)
    await asyncio.gather(
        grouped.upsert("Index", Entity("a", "x", {"n": 1})),
        grouped.upsert("Index", Entity("b", "x", {"n": 2})),
        grouped.upsert("Index", Entity("a", "y", {"n": 3})),
        grouped.upsert("Index", Entity("a", "x", {"n": 4})),
    )  # after n=1, in a later batch
    assert (await tables.get("Index", "a", "x")).data["n"] == 4  # the last one called wins
    assert (await tables.get("Index", "b", "x")).data["n"] == 2
    for _, rows in tables.calls:
        assert len(rows) == len(set(rows))


async def test_a_failed_batch_fails_its_callers_and_the_next_batch_is_written(tables):
    grouped = GroupedUpserts(tables)
    tables.failing = {"bad"}
    first = asyncio.create_task(grouped.upsert("Index", Entity("q", "r0", {})))
    await others_run()
    doomed = [asyncio.create_task(grouped.upsert("Index", Entity("q", k, {}))) for k in ("r1", "bad")]
    await first
    results = await asyncio.gather(*doomed, return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    await grouped.upsert("Index", Entity("q", "r2", {}))  # the writer carries on
    assert await tables.get("Index", "q", "r2") is not None
    assert await tables.get("Index", "q", "r1") is None


async def test_a_lingering_delete_goes_with_the_next_row_of_its_partition(tables):
    grouped = GroupedUpserts(tables)
    await tables.upsert("Index", Entity("q", "done", {}))
    tables.calls.clear()
    loop = asyncio.get_running_loop()
    tidy = asyncio.create_task(grouped.delete("Index", "q", "done", linger=5))
    await others_run()
    assert tables.calls == []  # not written alone: it waits for company
    started = loop.time()
    await grouped.upsert("Index", Entity("q", "new", {}))  # a request's row: written at once, the delete along
    assert loop.time() - started < 1
    await tidy
    assert tables.calls == [("transact", ["done", "new"])]
    assert await tables.get("Index", "q", "done") is None


async def test_a_lingering_delete_alone_is_written_once_its_time_is_up(tables):
    grouped = GroupedUpserts(tables)
    await tables.upsert("Index", Entity("q", "done", {}))
    loop = asyncio.get_running_loop()
    started = loop.time()
    await grouped.delete("Index", "q", "done", linger=0.05)
    assert loop.time() - started >= 0.05
    assert await tables.get("Index", "q", "done") is None


async def test_a_flush_writes_the_lingering_rows_now(tables):
    grouped = GroupedUpserts(tables)
    await tables.upsert("Index", Entity("q", "done", {}))
    loop = asyncio.get_running_loop()
    tidy = asyncio.create_task(grouped.delete("Index", "q", "done", linger=5))
    await others_run()
    started = loop.time()
    await grouped.flush("Index", "q")  # a count must see the delete
    assert loop.time() - started < 1
    assert await tables.get("Index", "q", "done") is None
    await tidy
    await grouped.flush("Index", "other")  # nothing there: returns at once
