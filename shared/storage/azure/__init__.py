"""Table, queue and blob stores over the Azure SDKs' async clients (Azure Storage, or Azurite locally)."""

from __future__ import annotations

from shared.storage.azure.blobs import AzureBlobs
from shared.storage.azure.common import SigningKeyMissing
from shared.storage.azure.queues import AzureQueues, QueueSigner
from shared.storage.azure.tables import AzureTables

__all__ = ["AzureBlobs", "AzureQueues", "AzureTables", "QueueSigner", "SigningKeyMissing"]
