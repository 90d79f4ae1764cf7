"""The metrics an operator alerts on (shared/metrics.py), read from an in-memory OpenTelemetry reader after a
lifecycle, a cancel, a claim expiry found by the reconciler, a census of pending runs and API requests."""

from __future__ import annotations

from typing import Any

import httpx
from opentelemetry import metrics as otel
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from shared.api.framework import ApiApp
from shared.api.queue_v1 import api
from shared.auth.authenticator import Authenticator
from shared.auth.clients import ClientStore
from shared.domain.messages import CLAIM_QUEUE
from shared.storage.memory import MemoryQueues
from tests.answers import claim_work
from tests.clock import Clock
from tests.conftest import schema_defaults, slugid, task_definition
from tests.services import memory_service

READER = InMemoryMetricReader()
otel.set_meter_provider(MeterProvider(metric_readers=[READER]))  # the instruments' proxies bind to it


def points() -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Every metric by name: (attributes, value) of each point (a sum's value, a histogram's count)."""
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    found.setdefault(metric.name, []).append(
                        (dict(point.attributes or {}), value if value is not None else point.count)
                    )
    return found


def total(name: str, **attributes: Any) -> float:
    return sum(v for a, v in points().get(name, []) if all(a.get(k) == w for k, w in attributes.items()))


async def test_claims_resolutions_expiries_repairs_and_the_pending_census(clock: Clock) -> None:
    service = memory_service(clock=clock, reconcile_grace=30)
    tq = f"metrics/q{slugid()[:8].lower().replace('_', 'a').replace('-', 'b')}"
    before = {name: total(name) for name in ("queue.claims", "queue.claim_expiries", "queue.reconciler.repairs")}
    ids = []
    for _ in range(3):
        task_id, definition = slugid(), task_definition(taskQueueId=tq)
        await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
        ids.append(task_id)
    claimed = await claim_work(service, tq, "g", "w", 2)
    assert total("queue.claims", taskQueueId=tq) == 2
    first, second = (c["status"]["taskId"] for c in claimed)
    await service.lifecycle.resolve(first, 0, "completed", "completed")
    await service.lifecycle.resolve(first, 0, "completed", "completed")  # a repeat is not counted again
    assert total("queue.resolutions", state="completed", reason="completed") >= 1
    completed = total("queue.resolutions", state="completed", reason="completed")
    await service.lifecycle.resolve(first, 0, "completed", "completed")
    assert total("queue.resolutions", state="completed", reason="completed") == completed
    third = next(t for t in ids if t not in (first, second))
    cancelled = total("queue.resolutions", reason="canceled")
    await service.lifecycle.cancel_task(third)
    assert total("queue.resolutions", reason="canceled") == cancelled + 1
    # The second claim's check is lost: the reconciler expires it (a repair, and a claim expiry).
    assert isinstance(service.stores.queues, MemoryQueues)
    service.stores.queues.clear(CLAIM_QUEUE)
    clock.advance(service.settings.claim_timeout + 31)
    report = await service.reconciler.run()
    assert report.repairs["claim-expired"] == 1
    assert total("queue.claim_expiries") == before["queue.claim_expiries"] + 1
    assert total("queue.reconciler.repairs", reason="claim-expired") >= 1
    assert total("queue.resolutions", state="exception", reason="claim-expired") >= 1
    # Its retry is pending: the census the pass took counts it, with its age.
    assert total("queue.pending_tasks", taskQueueId=tq) == 1
    assert [a for a, _ in points()["queue.pending_oldest_age"] if a["taskQueueId"] == tq]


async def test_api_requests_are_counted_by_method_and_status() -> None:
    service = memory_service(clock=Clock())
    clients = ClientStore(service.stores.tables, token_secret=None, root_client_id="root", root_access_token="r" * 30)
    app = ApiApp([api], lambda: service, lambda: Authenticator(clients, ["queue:status:*"]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        ok = total("queue.api.requests", method="queue.ping", status=200)
        missing = total("queue.api.requests", method="queue.status", status=404)
        assert (await client.get("/api/queue/v1/ping")).status_code == 200
        assert (await client.get(f"/api/queue/v1/task/{slugid()}/status")).status_code == 404
        assert (await client.get("/api/queue/v1/nowhere")).status_code == 404
    assert total("queue.api.requests", method="queue.ping", status=200) == ok + 1
    assert total("queue.api.requests", method="queue.status", status=404) == missing + 1
    assert total("queue.api.requests", method="unknown", status=404) >= 1


async def test_event_dispatch_lag_is_recorded_per_exchange(clock: Clock) -> None:
    from tests.unit.helpers import RecordingPublisher, drain

    service = memory_service(clock=clock, event_bus="amqp")
    before = total("queue.events.dispatch_lag", exchange="task-defined")
    task_id, definition = slugid(), task_definition()
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    publisher = RecordingPublisher()
    assert "published" in await drain(service, publisher)
    assert total("queue.events.dispatch_lag", exchange="task-defined") == before + 1  # a histogram's count
