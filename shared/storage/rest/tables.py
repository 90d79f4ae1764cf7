"""Tables over the storage REST API: Shared Key Lite signed requests, minimal-metadata JSON, batch transactions
as multipart bodies, on one keep-alive session (shared/storage/rest/http.py)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import urllib.parse
import uuid
from typing import Any

from multidict import CIMultiDict

from shared.connections import StorageConnection
from shared.storage.base import Entity, Op, Page, all_at_once, transaction_is_empty
from shared.storage.keys import decode_continuation, encode_continuation
from shared.storage.lost_responses import transaction_applied, written_by_us
from shared.storage.rest.http import CONDITION_FAILED, Account, Answer, Http, StorageError, http_date
from shared.storage.retry import RetryPolicy

TABLE_VERSION = "2019-02-02"
JSON_MINIMAL = "application/json;odata=minimalmetadata"
INT32 = 2**31


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
    def __init__(self, connection: str | StorageConnection, policy: RetryPolicy | None = None) -> None:
        connection = StorageConnection(connection_string=connection) if isinstance(connection, str) else connection
        self._account = Account(connection, "table")
        self._http = Http(policy=policy)

    async def _request(
        self,
        method: str,
        path: str,
        operation: str,
        *,
        query: dict[str, str] | None = None,
        body: str | bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """`path` is already URL-encoded, relative to the account (`Tasks(PartitionKey='a',RowKey='b')`)."""
        account = self._account
        full_path = f"{account.base_path}/{path}"
        date = http_date()
        sent = {
            "x-ms-date": date,
            "x-ms-version": TABLE_VERSION,
            "DataServiceVersion": "3.0",
            "MaxDataServiceVersion": "3.0;NetFx",
            "Accept": JSON_MINIMAL,
            **(headers or {}),
        }
        if account.key is not None:
            signature = account.sign(date + "\n" + f"/{account.account}{full_path}")
            sent["Authorization"] = f"SharedKeyLite {account.account}:{signature}"
        else:
            sent["Authorization"] = await account.bearer()
        return await self._http.send(
            method,
            account.url(full_path, query),
            name=path.split("(", 1)[0],
            data=body,
            headers=sent,
            operation=operation,
        )

    @staticmethod
    def _fail(method: str, path: str, status: int, headers: CIMultiDict[str], payload: bytes) -> StorageError:
        return StorageError(method, path, status, headers.get("x-ms-error-code"), payload.decode(errors="replace"))

    async def ensure_tables(self, names: list[str]) -> None:
        async def create(name: str) -> None:
            status, headers, payload, _ = await self._request(
                "POST",
                "Tables",
                "table.create",
                body=json.dumps({"TableName": name}),
                headers={"Content-Type": "application/json", "Prefer": "return-no-content"},
            )
            if status not in (201, 204, 409):
                raise self._fail("POST", "Tables", status, headers, payload)

        await all_at_once(create(name) for name in names)

    @staticmethod
    def _entity_path(table: str, partition_key: str, row_key: str) -> str:
        return f"{table}(PartitionKey='{_key_literal(partition_key)}',RowKey='{_key_literal(row_key)}')"

    async def get(self, table: str, partition_key: str, row_key: str) -> Entity | None:
        path = self._entity_path(table, partition_key, row_key)
        status, headers, payload, _ = await self._request("GET", path, "table.get")
        if status == 404:
            return None
        if status != 200:
            raise self._fail("GET", path, status, headers, payload)
        data, etag = _from_odata(json.loads(payload))
        return Entity(partition_key, row_key, data, headers.get("ETag") or etag)

    async def _write(
        self, method: str, table: str, entity: Entity, if_match: str | None, answers: tuple[int, ...], operation: str
    ) -> Entity | None:
        path = table if method == "POST" else self._entity_path(table, entity.partition_key, entity.row_key)
        headers = {"Content-Type": "application/json", "Prefer": "return-no-content"}
        if if_match is not None:
            headers["If-Match"] = if_match
        status, response_headers, payload, ambiguous = await self._request(
            method, path, operation, body=_entity_json(entity), headers=headers
        )
        if status in (201, 204):
            return entity.with_etag(response_headers.get("ETag"))
        if status in answers:
            # After a lost answer, the refusal may be of our own first attempt (shared/storage/lost_responses.py).
            return await written_by_us(self.get, table, entity) if ambiguous else None
        raise self._fail(method, path, status, response_headers, payload)

    async def insert(self, table: str, entity: Entity) -> Entity | None:
        return await self._write("POST", table, entity, None, (409,), "table.insert")

    async def replace(self, table: str, entity: Entity) -> Entity | None:
        return await self._write("PUT", table, entity, entity.etag or "*", (404, 412), "table.replace")

    async def upsert(self, table: str, entity: Entity) -> Entity:
        written = await self._write("PUT", table, entity, None, (), "table.upsert")
        assert written is not None
        return written

    async def delete(self, table: str, partition_key: str, row_key: str, etag: str | None = None) -> bool:
        path = self._entity_path(table, partition_key, row_key)
        status, headers, payload, ambiguous = await self._request(
            "DELETE", path, "table.delete", headers={"If-Match": etag or "*"}
        )
        if status == 204:
            return True
        if status == 404:
            return etag == "*" or ambiguous  # unconditional: gone is as good as deleted; ambiguous: we deleted it
        if status == 412:
            return False
        raise self._fail("DELETE", path, status, headers, payload)

    async def query(
        self,
        table: str,
        filter: str,
        parameters: dict[str, Any],
        *,
        limit: int | None = None,
        continuation: str | None = None,
    ) -> Page:
        query = {"$filter": _substitute(filter, parameters), "$top": str(min(limit or 1000, 1000))}
        if continuation:
            next_pk, next_rk = decode_continuation(continuation)
            query["NextPartitionKey"] = next_pk
            if next_rk:
                query["NextRowKey"] = next_rk
        path = f"{table}()"
        status, headers, payload, _ = await self._request("GET", path, "table.query", query=query)
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
        parts = [self._batch_part(table, op) for op in ops]
        body = (
            f"--{batch}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n"
            + "".join(f"--{changeset}\r\n{part}\r\n" for part in parts)
            + f"--{changeset}--\r\n--{batch}--\r\n"
        )
        status, headers, payload, ambiguous = await self._request(
            "POST",
            "$batch",
            "table.batch",
            body=body.encode(),
            headers={"Content-Type": f"multipart/mixed; boundary={batch}"},
        )
        if status != 202:
            raise self._fail("POST", "$batch", status, headers, payload)
        text = payload.decode(errors="replace")
        statuses, etags = _batch_answers(text)
        failed = [s for s in statuses if s >= 400]
        if not failed:
            return etags
        if failed[0] in CONDITION_FAILED:
            return await transaction_applied(self.get, table, ops) if ambiguous else None
        raise StorageError("POST", f"$batch ({table})", failed[0], None, text)

    def _batch_part(self, table: str, op: Op) -> str:
        """One operation of a transaction, as the batch's changeset carries it."""
        base, entity = self._account.endpoint, op.entity
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
        return "\r\n".join(lines)

    async def close(self) -> None:
        await self._http.close()


def _batch_answers(text: str) -> tuple[list[int], list[str | None]]:
    """Each operation's status and ETag in a batch's answer: its status line, then its headers."""
    statuses: list[int] = []
    etags: list[str | None] = []
    for line in text.splitlines():
        if line.startswith("HTTP/1.1 "):
            statuses.append(int(line.split()[1]))
            etags.append(None)
        elif etags and line[:5].lower() == "etag:":
            etags[-1] = line[5:].strip()
    return statuses, etags
