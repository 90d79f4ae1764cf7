"""Storage interfaces and their adapters (lean REST, Azure SDK, in-memory)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.connections import StorageConnection
    from shared.storage.base import QueueStore, TableStore
    from shared.storage.retry import RetryPolicy


def table_store(connection: StorageConnection, client: str = "rest", policy: RetryPolicy | None = None) -> TableStore:
    """The table adapter `QUEUE_STORAGE_CLIENT` names: `rest` (shared/storage/rest/) or `sdk`."""
    if client == "sdk":
        from shared.storage.azure import AzureTables

        return AzureTables(connection, policy)
    from shared.storage.rest import RestTables

    return RestTables(connection, policy)


def queue_store(
    connection: StorageConnection, client: str = "rest", *, traced: bool = True, policy: RetryPolicy | None = None
) -> QueueStore:
    """The queue adapter `QUEUE_STORAGE_CLIENT` names; `traced=False` leaves its calls out of telemetry."""
    if client == "sdk":
        from shared.storage.azure import AzureQueues

        return AzureQueues(connection, traced=traced, policy=policy)
    from shared.storage.rest import RestQueues

    return RestQueues(connection, traced=traced, policy=policy)
