"""Where the queue keeps its data: the storage accounts (one, or shards of them), how they are reached and how
long a call may take."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, Self

from pydantic import AliasChoices, BaseModel, Field, model_validator

from shared.connections import StorageConnection


class StorageSettings(BaseModel):
    storage: str | None = Field(
        default=None,
        description="Connection string of the data storage account (tables, queues, and artifact blobs unless "
        "`QUEUE_ARTIFACT_STORAGE` is set). The queue triggers name the same setting as their `connection`. "
        "Deployed, the identity-based form below replaces it.",
    )
    storage_account_name: str | None = Field(
        default=None,
        validation_alias=AliasChoices("QUEUE_STORAGE__accountName", "storage_account_name"),
        description="Identity-based connection (`QUEUE_STORAGE__accountName`): the data account's name, for "
        "its `https://<name>.<service>.core.windows.net` endpoints.",
    )
    storage_table_uri: str | None = Field(
        default=None,
        validation_alias=AliasChoices("QUEUE_STORAGE__tableServiceUri", "storage_table_uri"),
        description="Identity-based connection: the data account's table endpoint.",
    )
    storage_queue_uri: str | None = Field(
        default=None,
        validation_alias=AliasChoices("QUEUE_STORAGE__queueServiceUri", "storage_queue_uri"),
        description="Identity-based connection: the data account's queue endpoint (the queue triggers read it).",
    )
    storage_blob_uri: str | None = Field(
        default=None,
        validation_alias=AliasChoices("QUEUE_STORAGE__blobServiceUri", "storage_blob_uri"),
        description="Identity-based connection: the data account's blob endpoint (artifacts).",
    )
    storage_credential: str | None = Field(
        default=None,
        validation_alias=AliasChoices("QUEUE_STORAGE__credential", "storage_credential"),
        description="Identity-based connection: `managedidentity`.",
    )
    storage_client_id: str | None = Field(
        default=None,
        validation_alias=AliasChoices("QUEUE_STORAGE__clientId", "storage_client_id"),
        description="Identity-based connection: client id of the user-assigned managed identity (used for "
        "storage and Service Bus); unset: the system-assigned identity or DefaultAzureCredential.",
    )
    storage_account_key: str | None = Field(
        default=None,
        description="With an identity-based connection only, optional: an account key that signs "
        "the polling URLs of pollTaskUrls. Unset (Azure, shared keys off): they are user delegation SAS, signed "
        "with a key the identity asks of the queue service; a refused key makes pollTaskUrls answer 500 naming "
        "it (Azurite's queue service has none), claimWork is unaffected.",
    )
    storage_client: Literal["rest", "sdk"] = Field(
        default="rest",
        description="How tables and queues are called: `rest` (signed HTTP requests on one "
        "keep-alive session, `shared/storage/rest/`: several times less CPU per call) or `sdk` (the Azure "
        "SDKs, `shared/storage/azure/`). Blobs always go through the SDK.",
    )
    storage_shards: int = Field(
        default=1,
        ge=1,
        le=64,
        description="How many storage accounts hold the data (N). The first is "
        "`QUEUE_STORAGE`; the others are `QUEUE_STORAGE_1` .. `QUEUE_STORAGE_<N-1>`, each a connection string or "
        "its identity-based form (`QUEUE_STORAGE_1__accountName`, ...). A task's rows go to the account of its "
        "taskId's hash, a group's to its group's; set at deployment (changing it moves data: docs/deploy.md).",
    )
    check_shards: int = Field(
        default=1,
        ge=1,
        le=64,
        description="How many queues each of `claim-expiry`, `task-deadlines`, "
        "`task-resolved` and `event-dispatch` is split into (K): `<queue>`, `<queue>-s1` .. `<queue>-s<K-1>`, "
        "spread over the accounts, each with its trigger; a task's messages go to the shard of its taskId's "
        "hash. It may grow on a running deployment, not shrink.",
    )
    pending_shards: int = Field(
        default=1,
        ge=1,
        le=16,
        description="How many queues each task queue's pending queue of each priority "
        "is split into (S), and how many partitions its `TaskQueueRuns` index, each second of `TaskDeadlines` "
        "and each hour of the expiry tables are salted into: claimWork and pollTaskUrls read all of them, highest "
        "priority first. It may grow on a running deployment, not shrink.",
    )
    storage_retry_budget: float = Field(
        default=20.0,
        gt=0,
        description="Seconds a storage call may take, retries included, before it fails "
        "(an API request then answers 503 with Retry-After; docs/architecture.md#storage-calls).",
    )
    storage_retry_backoff: float = Field(
        default=0.2,
        gt=0,
        description="Seconds before the second retry of a storage call; doubled for each retry after, with jitter.",
    )
    storage_retry_max_backoff: float = Field(
        default=4.0, gt=0, description="Longest wait between two attempts of a storage call."
    )
    storage_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds one attempt of a storage call may take, from connecting to the last byte of its answer.",
    )
    storage_connect_timeout: float = Field(default=3.0, gt=0, description="Seconds to connect to storage.")
    artifact_storage: str | None = Field(
        default=None,
        description="Connection string of the storage account holding artifact blobs (with an "
        "AccountKey: it signs the upload and download URLs); default: `QUEUE_STORAGE`.",
    )

    @model_validator(mode="after")
    def _storage_configured(self) -> Self:
        connection = self.storage_connection  # raises if neither form is complete
        if connection.blob_uri is None and connection.uses_identity and not self.artifact_storage:
            raise ValueError(
                "QUEUE_STORAGE__blobServiceUri (or __accountName) is required for artifacts, unless "
                "QUEUE_ARTIFACT_STORAGE names another account"
            )
        return self

    @property
    def storage_connection(self) -> StorageConnection:
        """The data account: `QUEUE_STORAGE` (a connection string), or its identity-based form."""
        if self.storage:
            return StorageConnection(connection_string=self.storage)
        environ = {
            f"QUEUE_STORAGE__{key}": value
            for key, value in (
                ("accountName", self.storage_account_name),
                ("tableServiceUri", self.storage_table_uri),
                ("queueServiceUri", self.storage_queue_uri),
                ("blobServiceUri", self.storage_blob_uri),
                ("credential", self.storage_credential),
                ("clientId", self.storage_client_id),
            )
            if value
        }
        connection = StorageConnection.from_environ("QUEUE_STORAGE", environ, account_key=self.storage_account_key)
        if connection is None or connection.table_uri is None or connection.queue_uri is None:
            raise ValueError(
                "QUEUE_STORAGE is required: a connection string, or the identity-based form "
                "(QUEUE_STORAGE__accountName, or QUEUE_STORAGE__tableServiceUri and __queueServiceUri)"
            )
        return connection

    def storage_connections(self, environ: Mapping[str, str] | None = None) -> list[StorageConnection]:
        """The data accounts, `QUEUE_STORAGE_SHARDS` of them: `QUEUE_STORAGE`, then `QUEUE_STORAGE_1` .. (read
        from the environment, as the Functions host reads the queue triggers' connections)."""
        environ = os.environ if environ is None else environ
        connections = [self.storage_connection]
        for shard in range(1, self.storage_shards):
            name = f"QUEUE_STORAGE_{shard}"
            connection = StorageConnection.from_environ(name, environ, account_key=environ.get(f"{name}_ACCOUNT_KEY"))
            if connection is None:
                raise ValueError(
                    f"QUEUE_STORAGE_SHARDS is {self.storage_shards}, but {name} is not set (a "
                    "connection string, or its identity-based form)"
                )
            connections.append(connection)
        return connections

    @property
    def artifact_connection(self) -> StorageConnection:
        if self.artifact_storage:
            return StorageConnection(connection_string=self.artifact_storage)
        return self.storage_connection
