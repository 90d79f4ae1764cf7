"""Table, queue and blob stores over the Azure SDKs' async clients (Azure Storage, or Azurite locally)."""

from __future__ import annotations

import contextlib
import datetime as dt
import urllib.parse
from typing import Any

import aiohttp
from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.core.pipeline.transport import AioHttpTransport
from azure.data.tables import TableTransactionError, UpdateMode
from azure.data.tables.aio import TableClient, TableServiceClient
from azure.storage.blob import BlobSasPermissions, UserDelegationKey, generate_blob_sas
from azure.storage.blob.aio import BlobServiceClient
from azure.storage.queue import QueueSasPermissions, generate_queue_sas
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from shared.connections import Service, StorageConnection
from shared.errors import InternalServerError
from shared.storage.base import (
    BlobInfo,
    Entity,
    Op,
    Page,
    QueueMessage,
    ServedAs,
    announce_put,
    decode_continuation,
    decode_message,
    encode_continuation,
    encode_message,
    transaction_is_empty,
)

_KEYS = ("PartitionKey", "RowKey")
# Azure's limit for a message's time to live is "never" (-1) or seconds; visibility may not exceed 7 days.
MAX_VISIBILITY = 7 * 24 * 3600
# Signed URLs start a little in the past: Azure refuses a SAS whose start is ahead of its own clock.
SAS_CLOCK_SKEW = dt.timedelta(minutes=15)


def _shared_transport() -> tuple[aiohttp.ClientSession, AioHttpTransport]:
    # One keep-alive session for every client; trust_env=False: the default re-reads proxy settings
    # from the environment on every request, which measurably costs CPU (DESIGN.md).
    session = aiohttp.ClientSession(trust_env=False, connector=aiohttp.TCPConnector(limit=200))
    return session, AioHttpTransport(session=session, session_owner=False)


def _entity(raw: Any) -> Entity:
    data = {k: v for k, v in raw.items() if k not in _KEYS}
    return Entity(raw["PartitionKey"], raw["RowKey"], data, raw.metadata.get("etag"))


def _row(entity: Entity) -> dict[str, Any]:
    return {"PartitionKey": entity.partition_key, "RowKey": entity.row_key, **entity.data}


def _etag_of(response: Any) -> str | None:
    return response.get("etag") if isinstance(response, dict) else None


def _connection(connection: str | StorageConnection) -> StorageConnection:
    return StorageConnection(connection_string=connection) if isinstance(connection, str) else connection


class _Clients:
    """One service client per store, a cached client per table or queue, one shared keep-alive session.
    Created on first use, inside the running event loop (aiohttp sessions belong to a loop)."""

    def __init__(self, connection: StorageConnection, service: Service, service_type: Any, child: str) -> None:
        self._connection, self._kind = connection, service
        self._service_type, self._child = service_type, child
        self._service: Any = None
        self._clients: dict[str, Any] = {}
        self._session: aiohttp.ClientSession | None = None

    def get(self, name: str) -> Any:
        client = self._clients.get(name)
        if client is None:
            if self._service is None:
                self._session, transport = _shared_transport()
                self._service = self._connection.service_client(self._service_type, self._kind, transport=transport)
            client = self._clients[name] = getattr(self._service, self._child)(name)
        return client

    @property
    def service(self) -> Any:
        if self._service is None:
            self.get("$probe")  # creates the service client (a child client costs nothing until used)
        return self._service

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        if self._service is not None:
            await self._service.close()
        if self._session is not None:
            await self._session.close()
        self._clients.clear()
        self._service = self._session = None


class AzureTables:
    def __init__(self, connection: str | StorageConnection) -> None:
        self._clients = _Clients(_connection(connection), "table", TableServiceClient, "get_table_client")

    def _client(self, table: str) -> TableClient:
        client: TableClient = self._clients.get(table)
        return client

    async def ensure_tables(self, names: list[str]) -> None:
        for name in names:
            with contextlib.suppress(ResourceExistsError):
                await self._client(name).create_table()

    async def get(self, table: str, partition_key: str, row_key: str) -> Entity | None:
        try:
            return _entity(await self._client(table).get_entity(partition_key, row_key))
        except ResourceNotFoundError:
            return None

    async def insert(self, table: str, entity: Entity) -> Entity | None:
        try:
            response = await self._client(table).create_entity(_row(entity))
        except ResourceExistsError:
            return None
        return entity.with_etag(_etag_of(response))

    async def replace(self, table: str, entity: Entity) -> Entity | None:
        try:
            if entity.etag is None:
                response = await self._client(table).update_entity(_row(entity), mode=UpdateMode.REPLACE)
            else:
                response = await self._client(table).update_entity(
                    _row(entity), mode=UpdateMode.REPLACE, etag=entity.etag,
                    match_condition=MatchConditions.IfNotModified)
        except (ResourceModifiedError, ResourceNotFoundError):
            return None
        return entity.with_etag(_etag_of(response))

    async def upsert(self, table: str, entity: Entity) -> Entity:
        response = await self._client(table).upsert_entity(_row(entity), mode=UpdateMode.REPLACE)
        return entity.with_etag(_etag_of(response))

    async def delete(self, table: str, partition_key: str, row_key: str, etag: str | None = None) -> bool:
        client = self._client(table)
        try:
            if etag == "*":  # unconditional, and no answer needed: the SDK ignores a missing entity
                await client.delete_entity(partition_key, row_key)
                return True
            if etag is None:
                # delete_entity ignores a missing entity; read first so the caller learns whether it existed.
                if await self.get(table, partition_key, row_key) is None:
                    return False
                await client.delete_entity(partition_key, row_key)
            else:
                await client.delete_entity(partition_key, row_key, etag=etag,
                                           match_condition=MatchConditions.IfNotModified)
        except (ResourceModifiedError, ResourceNotFoundError):
            return False
        return True

    async def query(self, table: str, filter: str, parameters: dict[str, Any], *, limit: int | None = None,
                    continuation: str | None = None) -> Page:
        token: Any = None  # the SDK's own form of the keys, though it types its tokens as strings
        if continuation:
            next_pk, next_rk = decode_continuation(continuation)
            token = {"PartitionKey": next_pk, "RowKey": next_rk}
        pages = self._client(table).query_entities(
            filter, parameters=parameters, results_per_page=limit or 1000).by_page(continuation_token=token)
        entities: list[Entity] = []
        async for page in pages:
            entities.extend([_entity(raw) async for raw in page])
            break
        next_token = pages.continuation_token  # type: ignore[attr-defined]
        encoded = encode_continuation(next_token["PartitionKey"], next_token.get("RowKey")) if next_token else None
        return Page(entities, encoded)

    async def transact(self, table: str, ops: list[Op]) -> bool:
        return await self.commit(table, ops) is not None

    async def commit(self, table: str, ops: list[Op]) -> list[str | None] | None:
        if transaction_is_empty(ops):
            return []
        operations: list[Any] = []
        for op in ops:
            row = _row(op.entity)
            condition = ({"etag": op.entity.etag, "match_condition": MatchConditions.IfNotModified}
                         if op.entity.etag else {})
            if op.kind == "insert":
                operations.append(("create", row))
            elif op.kind == "upsert":
                operations.append(("upsert", row, {"mode": UpdateMode.REPLACE}))
            elif op.kind == "replace":
                operations.append(("update", row, {"mode": UpdateMode.REPLACE, **condition}))
            elif op.kind == "merge":
                operations.append(("update", row, {"mode": UpdateMode.MERGE, **condition}))
            elif op.kind == "delete":
                operations.append(("delete", row, condition))
            else:
                raise ValueError(f"unknown operation {op.kind}")
        try:
            results = await self._client(table).submit_transaction(operations)
        except (ResourceExistsError, ResourceModifiedError, ResourceNotFoundError):
            return None
        except TableTransactionError as exc:
            # A condition that failed (exists, changed, absent) is an answer; anything else is an error.
            if getattr(exc, "status_code", None) in (404, 409, 412) or getattr(exc, "error_code", None) in (
                    "EntityAlreadyExists", "UpdateConditionNotSatisfied", "ResourceNotFound"):
                return None
            raise
        return [None if op.kind == "delete" else result.get("etag") for op, result in zip(ops, results, strict=True)]

    async def close(self) -> None:
        await self._clients.close()


def _message_gone(exc: HttpResponseError) -> bool:
    """Deleted already, or received again by someone else since (its visibility ran out): not ours any more."""
    code = getattr(exc, "error_code", None)  # set by the storage SDKs on their errors
    return isinstance(exc, ResourceNotFoundError) or code in ("MessageNotFound", "PopReceiptMismatch")


def _message(raw: Any) -> QueueMessage:
    return QueueMessage(
        id=raw.id, pop_receipt=raw.pop_receipt, content=decode_message(raw.content),
        dequeue_count=raw.dequeue_count or 0, inserted=raw.inserted_on or dt.datetime.now(dt.UTC),
        expires=raw.expires_on, next_visible=raw.next_visible_on)


class SigningKeyMissing(InternalServerError):
    """{what} cannot be signed: {reason}"""


class _Signer:
    """Account name, key and endpoint, to sign SAS URLs: parsed from a connection string (by a sync client, no
    I/O), or taken from an identity-based connection (whose key, if any, is configured apart)."""

    def __init__(self, connection: StorageConnection, service: Service, sync_client_type: Any) -> None:
        if connection.connection_string is None:
            self.account, self.key = connection.account_name(service), connection.account_key
            self.endpoint = connection.endpoint(service)
            return
        parsed = sync_client_type.from_connection_string(connection.connection_string)
        self.account = parsed.account_name or ""
        self.key = getattr(parsed.credential, "account_key", None)
        self.endpoint = parsed.url.split("?", 1)[0].rstrip("/")
        parsed.close()

    def require_key(self, what: str, reason: str) -> str:
        if not self.key:
            raise SigningKeyMissing(what=what, reason=reason)
        return str(self.key)


def queue_process_url(account: str, key: str | None, endpoint: str, queue: str, expires: dt.datetime) -> str:
    """`<endpoint>/<queue>?<sas>` that may only get and delete the queue's messages until `expires` (pure
    computation: both queue adapters sign with it)."""
    if not key:
        raise SigningKeyMissing(
            what="Polling URLs", reason="Azure Queue SAS need the account key, and none is configured (with an "
            "identity-based QUEUE_STORAGE connection, set QUEUE_STORAGE_ACCOUNT_KEY, e.g. as a Key Vault "
            "reference; claimWork works without it)")
    sas = generate_queue_sas(account, queue, key, permission=QueueSasPermissions(process=True), expiry=expires,
                             start=dt.datetime.now(dt.UTC) - SAS_CLOCK_SKEW)
    return f"{endpoint}/{queue}?{sas}"


class AzureQueues:
    def __init__(self, connection: str | StorageConnection, *, traced: bool = True) -> None:
        connection = _connection(connection)
        # azure-core traces every call when telemetry is on; `traced=False` leaves this store's calls out.
        self._options: dict[str, Any] = {} if traced else {"tracing_options": {"enabled": False}}
        self._clients = _Clients(connection, "queue", QueueServiceClient, "get_queue_client")
        from azure.storage.queue import QueueServiceClient as SyncQueueServiceClient
        self._signer = _Signer(connection, "queue", SyncQueueServiceClient)

    def _client(self, queue: str) -> QueueClient:
        client: QueueClient = self._clients.get(queue)
        return client

    async def ensure_queues(self, names: list[str]) -> None:
        for name in names:
            with contextlib.suppress(ResourceExistsError):
                await self._client(name).create_queue(**self._options)

    async def put(self, queue: str, content: bytes, *, visible_in: int = 0, ttl: int | None = None) -> QueueMessage:
        client = self._client(queue)
        visible_in = max(0, min(visible_in, MAX_VISIBILITY))
        kwargs: dict[str, Any] = {"visibility_timeout": visible_in or None,
                                  "time_to_live": ttl if ttl is not None else -1}
        if ttl is not None and ttl <= visible_in:
            kwargs["time_to_live"] = visible_in + 60
        try:
            sent = await client.send_message(encode_message(content), **kwargs, **self._options)
        except ResourceNotFoundError:
            # Queues are created on first use (pending queues exist per task queue and priority).
            await self.ensure_queues([queue])
            sent = await client.send_message(encode_message(content), **kwargs, **self._options)
        announce_put(queue, visible_in)
        return QueueMessage(sent.id, sent.pop_receipt or "", content, 0, sent.inserted_on or dt.datetime.now(dt.UTC),
                            sent.expires_on, sent.next_visible_on)

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> list[QueueMessage]:
        count = max(1, min(max_messages, 32))
        try:
            # messages_per_page: otherwise the SDK makes one request per message.
            pages = self._client(queue).receive_messages(
                messages_per_page=count, max_messages=count,
                visibility_timeout=max(1, visibility_timeout), **self._options).by_page()  # Azure's minimum: 1 s
            async for page in pages:
                return [_message(raw) async for raw in page]
        except ResourceNotFoundError:
            return []
        return []

    async def delete(self, queue: str, message: QueueMessage) -> None:
        try:
            await self._client(queue).delete_message(message.id, message.pop_receipt, **self._options)
        except HttpResponseError as exc:
            if not _message_gone(exc):
                raise

    async def release(self, queue: str, message: QueueMessage, visible_in: int) -> QueueMessage | None:
        try:
            raw = await self._client(queue).update_message(
                message.id, pop_receipt=message.pop_receipt, visibility_timeout=max(0, visible_in), **self._options)
        except HttpResponseError as exc:
            if _message_gone(exc):
                return None
            raise
        return QueueMessage(message.id, raw.pop_receipt or message.pop_receipt, message.content, message.dequeue_count,
                            message.inserted, message.expires, raw.next_visible_on)

    async def approximate_count(self, queue: str) -> int:
        try:
            props = await self._client(queue).get_queue_properties()
        except ResourceNotFoundError:
            return 0
        return int(props.approximate_message_count or 0)

    def process_url(self, queue: str, expires: dt.datetime) -> str:
        return queue_process_url(self._signer.account, self._signer.key, self._signer.endpoint, queue, expires)

    async def close(self) -> None:
        await self._clients.close()



class AzureBlobs:
    """Blobs and their SAS URLs. With a connection string the SAS are signed with its account key; with an
    identity, with a user delegation key (asked of Azure, valid up to 7 days, renewed a day before it ends)."""

    DELEGATION_KEY_LIFETIME = dt.timedelta(days=6)
    DELEGATION_KEY_RENEW = dt.timedelta(days=1)

    def __init__(self, connection: str | StorageConnection) -> None:
        connection = _connection(connection)
        self._clients = _Clients(connection, "blob", BlobServiceClient, "get_container_client")
        from azure.storage.blob import BlobServiceClient as SyncBlobServiceClient
        self._signer = _Signer(connection, "blob", SyncBlobServiceClient)
        self._by_identity = connection.uses_identity
        if not self._by_identity:
            self._signer.require_key("Artifact URLs", "the artifact storage connection string has no AccountKey")
        self._delegation_key: UserDelegationKey | None = None
        self._delegation_key_ends = dt.datetime.min.replace(tzinfo=dt.UTC)

    async def _user_delegation_key(self, needed_until: dt.datetime) -> UserDelegationKey:
        now = dt.datetime.now(dt.UTC)
        if self._delegation_key is None or self._delegation_key_ends - self.DELEGATION_KEY_RENEW < max(
                now, needed_until):
            ends = now + self.DELEGATION_KEY_LIFETIME
            self._delegation_key = await self._clients.service.get_user_delegation_key(now - SAS_CLOCK_SKEW, ends)
            self._delegation_key_ends = ends
        return self._delegation_key

    async def _signed(self, container: str, blob: str, permission: BlobSasPermissions, expires: dt.datetime, *,
                      snapshot: str | None = None, served_as: ServedAs | None = None) -> str:
        start = dt.datetime.now(dt.UTC) - SAS_CLOCK_SKEW
        options: dict[str, Any] = {"permission": permission, "expiry": expires, "start": start, "snapshot": snapshot}
        if served_as is not None:
            options.update(content_type=served_as.content_type, content_disposition=served_as.content_disposition,
                           content_encoding=served_as.content_encoding)
        if self._by_identity:
            sas = generate_blob_sas(self._signer.account, container, blob,
                                    user_delegation_key=await self._user_delegation_key(expires), **options)
        else:
            sas = generate_blob_sas(self._signer.account, container, blob, account_key=self._signer.key, **options)
        at = f"snapshot={urllib.parse.quote(snapshot)}&" if snapshot else ""
        return f"{self._signer.endpoint}/{container}/{urllib.parse.quote(blob, safe='/~')}?{at}{sas}"

    async def upload_url(self, container: str, blob: str, expires: dt.datetime, *, overwrite: bool = True) -> str:
        return await self._signed(container, blob, BlobSasPermissions(create=True, write=overwrite), expires)

    async def download_url(self, container: str, blob: str, expires: dt.datetime, *, snapshot: str | None = None,
                           served_as: ServedAs | None = None) -> str:
        return await self._signed(container, blob, BlobSasPermissions(read=True), expires, snapshot=snapshot,
                                  served_as=served_as)

    async def snapshot(self, container: str, blob: str) -> BlobInfo | None:
        blobs = self._clients.get(container)
        try:
            made = await blobs.get_blob_client(blob).create_snapshot()
        except ResourceNotFoundError:
            return None
        props = await blobs.get_blob_client(blob, snapshot=made["snapshot"]).get_blob_properties()
        return BlobInfo(int(props.size), props.content_settings.content_type, props.etag, made["snapshot"])

    async def ensure_container(self, container: str) -> None:
        with contextlib.suppress(ResourceExistsError):
            await self._clients.get(container).create_container()

    async def info(self, container: str, blob: str) -> BlobInfo | None:
        try:
            props = await self._clients.get(container).get_blob_client(blob).get_blob_properties()
        except ResourceNotFoundError:
            return None
        return BlobInfo(int(props.size), props.content_settings.content_type, props.etag)

    async def delete(self, container: str, blob: str) -> bool:
        try:
            await self._clients.get(container).delete_blob(blob, delete_snapshots="include")
        except ResourceNotFoundError:
            return False
        return True

    async def close(self) -> None:
        await self._clients.close()
