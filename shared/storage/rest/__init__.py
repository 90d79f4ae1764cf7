"""Table and queue stores over the storage REST API directly (aiohttp, one keep-alive session), without the SDK.

Why: on the 2-core machines this runs on, the SDK's pipeline costs about 2 ms of CPU per call (policies,
tracing decorators, and for table transactions the `email` package building and parsing multipart bodies),
against about 0.3 ms for a signed HTTP request (DESIGN.md; docs/performance.md has the lifecycle figures). The
semantics are those of `shared/storage/azure/`, which stays as the reference implementation
(`QUEUE_STORAGE_CLIENT=sdk`); the integration tests run both against Azurite.

Authentication: Shared Key (SharedKeyLite for tables, SharedKey for queues) with a connection string's account
key, or a bearer token from the managed identity (`shared/connections.py`).
"""

from __future__ import annotations

from shared.storage.rest.http import StorageError
from shared.storage.rest.queues import RestQueues
from shared.storage.rest.tables import RestTables

__all__ = ["RestQueues", "RestTables", "StorageError"]
