"""Queues over the storage REST API: Shared Key signed requests, XML bodies, on one keep-alive session
(shared/storage/rest/http.py)."""

from __future__ import annotations

import datetime as dt
import urllib.parse
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

from multidict import CIMultiDict

from shared.connections import StorageConnection
from shared.storage.azure import QueueSigner
from shared.storage.base import (
    QueueMessage,
    Received,
    all_at_once,
    announce_put,
    decode_message,
    encode_message,
)
from shared.storage.rest.http import Account, Answer, Http, StorageError, http_date, rfc1123
from shared.storage.retry import RetryPolicy, new_request_id

QUEUE_VERSION = "2021-12-02"
MAX_VISIBILITY = 7 * 24 * 3600


class RestQueues:
    def __init__(
        self, connection: str | StorageConnection, *, traced: bool = True, policy: RetryPolicy | None = None
    ) -> None:
        connection = StorageConnection(connection_string=connection) if isinstance(connection, str) else connection
        self._account = Account(connection, "queue")
        self._http = Http(traced, policy)
        self._connection = connection
        self._signer = QueueSigner(connection)  # polling URLs: the SDK's signing, with the same key or identity

    async def _request(
        self, method: str, path: str, operation: str, query: dict[str, str] | None = None, *, body: bytes = b""
    ) -> Answer:
        account = self._account
        full_path = f"{account.base_path}/{path}"
        date, request_id = http_date(), new_request_id()
        headers = {"x-ms-client-request-id": request_id, "x-ms-date": date, "x-ms-version": QUEUE_VERSION}
        if body:
            headers["Content-Type"] = "application/xml"
        if account.key is not None:  # Shared Key signs every x-ms- header, the request id too
            canonical_headers = f"x-ms-client-request-id:{request_id}\nx-ms-date:{date}\nx-ms-version:{QUEUE_VERSION}\n"
            resource = f"/{account.account}{full_path}" + "".join(
                f"\n{name.lower()}:{value}" for name, value in sorted((query or {}).items())
            )
            to_sign = (
                "\n".join(
                    [
                        method,
                        "",
                        "",
                        str(len(body)) if body else "",
                        "",
                        headers.get("Content-Type", ""),
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                    ]
                )
                + "\n"
            )
            headers["Authorization"] = (
                f"SharedKey {account.account}:{account.sign(to_sign + canonical_headers + resource)}"
            )
        else:
            headers["Authorization"] = await account.bearer()
        return await self._http.send(
            method,
            account.url(full_path, query),
            name=path.split("/", 1)[0],
            data=body or None,
            headers=headers,
            operation=operation,
            request_id=request_id,
        )

    async def ensure_queues(self, names: list[str]) -> None:
        async def create(name: str) -> None:
            status, headers, payload, _ = await self._request("PUT", name, "queue.create")
            if status not in (201, 204, 409):
                raise StorageError("PUT", name, status, headers.get("x-ms-error-code"), payload.decode())

        await all_at_once(create(name) for name in names)

    async def put(self, queue: str, content: bytes, *, visible_in: int = 0, ttl: int | None = None) -> QueueMessage:
        visible_in = max(0, min(visible_in, MAX_VISIBILITY))
        time_to_live = ttl if ttl is not None else -1
        if ttl is not None and ttl <= visible_in:
            time_to_live = visible_in + 60
        query = {"messagettl": str(time_to_live)}
        if visible_in:
            query["visibilitytimeout"] = str(visible_in)
        body = (
            f"<?xml version='1.0' encoding='utf-8'?><QueueMessage><MessageText>"
            f"{escape(encode_message(content))}</MessageText></QueueMessage>"
        ).encode()
        # A put whose answer was lost and that is then retried leaves two messages: hints, handled idempotently.
        status, headers, payload, _ = await self._request("POST", f"{queue}/messages", "queue.put", query, body=body)
        if status == 404:
            # Queues are created on first use (pending queues exist per task queue and priority).
            await self.ensure_queues([queue])
            status, headers, payload, _ = await self._request(
                "POST", f"{queue}/messages", "queue.put", query, body=body
            )
        if status != 201:
            raise StorageError("POST", f"{queue}/messages", status, headers.get("x-ms-error-code"), payload.decode())
        [sent] = self._messages(payload, content)
        announce_put(queue, visible_in)
        return sent

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> Received:
        query = {
            "numofmessages": str(max(1, min(max_messages, 32))),
            "visibilitytimeout": str(max(1, visibility_timeout)),
        }  # Azure's minimum is 1 s
        status, headers, payload, lost = await self._request("GET", f"{queue}/messages", "queue.receive", query)
        if status == 404:
            return Received(lost=lost)
        if status != 200:
            raise StorageError("GET", f"{queue}/messages", status, headers.get("x-ms-error-code"), payload.decode())
        return Received(self._messages(payload), lost=lost)

    @staticmethod
    def _messages(payload: bytes, content: bytes | None = None) -> list[QueueMessage]:
        """The messages of a QueueMessagesList (a put's answer has no MessageText: `content` is what was sent)."""
        messages = []
        for node in ET.fromstring(payload):

            def text(tag: str, node: ET.Element = node) -> str:
                return node.findtext(tag) or ""

            messages.append(
                QueueMessage(
                    id=text("MessageId"),
                    pop_receipt=text("PopReceipt"),
                    content=content if content is not None else decode_message(text("MessageText")),
                    dequeue_count=int(text("DequeueCount") or 0),
                    inserted=rfc1123(text("InsertionTime")) or dt.datetime.now(dt.UTC),
                    expires=rfc1123(text("ExpirationTime")),
                    next_visible=rfc1123(text("TimeNextVisible")),
                )
            )
        return messages

    @staticmethod
    def _gone(status: int, headers: CIMultiDict[str]) -> bool:
        """Deleted already, or received again by someone else since: not ours any more."""
        return status == 404 or headers.get("x-ms-error-code") in ("MessageNotFound", "PopReceiptMismatch")

    async def delete(self, queue: str, message: QueueMessage) -> None:
        path = f"{queue}/messages/{urllib.parse.quote(message.id, safe='')}"
        status, headers, payload, _ = await self._request(
            "DELETE", path, "queue.delete", {"popreceipt": message.pop_receipt}
        )
        if status != 204 and not self._gone(status, headers):
            raise StorageError("DELETE", path, status, headers.get("x-ms-error-code"), payload.decode())

    async def release(
        self, queue: str, message: QueueMessage, visible_in: int, *, content: bytes | None = None
    ) -> QueueMessage | None:
        path = f"{queue}/messages/{urllib.parse.quote(message.id, safe='')}"
        body = (
            b""
            if content is None
            else (
                f"<?xml version='1.0' encoding='utf-8'?><QueueMessage><MessageText>"
                f"{escape(encode_message(content))}</MessageText></QueueMessage>"
            ).encode()
        )
        status, headers, payload, _ = await self._request(
            "PUT",
            path,
            "queue.update",
            {"popreceipt": message.pop_receipt, "visibilitytimeout": str(max(0, visible_in))},
            body=body,
        )
        if status == 204:
            announce_put(queue, visible_in)
            return QueueMessage(
                message.id,
                headers.get("x-ms-popreceipt") or message.pop_receipt,
                message.content if content is None else content,
                message.dequeue_count,
                message.inserted,
                message.expires,
                rfc1123(headers.get("x-ms-time-next-visible")),
            )
        if self._gone(status, headers):
            return None
        raise StorageError("PUT", path, status, headers.get("x-ms-error-code"), payload.decode())

    async def approximate_count(self, queue: str) -> int:
        status, headers, payload, _ = await self._request("GET", queue, "queue.count", {"comp": "metadata"})
        if status == 404:
            return 0
        if status != 200:
            raise StorageError("GET", queue, status, headers.get("x-ms-error-code"), payload.decode())
        return int(headers.get("x-ms-approximate-messages-count") or 0)

    async def any_visible(self, queue: str) -> bool:
        query = {"peekonly": "true", "numofmessages": "1"}
        status, headers, payload, _ = await self._request("GET", f"{queue}/messages", "queue.peek", query)
        if status == 404:
            return False
        if status != 200:
            raise StorageError("GET", f"{queue}/messages", status, headers.get("x-ms-error-code"), payload.decode())
        return len(ET.fromstring(payload)) > 0

    async def process_url(self, queue: str, expires: dt.datetime) -> str:
        return await self._signer.process_url(queue, expires)

    async def close(self) -> None:
        await self._http.close()
        await self._signer.close()
