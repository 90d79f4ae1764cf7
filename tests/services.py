"""The queue as the tests build it: on the memory connector (the unit tier) or on Azurite through the REST
adapters (the integration tier), with the tier's settings, each overridable. A test that needs another store
passes its own (a counting or recording subclass), or a second process on the same storage."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from shared.runtime import Queue, build_queue
from shared.settings import load_settings
from shared.storage.base import BlobStore, QueueStore, TableStore
from shared.storage.memory import MemoryQueues, MemoryTables
from shared.storage.rest import RestQueues, RestTables
from tests.conftest import schema_defaults, slugid, task_definition

ROOT_ACCESS_TOKEN = "x" * 30


def memory_service(
    *,
    tables: TableStore | None = None,
    queues: QueueStore | None = None,
    blobs: BlobStore | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    ticks: Callable[[], float] | None = None,
    **settings: Any,
) -> Queue:
    """A service on the memory connector with the unit tier's settings: short claims (parked), no deadline delay, no
    claimWork wait, resolutions left to their messages, publication marks written every 10 ms (each overridable);
    no blob store unless given."""
    values: dict[str, Any] = {
        "storage": "memory",
        "root_access_token": ROOT_ACCESS_TOKEN,
        "claim_timeout": 60,
        "park_lead": 30,  # the claims' checks parked, as production's 20-minute ones are
        "deadline_delay": 0,
        "hint_grace": 60,
        "claim_work_wait": 0,
        "resolution_grace": 0,
        "event_mark_interval": 0.01,  # storage answers in microseconds here: the marks need not wait 0.2 s
        **settings,
    }
    return build_queue(
        load_settings(**values),
        tables or MemoryTables(),
        queues or MemoryQueues(),
        blobs,
        **({"clock": clock} if clock is not None else {}),
        **({"ticks": ticks} if ticks is not None else {}),
    )


def azurite_service(
    connection: str,
    *,
    tables: TableStore | None = None,
    queues: QueueStore | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    **settings: Any,
) -> Queue:
    """A service on Azurite (`connection`) through the REST adapters, as the host runs it, with the integration
    tier's settings: no claimWork wait (each overridable)."""
    values: dict[str, Any] = {
        "storage": connection,
        "root_access_token": ROOT_ACCESS_TOKEN,
        "claim_work_wait": 0,
        **settings,
    }
    return build_queue(
        load_settings(**values),
        tables or RestTables(connection),
        queues or RestQueues(connection),
        **({"clock": clock} if clock is not None else {}),
    )


async def create_task(service: Queue, **overrides: Any) -> str:
    """A task created straight through the operations (as the API would, with the schema's defaults): its id."""
    task_id = slugid()
    definition = task_definition(**overrides)
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id
