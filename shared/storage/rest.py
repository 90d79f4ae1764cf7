"""Table and queue stores over the storage REST API directly (aiohttp, one keep-alive session), without the SDK.

Why: on the 2-core machines this runs on, the SDK's pipeline costs about 2 ms of CPU per call (policies,
tracing decorators, and for table transactions the `email` package building and parsing multipart bodies),
against about 0.3 ms for a signed HTTP request (DESIGN.md; docs/performance.md has the lifecycle figures). The
semantics are those of `shared/storage/azure.py`, which stays as the reference implementation
(`QUEUE_STORAGE_CLIENT=sdk`); the integration tests run both against Azurite.

Authentication: Shared Key (SharedKeyLite for tables, SharedKey for queues) with a connection string's account
key, or a bearer token from the managed identity (`shared/connections.py`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import email.utils
import hashlib
import hmac
import json
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from typing import Any
from xml.sax.saxutils import escape

import aiohttp
from multidict import CIMultiDict
from opentelemetry import trace
from yarl import URL

from shared.connections import STORAGE_SCOPE, Service, StorageConnection, async_credential
from shared.storage.azure import queue_process_url
from shared.storage.base import (
    Entity,
    Op,
    Page,
    QueueMessage,
    announce_put,
    decode_continuation,
    decode_message,
    encode_continuation,
    encode_message,
    transaction_is_empty,
)

TABLE_VERSION = "2019-02-02"
QUEUE_VERSION = "2021-12-02"
JSON_MINIMAL = "application/json;odata=minimalmetadata"
MAX_VISIBILITY = 7 * 24 * 3600
INT32 = 2 ** 31
CONDITION_FAILED = (404, 409, 412)  # absent, exists, changed: answers, not errors


class StorageError(Exception):
    """A storage request failed in a way the caller does not expect as an answer."""

    def __init__(self, method: str, url: str, status: int, code: str | None, body: str) -> None:
        super().__init__(f"{method} {url} -> {status} {code or ''}: {body[:300]}")
        self.status, self.code = status, code


def _parse_connection_string(text: str) -> dict[str, str]:
    parts = (item.split("=", 1) for item in text.split(";") if "=" in item)
    return {key.strip(): value.strip() for key, value in parts}


class _Account:
    """Endpoint and credentials of one service of an account; signs requests."""

    def __init__(self, connection: StorageConnection, service: Service) -> None:
        self.key: bytes | None = None
        self._credential: Any = None
        self._token: tuple[str, float] | None = None
        self._token_lock = asyncio.Lock()
        if connection.connection_string is not None:
            values = _parse_connection_string(connection.connection_string)
            if "AccountName" not in values:
                raise ValueError("the REST client needs a connection string with AccountName and AccountKey; "
                                 "use QUEUE_STORAGE_CLIENT=sdk for other forms")
            self.account = values["AccountName"]
            endpoint = values.get(f"{service.capitalize()}Endpoint")
            if not endpoint:
                protocol = values.get("DefaultEndpointsProtocol", "https")
                suffix = values.get("EndpointSuffix", "core.windows.net")
                endpoint = f"{protocol}://{self.account}.{service}.{suffix}"
            self.endpoint = endpoint.rstrip("/")
            if values.get("AccountKey"):
                self.key = base64.b64decode(values["AccountKey"])
            elif values.get("SharedAccessSignature"):
                raise ValueError("a connection string with a SharedAccessSignature is not supported by the REST "
                                 "client; use QUEUE_STORAGE_CLIENT=sdk")
        else:
            self.endpoint = connection.endpoint(service)
            self.account = connection.account_name(service)
            self._credential = async_credential(connection.client_id)
        self.base_path = urllib.parse.urlsplit(self.endpoint).path.rstrip("/")  # "/devstoreaccount1" on Azurite

    def url(self, full_path: str, query: dict[str, str] | None) -> str:
        """The request URL of an already encoded path (`base_path` included), with its query."""
        url = self.endpoint[: len(self.endpoint) - len(self.base_path)] + full_path
        return f"{url}?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}" if query else url

    def sign(self, string_to_sign: str) -> str:
        assert self.key is not None
        return base64.b64encode(hmac.new(self.key, string_to_sign.encode(), hashlib.sha256).digest()).decode()

    async def bearer(self) -> str:
        now = time.time()
        if self._token is None or self._token[1] - 300 < now:
            async with self._token_lock:
                if self._token is None or self._token[1] - 300 < now:
                    token = await self._credential.get_token(STORAGE_SCOPE)
                    self._token = (token.token, float(token.expires_on))
        return f"Bearer {self._token[0]}"


KEEPALIVE_SECONDS = 4.0


class _Http:
    """One aiohttp session per store, made inside the running event loop on first use; a client span per request
    (a dependency in Application Insights) when `traced` and telemetry is configured (a no-op otherwise)."""

    def __init__(self, traced: bool = True) -> None:
        self._session: aiohttp.ClientSession | None = None
        self.tracer = trace.get_tracer("queue.storage") if traced else None

    async def send(self, method: str, url: str, *, name: str, data: bytes | str | None,
                   headers: dict[str, str]) -> tuple[int, CIMultiDict[str], bytes]:
        target = URL(url, encoded=True)
        # Without a configured tracer provider a span is a no-op that still costs ~5 % of a request's CPU.
        if self.tracer is None or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            async with self.session.request(method, target, data=data, headers=headers) as response:
                return response.status, CIMultiDict(response.headers), await response.read()
        with self.tracer.start_as_current_span(f"{method} {name}", kind=trace.SpanKind.CLIENT, attributes={
                "http.method": method, "http.url": url.split("?", 1)[0], "net.peer.name": target.host or "",
                "net.peer.port": target.port or 0}) as span:
            async with self.session.request(method, target, data=data, headers=headers) as response:
                span.set_attribute("http.status_code", response.status)
                return response.status, CIMultiDict(response.headers), await response.read()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # trust_env=False: reading proxy settings on every request costs CPU (DESIGN.md). Idle connections
            # are dropped after 4 s, before Azurite's server closes them (5 s): a request sent on a connection
            # the server is closing fails with "connection reset" (seen under the benchmark).
            connector = aiohttp.TCPConnector(limit=200, keepalive_timeout=KEEPALIVE_SECONDS)
            self._session = aiohttp.ClientSession(trust_env=False, connector=connector,
                                                  skip_auto_headers=("User-Agent", "Content-Type"))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


_date_second, _date_text = 0, ""  # the HTTP date of the current second: formatted once a second, not per request


def _http_date() -> str:
    global _date_second, _date_text
    second = int(time.time())
    if second != _date_second:
        _date_second, _date_text = second, email.utils.formatdate(second, usegmt=True)
    return _date_text


# --- Tables ---------------------------------------------------------------------------------------------------

def _odata_value(value: Any) -> tuple[Any, str | None]:
    """A property value as JSON and its Edm type annotation when JSON alone would lose it."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value, None
    if isinstance(value, int):
        return (value, None) if -INT32 <= value < INT32 else (str(value), "Edm.Int64")
    if isinstance(value, float):
        return value, "Edm.Double"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "Edm.DateTime"
    if isinstance(value, bytes):
        return base64.b64encode(value).decode(), "Edm.Binary"
    raise TypeError(f"unsupported table property type {type(value).__name__}")


def _entity_json(entity: Entity) -> str:
    body: dict[str, Any] = {"PartitionKey": entity.partition_key, "RowKey": entity.row_key}
    for name, raw in entity.data.items():
        if raw is None:
            continue  # as the SDK: a None property is not stored
        value, edm = _odata_value(raw)
        body[name] = value
        if edm:
            body[f"{name}@odata.type"] = edm
    return json.dumps(body, separators=(",", ":"))


def _from_odata(raw: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Properties (typed as the SDK types them) and the ETag of an entity in minimal-metadata JSON."""
    data: dict[str, Any] = {}
    for name, value in raw.items():
        if "@odata." in name or name.startswith("odata.") or name in ("PartitionKey", "RowKey", "Timestamp"):
            continue
        edm = raw.get(f"{name}@odata.type")
        if edm == "Edm.Int64":
            value = int(value)
        elif edm == "Edm.Double":
            value = float(value)
        elif edm == "Edm.DateTime":
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        elif edm == "Edm.Binary":
            value = base64.b64decode(value)
        data[name] = value
    etag = raw.get("odata.etag")
    return data, etag


def _key_literal(value: str) -> str:
    return urllib.parse.quote(value.replace("'", "''"), safe="")


def _substitute(filter: str, parameters: dict[str, Any]) -> str:
    """The filter with `@name` replaced by OData literals (as the SDK's `parameters` does)."""
    def literal(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return f"{value}L" if not -INT32 <= value < INT32 else str(value)
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, dt.datetime):
            return f"datetime'{value.astimezone(dt.UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}'"
        return "'" + str(value).replace("'", "''") + "'"
    # Longest names first, so `@pk` does not eat the start of `@pkey`.
    for name in sorted(parameters, key=len, reverse=True):
        filter = filter.replace(f"@{name}", literal(parameters[name]))
    return filter


class RestTables:
    def __init__(self, connection: str | StorageConnection) -> None:
        connection = StorageConnection(connection_string=connection) if isinstance(connection, str) else connection
        self._account = _Account(connection, "table")
        self._http = _Http()

    async def _request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                       body: str | bytes | None = None, headers: dict[str, str] | None = None
                       ) -> tuple[int, CIMultiDict[str], bytes]:
        """`path` is already URL-encoded, relative to the account (`Tasks(PartitionKey='a',RowKey='b')`)."""
        account = self._account
        full_path = f"{account.base_path}/{path}"
        date = _http_date()
        sent = {"x-ms-date": date, "x-ms-version": TABLE_VERSION, "DataServiceVersion": "3.0",
                "MaxDataServiceVersion": "3.0;NetFx", "Accept": JSON_MINIMAL, **(headers or {})}
        if account.key is not None:
            signature = account.sign(date + "\n" + f"/{account.account}{full_path}")
            sent["Authorization"] = f"SharedKeyLite {account.account}:{signature}"
        else:
            sent["Authorization"] = await account.bearer()
        return await self._http.send(method, account.url(full_path, query), name=path.split("(", 1)[0], data=body,
                                     headers=sent)

    @staticmethod
    def _fail(method: str, path: str, status: int, headers: CIMultiDict[str], payload: bytes) -> StorageError:
        return StorageError(method, path, status, headers.get("x-ms-error-code"), payload.decode(errors="replace"))

    async def ensure_tables(self, names: list[str]) -> None:
        for name in names:
            status, headers, payload = await self._request(
                "POST", "Tables", body=json.dumps({"TableName": name}),
                headers={"Content-Type": "application/json", "Prefer": "return-no-content"})
            if status not in (201, 204, 409):
                raise self._fail("POST", "Tables", status, headers, payload)

    @staticmethod
    def _entity_path(table: str, partition_key: str, row_key: str) -> str:
        return f"{table}(PartitionKey='{_key_literal(partition_key)}',RowKey='{_key_literal(row_key)}')"

    async def get(self, table: str, partition_key: str, row_key: str) -> Entity | None:
        path = self._entity_path(table, partition_key, row_key)
        status, headers, payload = await self._request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise self._fail("GET", path, status, headers, payload)
        data, etag = _from_odata(json.loads(payload))
        return Entity(partition_key, row_key, data, headers.get("ETag") or etag)

    async def _write(self, method: str, table: str, entity: Entity, if_match: str | None,
                     answers: tuple[int, ...]) -> Entity | None:
        path = table if method == "POST" else self._entity_path(table, entity.partition_key, entity.row_key)
        headers = {"Content-Type": "application/json", "Prefer": "return-no-content"}
        if if_match is not None:
            headers["If-Match"] = if_match
        status, response_headers, payload = await self._request(method, path, body=_entity_json(entity),
                                                                headers=headers)
        if status in (201, 204):
            return entity.with_etag(response_headers.get("ETag"))
        if status in answers:
            return None
        raise self._fail(method, path, status, response_headers, payload)

    async def insert(self, table: str, entity: Entity) -> Entity | None:
        return await self._write("POST", table, entity, None, (409,))

    async def replace(self, table: str, entity: Entity) -> Entity | None:
        return await self._write("PUT", table, entity, entity.etag or "*", (404, 412))

    async def upsert(self, table: str, entity: Entity) -> Entity:
        written = await self._write("PUT", table, entity, None, ())
        assert written is not None
        return written

    async def delete(self, table: str, partition_key: str, row_key: str, etag: str | None = None) -> bool:
        path = self._entity_path(table, partition_key, row_key)
        status, headers, payload = await self._request("DELETE", path, headers={"If-Match": etag or "*"})
        if status == 204:
            return True
        if status == 404:
            return etag == "*"  # unconditional: gone is as good as deleted
        if status == 412:
            return False
        raise self._fail("DELETE", path, status, headers, payload)

    async def query(self, table: str, filter: str, parameters: dict[str, Any], *, limit: int | None = None,
                    continuation: str | None = None) -> Page:
        query = {"$filter": _substitute(filter, parameters), "$top": str(min(limit or 1000, 1000))}
        if continuation:
            next_pk, next_rk = decode_continuation(continuation)
            query["NextPartitionKey"] = next_pk
            if next_rk:
                query["NextRowKey"] = next_rk
        path = f"{table}()"
        status, headers, payload = await self._request("GET", path, query=query)
        if status != 200:
            raise self._fail("GET", path, status, headers, payload)
        entities = []
        for raw in json.loads(payload).get("value", []):
            data, etag = _from_odata(raw)
            entities.append(Entity(raw["PartitionKey"], raw["RowKey"], data, etag))
        after = headers.get("x-ms-continuation-NextPartitionKey")
        next_token = encode_continuation(after, headers.get("x-ms-continuation-NextRowKey")) if after else None
        return Page(entities, next_token)

    async def transact(self, table: str, ops: list[Op]) -> bool:
        return await self.commit(table, ops) is not None

    async def commit(self, table: str, ops: list[Op]) -> list[str | None] | None:
        if transaction_is_empty(ops):
            return []
        batch, changeset = f"batch_{uuid.uuid4()}", f"changeset_{uuid.uuid4()}"
        base = self._account.endpoint
        parts = []
        for op in ops:
            entity = op.entity
            target = f"{base}/{self._entity_path(table, entity.partition_key, entity.row_key)}"
            lines = ["Content-Type: application/http", "Content-Transfer-Encoding: binary", ""]
            if op.kind == "insert":
                lines += [f"POST {base}/{table} HTTP/1.1"]
            elif op.kind == "upsert":
                lines += [f"PUT {target} HTTP/1.1"]
            elif op.kind in ("replace", "merge", "delete"):
                method = {"replace": "PUT", "merge": "MERGE", "delete": "DELETE"}[op.kind]
                lines += [f"{method} {target} HTTP/1.1", f"If-Match: {entity.etag or '*'}"]
            else:
                raise ValueError(f"unknown operation {op.kind}")
            lines += [f"Accept: {JSON_MINIMAL}", "DataServiceVersion: 3.0"]
            if op.kind == "delete":
                lines += ["", ""]
            else:
                lines += ["Content-Type: application/json", "Prefer: return-no-content", "", _entity_json(entity)]
            parts.append("\r\n".join(lines))
        body = (f"--{batch}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n"
                + "".join(f"--{changeset}\r\n{part}\r\n" for part in parts)
                + f"--{changeset}--\r\n--{batch}--\r\n")
        status, headers, payload = await self._request(
            "POST", "$batch", body=body.encode(),
            headers={"Content-Type": f"multipart/mixed; boundary={batch}"})
        if status != 202:
            raise self._fail("POST", "$batch", status, headers, payload)
        text = payload.decode(errors="replace")
        statuses: list[int] = []
        etags: list[str | None] = []  # each operation's response: its status line, then its headers
        for line in text.splitlines():
            if line.startswith("HTTP/1.1 "):
                statuses.append(int(line.split()[1]))
                etags.append(None)
            elif etags and line[:5].lower() == "etag:":
                etags[-1] = line[5:].strip()
        failed = [s for s in statuses if s >= 400]
        if not failed:
            return etags
        if failed[0] in CONDITION_FAILED:
            return None
        raise StorageError("POST", f"$batch ({table})", failed[0], None, text)

    async def close(self) -> None:
        await self._http.close()


# --- Queues ---------------------------------------------------------------------------------------------------

_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}


def _rfc1123(text: str | None) -> dt.datetime | None:
    """An HTTP date as storage writes it (`Mon, 23 Nov 2026 02:00:08 GMT`), by position: email.utils' parser
    was 2 % of the host's CPU in a fan-out (three dates per put). Any other form goes to that parser."""
    if not text:
        return None
    if len(text) == 29 and text[3:5] == ", " and text[25:] == " GMT" and text[8:11] in _MONTHS:
        with contextlib.suppress(ValueError):
            return dt.datetime(int(text[12:16]), _MONTHS[text[8:11]], int(text[5:7]), int(text[17:19]),
                               int(text[20:22]), int(text[23:25]), tzinfo=dt.UTC)
    return email.utils.parsedate_to_datetime(text)


class RestQueues:
    def __init__(self, connection: str | StorageConnection, *, traced: bool = True) -> None:
        connection = StorageConnection(connection_string=connection) if isinstance(connection, str) else connection
        self._account = _Account(connection, "queue")
        self._http = _Http(traced)
        self._connection = connection

    async def _request(self, method: str, path: str, query: dict[str, str] | None = None, *,
                       body: bytes = b"") -> tuple[int, CIMultiDict[str], bytes]:
        account = self._account
        full_path = f"{account.base_path}/{path}"
        date = _http_date()
        headers = {"x-ms-date": date, "x-ms-version": QUEUE_VERSION}
        if body:
            headers["Content-Type"] = "application/xml"
        if account.key is not None:
            canonical_headers = f"x-ms-date:{date}\nx-ms-version:{QUEUE_VERSION}\n"
            resource = f"/{account.account}{full_path}" + "".join(
                f"\n{name.lower()}:{value}" for name, value in sorted((query or {}).items()))
            to_sign = "\n".join([method, "", "", str(len(body)) if body else "", "",
                                 headers.get("Content-Type", ""), "", "", "", "", "", ""]) + "\n"
            headers["Authorization"] = (f"SharedKey {account.account}:"
                                        f"{account.sign(to_sign + canonical_headers + resource)}")
        else:
            headers["Authorization"] = await account.bearer()
        return await self._http.send(method, account.url(full_path, query), name=path.split("/", 1)[0],
                                     data=body or None, headers=headers)

    async def ensure_queues(self, names: list[str]) -> None:
        for name in names:
            status, headers, payload = await self._request("PUT", name)
            if status not in (201, 204, 409):
                raise StorageError("PUT", name, status, headers.get("x-ms-error-code"), payload.decode())

    async def put(self, queue: str, content: bytes, *, visible_in: int = 0, ttl: int | None = None) -> QueueMessage:
        visible_in = max(0, min(visible_in, MAX_VISIBILITY))
        time_to_live = ttl if ttl is not None else -1
        if ttl is not None and ttl <= visible_in:
            time_to_live = visible_in + 60
        query = {"messagettl": str(time_to_live)}
        if visible_in:
            query["visibilitytimeout"] = str(visible_in)
        body = (f"<?xml version='1.0' encoding='utf-8'?><QueueMessage><MessageText>"
                f"{escape(encode_message(content))}</MessageText></QueueMessage>").encode()
        status, headers, payload = await self._request("POST", f"{queue}/messages", query, body=body)
        if status == 404:
            # Queues are created on first use (pending queues exist per task queue and priority).
            await self.ensure_queues([queue])
            status, headers, payload = await self._request("POST", f"{queue}/messages", query, body=body)
        if status != 201:
            raise StorageError("POST", f"{queue}/messages", status, headers.get("x-ms-error-code"),
                               payload.decode())
        [sent] = self._messages(payload, content)
        announce_put(queue, visible_in)
        return sent

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> list[QueueMessage]:
        query = {"numofmessages": str(max(1, min(max_messages, 32))),
                 "visibilitytimeout": str(max(1, visibility_timeout))}  # Azure's minimum is 1 s
        status, headers, payload = await self._request("GET", f"{queue}/messages", query)
        if status == 404:
            return []
        if status != 200:
            raise StorageError("GET", f"{queue}/messages", status, headers.get("x-ms-error-code"), payload.decode())
        return self._messages(payload)

    @staticmethod
    def _messages(payload: bytes, content: bytes | None = None) -> list[QueueMessage]:
        """The messages of a QueueMessagesList (a put's answer has no MessageText: `content` is what was sent)."""
        messages = []
        for node in ET.fromstring(payload):
            def text(tag: str, node: ET.Element = node) -> str:
                return node.findtext(tag) or ""
            messages.append(QueueMessage(
                id=text("MessageId"), pop_receipt=text("PopReceipt"),
                content=content if content is not None else decode_message(text("MessageText")),
                dequeue_count=int(text("DequeueCount") or 0),
                inserted=_rfc1123(text("InsertionTime")) or dt.datetime.now(dt.UTC),
                expires=_rfc1123(text("ExpirationTime")), next_visible=_rfc1123(text("TimeNextVisible"))))
        return messages

    @staticmethod
    def _gone(status: int, headers: CIMultiDict[str]) -> bool:
        """Deleted already, or received again by someone else since: not ours any more."""
        return status == 404 or headers.get("x-ms-error-code") in ("MessageNotFound", "PopReceiptMismatch")

    async def delete(self, queue: str, message: QueueMessage) -> None:
        path = f"{queue}/messages/{urllib.parse.quote(message.id, safe='')}"
        status, headers, payload = await self._request("DELETE", path, {"popreceipt": message.pop_receipt})
        if status != 204 and not self._gone(status, headers):
            raise StorageError("DELETE", path, status, headers.get("x-ms-error-code"), payload.decode())

    async def release(self, queue: str, message: QueueMessage, visible_in: int) -> QueueMessage | None:
        path = f"{queue}/messages/{urllib.parse.quote(message.id, safe='')}"
        status, headers, payload = await self._request(
            "PUT", path, {"popreceipt": message.pop_receipt, "visibilitytimeout": str(max(0, visible_in))})
        if status == 204:
            return QueueMessage(message.id, headers.get("x-ms-popreceipt") or message.pop_receipt, message.content,
                                message.dequeue_count, message.inserted, message.expires,
                                _rfc1123(headers.get("x-ms-time-next-visible")))
        if self._gone(status, headers):
            return None
        raise StorageError("PUT", path, status, headers.get("x-ms-error-code"), payload.decode())

    async def approximate_count(self, queue: str) -> int:
        status, headers, payload = await self._request("GET", queue, {"comp": "metadata"})
        if status == 404:
            return 0
        if status != 200:
            raise StorageError("GET", queue, status, headers.get("x-ms-error-code"), payload.decode())
        return int(headers.get("x-ms-approximate-messages-count") or 0)

    def process_url(self, queue: str, expires: dt.datetime) -> str:
        account = self._account
        key = base64.b64encode(account.key).decode() if account.key else self._connection.account_key
        return queue_process_url(account.account, key, account.endpoint, queue, expires)

    async def close(self) -> None:
        await self._http.close()
