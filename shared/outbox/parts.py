"""What the outbox's roles share: the stores, the clock, the lease, and this process's memory of its streams."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from shared import timeutil
from shared.outbox.fallbacks import Fallbacks
from shared.outbox.inflight import Background, InFlight
from shared.outbox.locks import StreamLocks
from shared.outbox.marks import PublicationMarks
from shared.outbox.memory import Remembered
from shared.outbox.outage import BusMarks
from shared.storage.base import QueueStore, TableStore


@dataclass
class Parts:
    tables: TableStore
    queues: QueueStore
    clock: Callable[[], dt.datetime]
    lease_seconds: float  # a dispatcher's or a writer's lease on a stream's cursor
    memory: Remembered  # events and cursors this process wrote
    locks: StreamLocks  # one dispatch or publishing of a stream at a time here
    marks: PublicationMarks  # what this process's publishing certifies
    in_flight: InFlight  # changes announced here and being written (their writers register)
    background: Background  # where the writer's publishing runs
    fallbacks: Fallbacks  # the messages that stand in for this process's publishing
    bus: BusMarks  # what the processes saw of the bus lately (outage.py)

    def lease_until(self, now: dt.datetime) -> str:
        return timeutil.iso(now + dt.timedelta(seconds=self.lease_seconds))
