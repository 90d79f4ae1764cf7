"""Task rows a process remembers (shared.domain.tasks.KnownTasks): they save reads, and never decide alone.

Two services on the same tables and queues stand for two processes: one changes a task behind the other's back,
and the other's next change must act on the stored row, not on the one it remembers."""

from __future__ import annotations

import pytest

from shared import errors
from shared.domain.tasks import TASKS_TABLE
from shared.operations.claims import Claim, ClaimRefusal
from shared.runtime import Queue
from shared.storage.memory import MemoryTables
from tests.conftest import schema_defaults, slugid, task_definition
from tests.services import memory_service


class CountingTables(MemoryTables):
    def __init__(self) -> None:
        super().__init__()
        self.task_reads = 0

    async def get(self, table, partition_key, row_key):
        if table == TASKS_TABLE:
            self.task_reads += 1
        return await super().get(table, partition_key, row_key)


@pytest.fixture
def tables():
    return CountingTables()


@pytest.fixture
def one(tables):
    return memory_service(tables=tables)


@pytest.fixture
def other(one, tables):
    """Another process: the same storage, nothing remembered in common."""
    return memory_service(tables=tables, queues=one.stores.queues)


async def create(service: Queue) -> str:
    task_id = slugid()
    definition = task_definition()
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id


async def test_a_lifecycle_reads_no_task_row_in_the_process_that_made_it(one, tables):
    task_id = await create(one)
    claimed = await one.claims.claim(task_id, 0, "g", "w")
    assert isinstance(claimed, Claim)
    await one.lifecycle.resolve(task_id, 0, "completed", "completed")
    assert tables.task_reads == 0  # each step started from the row the previous one wrote
    assert (await one.queries.task(task_id)).status()["state"] == "completed"  # an API read still reads storage
    assert tables.task_reads == 1


async def test_a_claim_from_a_row_another_process_changed_is_refused(one, other):
    task_id = await create(one)
    await other.lifecycle.cancel_task(task_id)
    # remembered: pending; stored: exception
    assert await one.claims.claim(task_id, 0, "g", "w") is ClaimRefusal.CONFLICT
    assert (await other.queries.task(task_id)).status()["runs"][0]["reasonResolved"] == "canceled"


async def test_a_refusal_on_a_remembered_row_is_decided_again_on_the_stored_one(one, other):
    task_id = await create(one)
    assert isinstance(await one.claims.claim(task_id, 0, "g", "w"), Claim)
    await other.lifecycle.resolve(task_id, 0, "exception", "worker-shutdown")  # retried: run 1 pending
    # `one` remembers a single run; the stored task has two, and run 1 is there to claim.
    claimed = await one.claims.claim(task_id, 1, "g", "w2")
    assert isinstance(claimed, Claim) and claimed.run.worker_id == "w2"
    assert (await other.queries.task(task_id)).status()["runs"][1]["state"] == "running"


async def test_a_change_from_a_stale_row_is_not_written(one, other):
    task_id = await create(one)
    assert isinstance(await one.claims.claim(task_id, 0, "g", "w"), Claim)
    await other.lifecycle.cancel_task(task_id)
    with pytest.raises(errors.RequestConflict):
        await one.lifecycle.resolve(task_id, 0, "completed", "completed")  # remembered: running; stored: canceled
    status = (await other.queries.task(task_id)).status()
    assert [r["reasonResolved"] for r in status["runs"]] == ["canceled"]


async def test_a_refusal_that_stands_is_not_made_twice(one, tables):
    task_id = await create(one)
    await one.lifecycle.cancel_task(task_id)
    reads = tables.task_reads
    assert await one.claims.claim(task_id, 0, "g", "w") is ClaimRefusal.CONFLICT
    assert tables.task_reads == reads + 1  # one read to confirm the remembered row, then the answer
