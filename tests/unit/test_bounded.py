"""Every cache, memo and per-key table of a process is bounded in entries and bytes (shared/bounded.py), proven
here with many distinct keys through the code that fills it (the auth caches: tests/unit/test_clients.py).
docs/security.md lists each bound."""

from __future__ import annotations

import datetime as dt

import pytest
from starlette.requests import Request

from shared import metrics, timeutil
from shared.api import inspector
from shared.bounded import ENTRY_OVERHEAD, Bounded, text_weight
from shared.connections import StorageConnection
from shared.domain.groups import TaskGroup
from shared.domain.messages import Shards
from shared.domain.tasks import KnownTasks
from shared.operations.writes import group_leaving
from shared.operations.writes import group_store as groups_mod
from shared.operations.writes import stores as stores_mod
from shared.operations.writes.stores import EmptyPendingQueues
from shared.outbox import fallbacks as fallbacks_mod
from shared.outbox import memory as memory_mod
from shared.storage.azure import common
from shared.storage.base import Entity
from shared.storage.memory import MemoryQueues, MemoryTables
from shared.stores import deadlines as deadlines_mod
from shared.stores import workers as workers_mod
from shared.stores.deadlines import DeadlineIndex
from shared.stores.expiry import ExpiryIndex
from shared.stores.parking import CheckQueues
from tests.answers import claim_work
from tests.clock import Clock
from tests.conftest import schema_defaults, slugid, task_definition
from tests.services import memory_service
from tests.unit.helpers import Gated, process


def test_bounded_keeps_the_most_recent_within_entries_and_bytes():
    kept: Bounded[int, str] = Bounded(
        100, max_bytes=100 * (ENTRY_OVERHEAD + 60), weigh=lambda key, value: text_weight(value)
    )
    for i in range(10_000):
        kept.put(i, "x" * (i % 20))
        kept.get(0)  # used: stays
    assert len(kept) <= 100 and kept.bytes <= kept.max_bytes
    assert 0 in kept and 9_999 in kept and 5_000 not in kept
    kept.put(-1, "y" * 1_000_000)  # alone heavier than the bound: not kept
    assert -1 not in kept and kept.bytes == sum(ENTRY_OVERHEAD + text_weight(v) for _, v in kept.items())


def test_known_task_rows_are_bounded_in_bytes_whatever_their_size():
    known = KnownTasks(10_000, max_bytes=5_000_000)
    for i in range(2_000):  # 2,000 rows of 50 KB: 100 MB if kept
        known.put(Entity(f"task{i}", "task", {"definition_0": "p" * 50_000}, etag=f"e{i}"))
    assert known._rows.bytes <= 5_000_000 and len(known._rows) < 100
    assert "task1999" in known._rows and "task0" not in known._rows


def test_pending_queue_maps_are_bounded(monkeypatch):
    empty = EmptyPendingQueues(ttl=1.0)
    for name in ("_until", "_hinted", "_hidden", "_filled"):
        getattr(empty, name).max_entries = 500
    for i in range(20_000):
        queue = f"pending-{i}"
        empty.received(queue, 0)
        empty.lost(queue, 60)
        empty.filled(queue)
        empty.received(queue, 1)
    for name in ("_until", "_hinted", "_hidden", "_filled"):
        assert len(getattr(empty, name)) <= 500, name
    assert stores_mod.FILLED_REMEMBERED == 10_000


async def test_deadline_buckets_announced_are_bounded(monkeypatch):
    monkeypatch.setattr(deadlines_mod, "ANNOUNCED_KEPT", 300)
    tables = MemoryTables()
    shards = Shards(checks=4, pending=4)
    index = DeadlineIndex(tables, CheckQueues(MemoryQueues(), shards, 60), shards, 0, ExpiryIndex(tables))
    now = timeutil.now()
    for i in range(3_000):  # a bucket per second: 3,000 distinct deadlines
        await index.add(slugid(), now + dt.timedelta(hours=1, seconds=i), now + dt.timedelta(days=1))
    assert len(index._announced) <= 300


async def test_worker_maps_are_bounded_with_many_distinct_workers(monkeypatch):
    monkeypatch.setattr(workers_mod, "WORKERS_REMEMBERED", 200)
    service = memory_service(claim_work_wait=0)
    tq = "prov/bounds"
    for i in range(1_500):
        await claim_work(service, tq, "g", f"worker-{i}", 1)
        await service.stores.workers.quarantined_until(tq, "g", f"worker-{i}")
    info = service.stores.workers
    for name in ("_active_written", "_buffered", "_worker_written", "_quarantine"):
        assert len(getattr(info, name)) <= 200, name


async def test_event_rows_and_cursors_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(memory_mod, "REMEMBERED_EVENTS", 100)
    monkeypatch.setattr(memory_mod, "REMEMBERED_CURSORS", 100)
    monkeypatch.setattr(memory_mod, "REMEMBERED_EVENTS_BYTES", 400_000)
    service = memory_service()
    for _ in range(400):
        definition = task_definition(routes=[f"route.{i}." + "r" * 200 for i in range(20)])
        await service.creation.create_task(slugid(), dict(definition, **schema_defaults(definition)))
    log = service.stores.events
    assert len(log.memory.events) <= 100 and log.memory.events.bytes <= 400_000
    assert len(log.memory.cursors) <= 100


async def test_group_rows_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(groups_mod, "KNOWN_GROUPS", 100)
    service = memory_service()
    for _ in range(500):
        definition = task_definition()
        await service.creation.create_task(slugid(), dict(definition, **schema_defaults(definition)))  # each its group
    assert len(service.stores.groups._cache) <= 100
    assert len(service.stores.groups.seen.groups) <= group_leaving.SEEN_GROUPS
    assert isinstance(next(iter(service.stores.groups._cache.values()))[1], TaskGroup)


def request(path: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""})


def test_the_inspector_answers_from_its_files_only_and_remembers_no_name():
    files = dict(inspector._files())
    serve = inspector.Inspector()
    for i in range(3_000):
        assert serve(request(f"/inspector/x/{i}" + "B" * 2_000)) is None
        assert serve(request(f"/inspector/{i}" + "C" * 300 + ".js")) is None  # over 255: no OSError, no 500
    assert inspector._files() == files
    assert serve(request("/inspector/inspector.js")).status_code == 200


def test_taskclusters_ui_addresses_answer_one_page_that_holds_nothing_of_the_address():
    serve = inspector.Inspector()
    pages = set()
    for i in range(3_000):
        for path in (f"/tasks/{i}<script>" + "D" * 2_000, f"/provisioners/p{i}/worker-types/t", f"/worker-manager/{i}"):
            answer = serve(request(path))
            assert answer is not None and answer.status_code == 200 and b"<script>" not in answer.body
            pages.add(bytes(answer.body))
    assert len(pages) == 1 and b"/inspector/address.js" in pages.pop()  # the path is read by the browser only
    assert serve(request("/taskster/x")) is None and serve(request("/tasksgroups")) is None


def test_the_pending_gauges_report_at_most_a_thousand_task_queues():
    census = metrics._Census()
    census.record({f"p/q{i}": (i, None) for i in range(5_000)})
    census.record({f"p/r{i}": (i, None) for i in range(5_000)})
    assert len(census._pending) <= 2 * metrics.CENSUS_QUEUES
    assert ("p/r4999" in census._pending) and ("p/r0" not in census._pending)


async def test_sdk_clients_per_queue_are_bounded(monkeypatch):
    monkeypatch.setattr(common, "CLIENTS_KEPT", 50)
    from azure.storage.queue.aio import QueueServiceClient

    from shared.storage.retry import RetryPolicy

    connection = StorageConnection(
        connection_string="DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        "AccountKey=" + "a" * 88 + ";QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;"
    )
    clients = common.Clients(connection, "queue", QueueServiceClient, "get_queue_client", RetryPolicy())
    for i in range(1_000):
        clients.get(f"pending-{i}")
    assert len(clients._clients) <= 50
    await clients.close()


@pytest.mark.parametrize("size", [1, 10_000])
def test_text_weight_counts_nested_strings(size):
    assert text_weight({"a": ["x" * size, ("y",)]}) >= size + 2


async def test_fallbacks_awaiting_their_events_publishing_are_bounded(monkeypatch):
    """Each task pending at once registers its hint as its events' fallback until they are published (here they
    never are while the broker hangs): at most REMEMBERED_REQUESTS streams are remembered."""
    monkeypatch.setattr(fallbacks_mod, "REMEMBERED_REQUESTS", 100)
    publisher = Gated()
    service = process(Clock(), MemoryTables(), MemoryQueues(), publisher)
    for _ in range(400):
        definition = task_definition()
        await service.creation.create_task(slugid(), dict(definition, **schema_defaults(definition)))
    assert len(service.stores.events.fallbacks) == 100
    publisher.gate.set()
    await service.stores.settled()
    assert len(service.stores.events.fallbacks) == 0
