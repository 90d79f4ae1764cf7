"""Tables over the azure-data-tables SDK's async client (Azure Storage, or Azurite locally): the reference
implementation the lean REST store (shared/storage/rest/) is checked against."""

from __future__ import annotations

import contextlib
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableTransactionError, UpdateMode
from azure.data.tables.aio import TableClient, TableServiceClient

from shared.connections import StorageConnection
from shared.storage.azure.common import Clients, as_connection
from shared.storage.base import Entity, Op, Page, decode_continuation, encode_continuation, transaction_is_empty

_KEYS = ("PartitionKey", "RowKey")


def _entity(raw: Any) -> Entity:
    data = {k: v for k, v in raw.items() if k not in _KEYS}
    return Entity(raw["PartitionKey"], raw["RowKey"], data, raw.metadata.get("etag"))


def _row(entity: Entity) -> dict[str, Any]:
    return {"PartitionKey": entity.partition_key, "RowKey": entity.row_key, **entity.data}


def _etag_of(response: Any) -> str | None:
    return response.get("etag") if isinstance(response, dict) else None


class AzureTables:
    def __init__(self, connection: str | StorageConnection) -> None:
        self._clients = Clients(as_connection(connection), "table", TableServiceClient, "get_table_client")

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
