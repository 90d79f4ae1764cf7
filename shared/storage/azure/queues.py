"""Queues over the azure-storage-queue SDK's async client, and the signed polling URLs both queue stores hand
out (pollTaskUrls)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import QueueSasPermissions, UserDelegationKey, generate_queue_sas
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from shared.connections import StorageConnection, async_credential
from shared.storage.azure.common import (
    SAS_CLOCK_SKEW,
    Clients,
    DelegationKeys,
    Refused,
    Signer,
    SigningKeyMissing,
    as_connection,
    retried,
    with_keywords,
)
from shared.storage.base import (
    QueueMessage,
    Received,
    all_at_once,
    announce_put,
    decode_message,
    encode_message,
)
from shared.storage.retry import RetryPolicy

# Azure's limit for a message's time to live is "never" (-1) or seconds; visibility may not exceed 7 days.
MAX_VISIBILITY = 7 * 24 * 3600


def _message_gone(exc: HttpResponseError) -> bool:
    """Deleted already, or received again by someone else since (its visibility ran out): not ours any more."""
    code = getattr(exc, "error_code", None)  # set by the storage SDKs on their errors
    return isinstance(exc, ResourceNotFoundError) or code in ("MessageNotFound", "PopReceiptMismatch")


def _message(raw: Any) -> QueueMessage:
    return QueueMessage(
        id=raw.id,
        pop_receipt=raw.pop_receipt,
        content=decode_message(raw.content),
        dequeue_count=raw.dequeue_count or 0,
        inserted=raw.inserted_on or dt.datetime.now(dt.UTC),
        expires=raw.expires_on,
        next_visible=raw.next_visible_on,
    )


class QueueSigner:
    """Signs the polling URLs of pollTaskUrls (both queue adapters use it): `<endpoint>/<queue>?<sas>` that may
    only get and delete the queue's messages until `expires`. With an account key (a connection string, or
    QUEUE_STORAGE_ACCOUNT_KEY beside an identity-based connection), a service SAS; without one, a user
    delegation SAS, signed with a key the app's identity asks of the queue service (Azure serves them from
    service version 2026-02-06; Azurite 3.37's queue service does not, so there the key must be given)."""

    def __init__(self, connection: StorageConnection) -> None:
        from azure.storage.queue import QueueServiceClient as SyncQueueServiceClient

        self._signer = Signer(connection, "queue", SyncQueueServiceClient)
        self._connection = connection
        self._service: QueueServiceClient | None = None
        self._keys = DelegationKeys(self._ask) if not self._signer.key and connection.uses_identity else None

    @property
    def by_identity(self) -> bool:
        return self._keys is not None

    async def _ask(self, start: dt.datetime, expiry: dt.datetime) -> UserDelegationKey:
        if self._service is None:
            self._service = QueueServiceClient(
                self._signer.endpoint, credential=async_credential(self._connection.client_id)
            )
        key: UserDelegationKey = await self._service.get_user_delegation_key(start=start, expiry=expiry)
        return key

    async def process_url(self, queue: str, expires: dt.datetime) -> str:
        options: dict[str, Any] = {
            "permission": QueueSasPermissions(process=True),
            "expiry": expires,
            "start": dt.datetime.now(dt.UTC) - SAS_CLOCK_SKEW,
        }
        if self._signer.key:
            sas = generate_queue_sas(self._signer.account, queue, self._signer.key, **options)
        elif self._keys is not None:
            try:
                key = await self._keys.key(expires)
            except HttpResponseError as exc:
                raise SigningKeyMissing(
                    what="Polling URLs",
                    reason=f"the queue service gave no user delegation key to the app's "
                    f"identity ({exc.status_code} {getattr(exc, 'error_code', None) or exc.reason}): it needs the "
                    "generateUserDelegationKey action on the account's queue service (docs/deploy.md), and Azure "
                    "Storage service version 2026-02-06 or later (Azurite 3.37 has none: give the account key "
                    "there as QUEUE_STORAGE_ACCOUNT_KEY); claimWork works without it",
                ) from exc
            sas = generate_queue_sas(self._signer.account, queue, user_delegation_key=key, **options)
        else:
            raise SigningKeyMissing(
                what="Polling URLs",
                reason="the connection has neither an account key nor an identity to ask for a user delegation key",
            )
        return f"{self._signer.endpoint}/{queue}?{sas}"

    async def close(self) -> None:
        if self._service is not None:
            await self._service.close()


class AzureQueues:
    def __init__(
        self, connection: str | StorageConnection, *, traced: bool = True, policy: RetryPolicy | None = None
    ) -> None:
        connection = as_connection(connection)
        self._policy = policy or RetryPolicy()
        # azure-core traces every call when telemetry is on; `traced=False` leaves this store's calls out.
        self._options: dict[str, Any] = {} if traced else {"tracing_options": {"enabled": False}}
        # The SDK's own retries are off: each call is retried here (shared/storage/retry.py).
        self._clients = Clients(
            connection, "queue", QueueServiceClient, "get_queue_client", self._policy, retry_total=0
        )
        self._signer = QueueSigner(connection)

    def _client(self, queue: str) -> QueueClient:
        client: QueueClient = self._clients.get(queue)
        return client

    async def _call(self, operation: str, call: Callable[[dict[str, Any]], Awaitable[Any]], **options: Any) -> Any:
        def with_options(request: dict[str, Any]) -> Awaitable[Any]:
            return call({**request, **self._options})

        value, _ = await retried(self._policy, operation, "client_request_id", with_options, **options)
        return value

    async def ensure_queues(self, names: list[str]) -> None:
        # The SDK raises ResourceExistsError for an existing queue even when storage answered 204.
        await all_at_once(
            self._call(
                "queue.create",
                with_keywords(self._client(name).create_queue),
                refusal=lambda exc: isinstance(exc, ResourceExistsError),
            )
            for name in names
        )

    async def put(self, queue: str, content: bytes, *, visible_in: int = 0, ttl: int | None = None) -> QueueMessage:
        client = self._client(queue)
        visible_in = max(0, min(visible_in, MAX_VISIBILITY))
        kwargs: dict[str, Any] = {
            "visibility_timeout": visible_in or None,
            "time_to_live": ttl if ttl is not None else -1,
        }
        if ttl is not None and ttl <= visible_in:
            kwargs["time_to_live"] = visible_in + 60
        # A put whose answer was lost and that is then retried leaves two messages: hints, handled idempotently.
        sent = await self._call("queue.put", lambda o: client.send_message(encode_message(content), **kwargs, **o))
        if isinstance(sent, Refused):
            # Queues are created on first use (pending queues exist per task queue and priority).
            await self.ensure_queues([queue])
            sent = await self._call(
                "queue.put", lambda o: client.send_message(encode_message(content), **kwargs, **o), refusals=()
            )
        announce_put(queue, visible_in)
        return QueueMessage(
            sent.id,
            sent.pop_receipt or "",
            content,
            0,
            sent.inserted_on or dt.datetime.now(dt.UTC),
            sent.expires_on,
            sent.next_visible_on,
        )

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> Received:
        count = max(1, min(max_messages, 32))

        async def first_page(options: dict[str, Any]) -> list[QueueMessage]:
            # messages_per_page: otherwise the SDK makes one request per message.
            pages = (
                self._client(queue)
                .receive_messages(
                    messages_per_page=count,
                    max_messages=count,
                    visibility_timeout=max(1, visibility_timeout),
                    **options,
                )
                .by_page()
            )  # Azure's minimum: 1 s
            async for page in pages:
                return [_message(raw) async for raw in page]
            return []

        def with_options(request: dict[str, Any]) -> Awaitable[Any]:
            return first_page({**request, **self._options})

        received, lost = await retried(self._policy, "queue.receive", "client_request_id", with_options)
        return Received(() if isinstance(received, Refused) else received, lost=lost)

    async def delete(self, queue: str, message: QueueMessage) -> None:
        # Gone (deleted already, or after a lost answer by our first attempt) is as good as deleted.
        await self._call(
            "queue.delete",
            lambda o: self._client(queue).delete_message(message.id, message.pop_receipt, **o),
            refusal=_message_gone,
        )

    async def release(
        self, queue: str, message: QueueMessage, visible_in: int, *, content: bytes | None = None
    ) -> QueueMessage | None:
        text = None if content is None else encode_message(content)
        raw = await self._call(
            "queue.update",
            lambda o: self._client(queue).update_message(
                message.id, pop_receipt=message.pop_receipt, content=text, visibility_timeout=max(0, visible_in), **o
            ),
            refusal=_message_gone,
        )
        if isinstance(raw, Refused):
            return None
        announce_put(queue, visible_in)
        return QueueMessage(
            message.id,
            raw.pop_receipt or message.pop_receipt,
            message.content if content is None else content,
            message.dequeue_count,
            message.inserted,
            message.expires,
            raw.next_visible_on,
        )

    async def approximate_count(self, queue: str) -> int:
        props = await self._call("queue.count", lambda o: self._client(queue).get_queue_properties(**o))
        return 0 if isinstance(props, Refused) else int(props.approximate_message_count or 0)

    async def any_visible(self, queue: str) -> bool:
        peeked = await self._call("queue.peek", lambda o: self._client(queue).peek_messages(max_messages=1, **o))
        return not isinstance(peeked, Refused) and len(peeked) > 0

    async def process_url(self, queue: str, expires: dt.datetime) -> str:
        return await self._signer.process_url(queue, expires)

    async def close(self) -> None:
        await self._clients.close()
        await self._signer.close()
