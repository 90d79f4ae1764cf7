"""Settings of the queue, read from the environment (Azure app settings, or `local.settings.json` locally).

Every setting is an environment variable named `QUEUE_<FIELD>` in upper case; durations are seconds.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.connections import StorageConnection
from shared.errors import SettingsError
from shared.scopes import parse_scopes

ENV_PREFIX = "QUEUE_"
# What anyone may do without credentials, by default: read tasks, statuses and public artifacts (the reads
# that were public in the Azure-era Taskcluster).
DEFAULT_ANONYMOUS_SCOPES = (
    "queue:get-task:*",
    "queue:status:*",
    "queue:list-task-group:*",
    "queue:list-dependent-tasks:*",
    "queue:get-artifact:public/*",
    "queue:list-artifacts:*",
    "index:find-task:*",
    "index:list-namespaces:*",
    "index:list-tasks:*",  # the Index's reads, as Taskcluster's
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True, populate_by_name=True)

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
        "SDKs, `shared/storage/azure.py`). Blobs always go through the SDK.",
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
    port: int = Field(default=7071, ge=1, le=65535, description="Port of the local host's HTTP server.")
    http_max_connections: int = Field(
        default=1000,
        ge=1,
        description="Connections the local host's HTTP server "
        "holds at once; one more is answered 503 and closed (docs/security.md).",
    )
    http_header_timeout: float = Field(
        default=10,
        gt=0,
        description="Seconds a connection to the local host may "
        "take to send a whole request head (from opening, or from its previous "
        "answer); then it is closed.",
    )
    http_body_timeout: float = Field(
        default=10,
        gt=0,
        description="Seconds a connection to the local host may "
        "send nothing while its request body is read (while the server itself waits, "
        "the wait does not count); then it is closed.",
    )
    http_per_peer_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of `http_max_connections` one "
        "peer address may hold; one more from it is answered 503 and closed.",
    )
    root_url: str | None = Field(default=None, description="Public rootUrl; default http://127.0.0.1:<QUEUE_PORT>.")
    root_client_id: str = Field(default="root", min_length=1, description="Client id of the root client.")
    root_access_token: str = Field(
        min_length=22,
        description="Access token of the root client; it also signs the temporary credentials given to workers.",
    )
    claim_timeout: float = Field(
        default=1200, gt=0, description="Seconds a claim lasts before it must be reclaimed (takenUntil = now + this)."
    )
    deadline_delay: float = Field(
        default=60, ge=0, description="Seconds after a task's deadline at which the deadline check runs."
    )
    max_task_deadline_days: float = Field(default=5, gt=0, description="How far ahead a deadline may be.")
    claim_work_wait: float = Field(
        default=20, ge=0, description="Seconds claimWork long-polls when no work is pending."
    )
    claim_work_poll_interval: float = Field(
        default=0.5, gt=0, description="Seconds between polls of the pending queues while claimWork waits."
    )
    pending_empty_ttl: float = Field(
        default=1.0,
        ge=0,
        description="Seconds claimWork skips a pending queue "
        "(a task queue and priority) it found empty, unless this process put a hint "
        "in it since; bounds how late another process's new task is seen. 0: always "
        "receive from all seven.",
    )
    pending_hint_visibility: int = Field(
        default=300, ge=1, description="Seconds a received pending hint stays invisible while its claim is attempted."
    )
    poll_url_ttl: float = Field(
        default=1800,
        gt=0,
        description="Seconds the signed polling URLs of "
        "pollTaskUrls work (Taskcluster: 30 minutes); workers ask again before then.",
    )
    worker_info_interval: float = Field(
        default=60,
        ge=0,
        description="Seconds between writes of a worker's "
        "entry (recent tasks, lastDateActive) by one process: claims in between "
        "are buffered, so a busy fleet does not write on every claim.",
    )
    hint_grace: float = Field(
        default=60,
        ge=0,
        description="Seconds a hint whose run is not yet written is kept (and retried) rather than dropped.",
    )
    resolution_grace: int = Field(
        default=10,
        ge=0,
        description="Seconds a task's resolution message stays "
        "hidden while the process that resolved the task unblocks its dependents and "
        "resolves its group itself, right after its answer; the message is deleted "
        "once that is done, and its handler runs only when it was not (the process "
        "died, or took longer). 0: the resolution trigger always does it.",
    )
    hint_retry_delay: int = Field(
        default=1, ge=1, description="Seconds before a hint for a run not yet written is offered again."
    )
    token_secret: str | None = Field(
        default=None,
        min_length=22,
        description="Secret from which the access tokens of stored clients are derived (none are stored).",
    )
    anonymous_scopes: str = Field(
        default=" ".join(DEFAULT_ANONYMOUS_SCOPES),
        description="Scopes of unauthenticated requests (every client holds them too): a JSON list, or scopes "
        "separated by spaces or commas.",
    )
    client_cache_seconds: float = Field(
        default=10,
        ge=0,
        description="Seconds a process trusts a client it read: a reset, disable or delete takes effect within this.",
    )
    certificate_skew: float = Field(
        default=300,
        ge=0,
        description="Seconds of clock skew allowed on "
        "temporary credentials' start and expiry (Taskcluster: 5 minutes).",
    )
    expiry_delay: float = Field(
        default=1800, ge=0, description="Seconds after `expires` at which a task is deleted (Taskcluster: 30 minutes)."
    )
    expiry_schedule: str = Field(
        default="0 */5 * * * *",
        description="NCRONTAB schedule of the expiry timer "
        "(an app setting the timer trigger's binding names as %QUEUE_EXPIRY_SCHEDULE%).",
    )
    reconcile_schedule: str = Field(
        default="30 */5 * * * *",
        description="NCRONTAB schedule of the reconciler "
        "(an app setting its binding names as %QUEUE_RECONCILE_SCHEDULE%).",
    )
    park_lead: int = Field(
        default=60,
        ge=1,
        description="Seconds before they fall due that claim checks and deadlines due later are brought from their "
        "parking queue, which no trigger watches, to their trigger's (shared/domain/parking.py).",
    )
    park_schedule: str = Field(
        default="*/20 * * * * *",
        description="NCRONTAB schedule of the timer that moves parked checks (%QUEUE_PARK_SCHEDULE%): within the lead.",
    )
    reconcile_grace: float = Field(
        default=300,
        gt=0,
        description="Seconds a state must have lasted before the "
        "reconciler judges that the message meant to move it on was lost.",
    )
    reconcile_budget: float = Field(default=120, gt=0, description="Seconds one reconciler pass may run.")
    rehint_after: float = Field(
        default=3600,
        gt=0,
        description="Seconds a run may wait pending in a queue "
        "that is not empty before the reconciler hints it again (its first hint stays "
        "valid, so it keeps its place).",
    )
    artifact_storage: str | None = Field(
        default=None,
        description="Connection string of the storage account holding artifact blobs (with an "
        "AccountKey: it signs the upload and download URLs); default: `QUEUE_STORAGE`.",
    )
    artifact_container: str = Field(
        default="artifacts",
        pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$",
        description="Blob container of the artifacts.",
    )
    artifact_upload_ttl: float = Field(
        default=1800,
        gt=0,
        description="Seconds an artifact's upload URL (`putUrl`) works; ask createArtifact again for a fresh one.",
    )
    artifact_download_ttl: float = Field(
        default=1800, gt=0, description="Seconds a download URL given by getArtifact works."
    )
    artifact_s3_max_bytes: int = Field(
        default=5 * 1024**3,
        gt=0,
        le=190 * 1024**4,
        description="Largest `s3` artifact: its one PUT passes "
        "through the queue (default 5 GiB, S3's single-PUT limit; on Azure Functions the HTTP request limit is "
        "lower: docs/deploy.md).",
    )
    artifact_upload_slots: int = Field(
        default=8,
        ge=1,
        description="`s3` uploads a process streams to Blob "
        "Storage at once, each holding up to two 4 MiB blocks; others wait.",
    )
    artifact_exception_window: float = Field(
        default=1500,
        ge=0,
        description="Seconds after a run resolved "
        "`exception` during which artifacts may still be created "
        "(Taskcluster: 25 minutes).",
    )
    event_bus: Literal["none", "amqp", "servicebus"] = Field(
        default="none",
        description="Where events are published: `amqp` (RabbitMQ / Pulse), `servicebus` (Azure "
        "Service Bus) or `none` (recorded and listed by the API, not published).",
    )
    amqp_url: str = Field(
        default="amqp://guest:guest@127.0.0.1:5672/", description="AMQP 0-9-1 broker URL (with `QUEUE_EVENT_BUS=amqp`)."
    )
    servicebus_connection: str | None = Field(
        default=None, description="Service Bus connection string (with `QUEUE_EVENT_BUS=servicebus`)."
    )
    servicebus_namespace: str | None = Field(
        default=None,
        validation_alias=AliasChoices("QUEUE_SERVICEBUS__fullyQualifiedNamespace", "servicebus_namespace"),
        description="Identity-based Service Bus connection (`QUEUE_SERVICEBUS__fullyQualifiedNamespace`, e.g. "
        "`<name>.servicebus.windows.net`), used with the managed identity of `QUEUE_STORAGE__clientId` when "
        "`QUEUE_SERVICEBUS_CONNECTION` is not set.",
    )
    pulse_namespace: str = Field(
        default="taskcluster-queue",
        pattern=r"^[a-z0-9][a-z0-9._-]*$",
        description="Exchange namespace: exchanges are `exchange/<this>/v1/<name>` "
        "(Service Bus topics `<this>/v1/<name>`).",
    )
    event_lease: float = Field(
        default=30,
        gt=0,
        description="Seconds a dispatcher holds a stream while publishing; one that dies is replaced after this.",
    )
    event_publish_timeout: float = Field(
        default=10,
        gt=0,
        description="Seconds to wait for the bus to confirm one message (keep it well under `event_lease`).",
    )
    event_mark_interval: float = Field(
        default=0.2,
        ge=0,
        description="Seconds between writes of a process's "
        "publication mark, which tells other processes that the events its writers "
        "published are published (shared/outbox/marks.py); another "
        "process's dispatch of the same stream waits about this long.",
    )
    event_retry_max_delay: int = Field(
        default=60,
        ge=1,
        description="Longest wait before dispatching again after the bus refused (the wait doubles from 1 s).",
    )
    faults: str = Field(
        default="",
        description="Tests only: fault-injection points at which the process exits as if killed (`shared/faults.py`).",
    )
    validate_responses: bool = Field(
        default=False, description="Validate every response body against its schema (on in tests; costs CPU)."
    )
    log_level: str = Field(default="INFO", description="Level of the queue's logs.")

    @model_validator(mode="after")
    def _bus_configured(self) -> Settings:
        if self.event_bus == "servicebus" and not (self.servicebus_connection or self.servicebus_namespace):
            raise ValueError(
                "QUEUE_SERVICEBUS_CONNECTION or QUEUE_SERVICEBUS__fullyQualifiedNamespace is required "
                "with QUEUE_EVENT_BUS=servicebus"
            )
        return self

    @model_validator(mode="after")
    def _storage_configured(self) -> Settings:
        connection = self.storage_connection  # raises if neither form is complete
        if connection.blob_uri is None and connection.uses_identity and not self.artifact_storage:
            raise ValueError(
                "QUEUE_STORAGE__blobServiceUri (or __accountName) is required for artifacts, unless "
                "QUEUE_ARTIFACT_STORAGE names another account"
            )
        return self

    @field_validator("faults")
    @classmethod
    def _known_faults(cls, value: str) -> str:
        from shared import faults

        faults.parse(value)
        return value

    @field_validator("root_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    @field_validator("anonymous_scopes")
    @classmethod
    def _valid_scopes(cls, value: str) -> str:
        parse_scopes(value)
        return value

    @property
    def anonymous_scope_list(self) -> list[str]:
        return parse_scopes(self.anonymous_scopes)

    @property
    def hint_key(self) -> bytes:
        """The key that signs pending hints (derived from the root access token: nothing more to configure)."""
        return hmac.new(self.root_access_token.encode(), b"pending-hint-signing-key", hashlib.sha256).digest()

    @property
    def upload_key(self) -> bytes:
        """The key that signs the queue's `s3` upload URLs (derived from the root access token, as hint_key)."""
        return hmac.new(self.root_access_token.encode(), b"s3-upload-signing-key", hashlib.sha256).digest()

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

    @property
    def public_root_url(self) -> str:
        return self.root_url or f"http://127.0.0.1:{self.port}"


def load_settings(**overrides: object) -> Settings:
    """Read the settings from the environment; a bad or missing value raises SettingsError naming it."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(part) for part in err["loc"])
            problems.append(f"{ENV_PREFIX}{field.upper()}: {err['msg']}" if field else err["msg"])
        raise SettingsError(problems="; ".join(problems)) from None


@functools.cache
def get_settings() -> Settings:
    """The process's settings, read once."""
    return load_settings()
