"""Worker information on the in-memory connector: write throttling, buffered recent tasks, the run index."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shared.api import answers
from shared.domain.queue_runs import TASK_QUEUE_RUNS_TABLE
from shared.domain.workers import WORKER_INFO_TABLE
from shared.storage.memory import MemoryTables
from shared.stores import workers as workers_module
from tests.answers import claim_work
from tests.conftest import schema_defaults, slugid, task_definition, task_queue_id


class CountingTables(MemoryTables):
    """Counts the writes per table."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, int] = {}

    def _count(self, table: str) -> None:
        self.writes[table] = self.writes.get(table, 0) + 1

    async def insert(self, table, entity):
        self._count(table)
        return await super().insert(table, entity)

    async def replace(self, table, entity):
        self._count(table)
        return await super().replace(table, entity)

    async def upsert(self, table, entity):
        self._count(table)
        return await super().upsert(table, entity)


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def monotonic(monkeypatch):
    fake = FakeMonotonic()
    # The module's own `time` only: the event loop's clock (time.monotonic) must keep running (a resolution's
    # index delete lingers on it).
    monkeypatch.setattr(workers_module, "time", SimpleNamespace(monotonic=fake))
    return fake


pytestmark = pytest.mark.service(worker_info_interval=60)


@pytest.fixture
def tables() -> CountingTables:
    return CountingTables()


async def create(service, tq):
    task_id = slugid()
    definition = task_definition(taskQueueId=tq)
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id


async def test_a_busy_worker_writes_its_entry_once_a_minute(service, monotonic):
    tq = task_queue_id()
    ids = [await create(service, tq) for _ in range(10)]
    await service.stores.background.settled()
    assert service.stores.tables.writes[WORKER_INFO_TABLE] == 1  # the task queue seen by the creations: once
    claimed = []
    for _ in range(10):
        claimed += [c["status"]["taskId"] for c in await claim_work(service, tq, "g", "w", 1)]
        monotonic.now += 1
    assert sorted(claimed) == sorted(ids)
    # Ten claimWork calls: the provisioner, the task queue and the worker written once each (the first call).
    assert service.stores.tables.writes[WORKER_INFO_TABLE] == 1 + 3
    worker = answers.worker(await service.stores.workers.get_worker(tq, "g", "w"))
    assert worker["recentTasks"] == []  # buffered
    monotonic.now += 60
    assert await claim_work(service, tq, "g", "w", 1) == []
    worker = answers.worker(await service.stores.workers.get_worker(tq, "g", "w"))
    assert [t["taskId"] for t in worker["recentTasks"]] == claimed
    assert service.stores.tables.writes[WORKER_INFO_TABLE] == 1 + 4


async def test_task_queues_tasks_are_created_for_are_listed_polled_or_not(service, monotonic):
    """listSeenTaskQueues: a row per task queue written by the creations, once per process every ACTIVE_INTERVAL
    (not per task); listTaskQueues, as in Taskcluster, knows only the queues workers asked for work from."""
    first, second = task_queue_id(), task_queue_id()
    for tq in (first, second, first, first, second):
        await create(service, tq)
    await service.stores.background.settled()
    assert service.stores.tables.writes[WORKER_INFO_TABLE] == 2
    seen, _ = await service.stores.workers.list_seen_task_queues(limit=10, continuation=None)
    assert sorted(q for q, _ in seen) == sorted([first, second])
    assert (await service.stores.workers.list_task_queues(limit=10, continuation=None))[0] == []
    monotonic.now += workers_module.ACTIVE_INTERVAL.total_seconds() + 1
    await create(service, first)
    await service.stores.background.settled()
    assert service.stores.tables.writes[WORKER_INFO_TABLE] == 3  # written again, hours later


async def test_recent_tasks_keep_the_last_twenty(service, monotonic):
    tq = task_queue_id()
    for i in range(25):
        service.stores.workers.claimed(tq, "g", "w", f"task-{i}", 0)
    await service.stores.workers.active(tq, "g", "w")
    worker = answers.worker(await service.stores.workers.get_worker(tq, "g", "w"))
    assert [t["taskId"] for t in worker["recentTasks"]] == [f"task-{i}" for i in range(5, 25)]


async def test_the_run_index_follows_a_task_through_its_runs(service, monotonic):
    tq = task_queue_id()
    task_id = await create(service, tq)

    async def row():
        entity = await service.stores.tables.get(TASK_QUEUE_RUNS_TABLE, tq.replace("/", "%2F"), task_id)
        return (entity.data["state"], entity.data["runId"]) if entity else None

    assert await row() == ("pending", 0)
    await claim_work(service, tq, "g", "w", 1)
    assert await row() == ("running", 0)
    await service.lifecycle.resolve(task_id, 0, "exception", "worker-shutdown")  # retried: a new pending run
    assert await row() == ("pending", 1)
    await claim_work(service, tq, "g", "w", 1)
    await service.lifecycle.resolve(task_id, 1, "completed", "completed")
    await service.stores.settled()  # the row's deletion follows the resolution's write, unawaited
    assert await row() is None
