"""The one place the queue is wired together: the stores, the task repository, the operations over them and the
maintenance that depends on those, built from the settings once per process (`get_queue`), or from given stores
(`build_queue`: tests, benchmarks and commands). The HTTP API (shared/api/app.py) and the trigger functions
(functions/) sit above this, and nothing below imports it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shared import faults, timeutil
from shared.auth.anonymous import EVERY_CALLER, anonymous_seed
from shared.auth.audit import AUDIT_TABLE, AuditLog
from shared.auth.authenticator import Authenticator
from shared.auth.clients import CLIENTS_TABLE, ClientStore
from shared.auth.roles import ROLES_TABLE, RoleStore
from shared.bus import create_publisher
from shared.domain.index import INDEX_TABLE
from shared.domain.objects import OBJECT_EXPIRY_TABLE, OBJECTS_TABLE
from shared.domain.workers import WORKER_INFO_TABLE
from shared.maintenance.reconciler import Reconciler
from shared.operations.artifact_reads import ArtifactReads
from shared.operations.artifacts import Artifacts
from shared.operations.checks import Checks
from shared.operations.claims import Claims
from shared.operations.creation import TaskCreation
from shared.operations.expiry import Expiry
from shared.operations.groups import TaskGroups
from shared.operations.index import TaskIndex
from shared.operations.lifecycle import Lifecycle
from shared.operations.object_uploads import ObjectUploads
from shared.operations.objects import Objects
from shared.operations.polling import Polling
from shared.operations.purge_cache import PurgeCaches
from shared.operations.queries import Queries
from shared.operations.reruns import Reruns
from shared.operations.resolution.follow_up import FollowUp
from shared.operations.resolution.steps import ResolutionSteps
from shared.operations.s3_uploads import S3Uploads
from shared.operations.scheduling import Scheduling
from shared.operations.work_claimer import WorkClaimer
from shared.operations.writes.repository import TaskRepository
from shared.operations.writes.staging import BlockStaging
from shared.operations.writes.stores import Clock, Stores
from shared.outbox.marks import MARKS_TABLE
from shared.outbox.rows import Publisher
from shared.settings import Settings, get_settings
from shared.settings.fitness import check_serving
from shared.storage import queue_store, table_store
from shared.storage.azure import AzureBlobs
from shared.storage.base import BlobStore, QueueStore, TableStore
from shared.storage.retry import RetryPolicy
from shared.storage.sharded import ShardedQueues, ShardedTables


@dataclass(frozen=True)
class Queue:
    """The queue's operations, as the API and the triggers call them."""

    stores: Stores
    tasks: TaskRepository
    creation: TaskCreation
    lifecycle: Lifecycle
    reruns: Reruns
    claims: Claims
    work: WorkClaimer
    checks: Checks
    resolution: FollowUp
    groups: TaskGroups
    queries: Queries
    artifacts: Artifacts
    artifact_reads: ArtifactReads
    s3_uploads: S3Uploads
    object_uploads: ObjectUploads
    objects: Objects
    polling: Polling
    expiry: Expiry
    reconciler: Reconciler
    index: TaskIndex
    purge_cache: PurgeCaches

    @property
    def settings(self) -> Settings:
        return self.stores.settings

    async def close(self) -> None:
        await self.stores.close()


def build_queue(
    settings: Settings,
    tables: TableStore,
    queues: QueueStore,
    blobs: BlobStore | None = None,
    clock: Clock = timeutil.now,
    ticks: Callable[[], float] = time.monotonic,
) -> Queue:
    """The service on these stores; `clock` its wall clock, `ticks` the monotonic one its skips of empty pending
    queues are timed on (tests give their own)."""
    stores = Stores.create(settings, tables, queues, blobs, clock, ticks)
    tasks = TaskRepository(stores)
    scheduling = Scheduling(tasks)
    index = TaskIndex(stores)
    resolution = FollowUp(tasks, scheduling, index)
    resolving = ResolutionSteps(tasks, resolution)  # what follows a resolution is done by the process that wrote it
    lifecycle = Lifecycle(tasks, scheduling, resolving)
    claims = Claims(tasks)
    work = WorkClaimer(claims)
    checks = Checks(tasks, resolving)
    objects = Objects(stores)
    artifacts = Artifacts(tasks, objects)
    staging = BlockStaging(
        lambda: artifacts.blobs, settings.artifact_container, settings.artifact_upload_slots, stores.now
    )
    return Queue(
        stores,
        tasks,
        TaskCreation(tasks, scheduling),
        lifecycle,
        Reruns(tasks, lifecycle, scheduling),
        claims,
        work,
        checks,
        resolution,
        TaskGroups(tasks, lifecycle, settings.list_page_bytes),
        Queries(tasks, settings.list_page_bytes),
        artifacts,
        ArtifactReads(artifacts),
        S3Uploads(artifacts, staging),
        ObjectUploads(objects, staging, artifacts),
        objects,
        Polling(work),
        Expiry(tasks),
        Reconciler(tasks, scheduling, checks, resolution),
        index,
        PurgeCaches(stores, settings.purge_cache_seconds),
    )


@functools.cache
def get_queue() -> Queue:
    """The process's queue, built from the settings on first use (not at import: a missing setting then shows as
    a clear error in a response and the logs rather than as a failed import). Settings unfit to serve
    (`check_serving`) make every request answer that error."""
    settings = check_serving(get_settings())
    faults.arm(settings.faults)
    timeutil.set_offset(settings.clock_offset)
    tables, queues = data_stores(settings)
    queue = build_queue(settings, tables, queues, AzureBlobs(settings.artifact_connection, retry_policy(settings)))
    queue.stores.events.publisher = get_publisher()  # a change's writer publishes its own events
    return queue


# Tables read whole or by their own keys, by every process: kept in the first account when there are several.
GLOBAL_TABLES = frozenset(
    {
        CLIENTS_TABLE,
        ROLES_TABLE,
        AUDIT_TABLE,
        WORKER_INFO_TABLE,
        INDEX_TABLE,
        MARKS_TABLE,
        OBJECTS_TABLE,
        OBJECT_EXPIRY_TABLE,
    }
)


def data_stores(
    settings: Settings, client: str | None = None, environ: Mapping[str, str] | None = None
) -> tuple[TableStore, QueueStore]:
    """The table and queue stores of the data accounts: the account's own with one, routed over
    `QUEUE_STORAGE_SHARDS` of them otherwise (shared/storage/sharded.py; the further accounts' connections from
    `environ`, the process's environment by default)."""
    client, policy = client or settings.storage_client, retry_policy(settings)
    connections = settings.storage_connections(environ)
    if len(connections) == 1:
        return table_store(connections[0], client, policy), queue_store(connections[0], client, policy=policy)
    return (
        ShardedTables([table_store(c, client, policy) for c in connections], GLOBAL_TABLES),
        ShardedQueues([queue_store(c, client, policy=policy) for c in connections]),
    )


def retry_policy(settings: Settings) -> RetryPolicy:
    """How storage calls are retried and timed out (shared/storage/retry.py)."""
    return RetryPolicy(
        budget=settings.storage_retry_budget,
        backoff=settings.storage_retry_backoff,
        max_backoff=settings.storage_retry_max_backoff,
        timeout=settings.storage_timeout,
        connect_timeout=settings.storage_connect_timeout,
    )


@functools.cache
def get_publisher() -> Publisher | None:
    """The event bus publisher (connected on first publish), or None when no bus is configured."""
    return create_publisher(get_settings())


@functools.cache
def get_authenticator() -> Authenticator[ClientStore]:
    settings = get_settings()
    clients = ClientStore(
        get_queue().stores.tables,
        token_secret=settings.token_secret,
        root_client_id=settings.root_client_id,
        root_access_token=settings.root_access_token,
        cache_seconds=settings.client_cache_seconds,
    )
    roles = RoleStore(
        get_queue().stores.tables,
        cache_seconds=settings.client_cache_seconds,
        seeds=[anonymous_seed(settings.anonymous_scope_list)],
    )
    return Authenticator(clients, EVERY_CALLER, certificate_skew_seconds=settings.certificate_skew, roles=roles)


@functools.cache
def get_audit_log() -> AuditLog:
    """The Auth API's audit history (shared/auth/audit.py)."""
    return AuditLog(get_queue().stores.tables, retention_days=get_settings().audit_retention_days)
