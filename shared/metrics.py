"""The queue's metrics, through OpenTelemetry: what an operator alerts on (docs/observability.md).

The instruments come from the global meter provider: Application Insights' when telemetry is configured
(shared/telemetry.py), the console's when `OTEL_METRICS_EXPORTER=console`, an in-memory reader's in tests; with
none configured they cost next to nothing. Names and attributes are fixed here, in one place.

Pending tasks per task queue (and the age of the oldest) are observed from the last census the reconciler took
(each pass counts the TaskQueueRuns index), so they are as fresh as QUEUE_RECONCILE_SCHEDULE makes them.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

_meter = metrics.get_meter("queue")

API_REQUESTS = _meter.create_counter(
    "queue.api.requests", description="API requests answered, by method (the route's name) and status code"
)
STORAGE_ROUND_TRIPS = _meter.create_histogram(
    "queue.api.storage_round_trips",
    description="storage calls an API request waited for one after another (its "
    "critical path, which storage latency multiplies), by method",
)
CLAIMS = _meter.create_counter("queue.claims", description="runs claimed, by task queue")
RESOLUTIONS = _meter.create_counter(
    "queue.resolutions", description="runs resolved, by state and reasonResolved (reported, cancelled, expired)"
)
CLAIM_EXPIRIES = _meter.create_counter("queue.claim_expiries", description="claims that expired (takenUntil passed)")
DEADLINE_EXPIRIES = _meter.create_counter(
    "queue.deadline_expiries", description="tasks resolved exception/deadline-exceeded by their deadline"
)
REPAIRS = _meter.create_counter("queue.reconciler.repairs", description="reconciler repairs, by reason")
POISON_MESSAGES = _meter.create_counter(
    "queue.poison_messages", description="messages found in a poison queue, by queue"
)
DISPATCH_LAG = _meter.create_histogram(
    "queue.events.dispatch_lag", unit="s", description="seconds from an event's change to its publication"
)


CENSUS_QUEUES = 1_000  # task queues the pending gauges report, at most (those with the most pending runs)


class _Census:
    """The latest count of pending runs per task queue, and when the oldest was scheduled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, dt.datetime | None]] = {}

    def record(self, pending: dict[str, tuple[int, dt.datetime | None]]) -> None:
        if len(pending) > CENSUS_QUEUES:  # the busiest: a series per task queue, and task queues are many
            pending = dict(sorted(pending.items(), key=lambda item: -item[1][0])[:CENSUS_QUEUES])
        with self._lock:
            # Queues that emptied since the last census report 0 once, then drop out.
            self._pending = {**{q: (0, None) for q, (n, _) in self._pending.items() if n}, **pending}

    def counts(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            return [Observation(n, {"taskQueueId": q}) for q, (n, _) in self._pending.items()]

    def oldest(self, _: CallbackOptions) -> Iterable[Observation]:
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            return [
                Observation(max(0.0, (now - since).total_seconds()), {"taskQueueId": q})
                for q, (_, since) in self._pending.items()
                if since is not None
            ]


CENSUS = _Census()
_meter.create_observable_gauge(
    "queue.pending_tasks", [CENSUS.counts], description="pending runs per task queue, at the reconciler's last pass"
)
_meter.create_observable_gauge(
    "queue.pending_oldest_age",
    [CENSUS.oldest],
    unit="s",
    description="age of the oldest pending run per task queue, at the last pass",
)


def resolved(state: str, reason: str) -> None:
    RESOLUTIONS.add(1, {"state": state, "reason": reason})
