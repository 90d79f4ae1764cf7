"""Tables over the azure-data-tables SDK's async client (Azure Storage, or Azurite locally): the reference
implementation the lean REST store (shared/storage/rest/) is checked against."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError
from azure.data.tables import TableTransactionError, UpdateMode
from azure.data.tables.aio import TableClient, TableServiceClient

from shared.connections import StorageConnection
from shared.storage.azure.common import Clients, Refused, as_connection, retried, with_keywords
from shared.storage.base import Entity, Op, Page, all_at_once, transaction_is_empty
from shared.storage.keys import decode_continuation, encode_continuation
from shared.storage.lost_responses import transaction_applied, written_by_us
from shared.storage.retry import RetryPolicy

_KEYS = ("PartitionKey", "RowKey")


def _entity(raw: Any) -> Entity:
    data = {k: v for k, v in raw.items() if k not in _KEYS}
    return Entity(raw["PartitionKey"], raw["RowKey"], data, raw.metadata.get("etag"))


def _row(entity: Entity) -> dict[str, Any]:
    return {"PartitionKey": entity.partition_key, "RowKey": entity.row_key, **entity.data}


def _etag_of(response: Any) -> str | None:
    return response.get("etag") if isinstance(response, dict) else None


class AzureTables:
    def __init__(self, connection: str | StorageConnection, policy: RetryPolicy | None = None) -> None:
        self._policy = policy or RetryPolicy()
        # The SDK's own retries are off: each call is retried here (shared/storage/retry.py).
        self._clients = Clients(
            as_connection(connection), "table", TableServiceClient, "get_table_client", self._policy, retry_total=0
        )

    def _client(self, table: str) -> TableClient:
        client: TableClient = self._clients.get(table)
        return client

    async def _call(
        self, operation: str, call: Callable[[dict[str, Any]], Awaitable[Any]], **options: Any
    ) -> tuple[Any, bool]:
        return await retried(self._policy, operation, "request_id", call, **options)

    async def ensure_tables(self, names: list[str]) -> None:
        await all_at_once(self._call("table.create", with_keywords(self._client(name).create_table)) for name in names)

    async def get(self, table: str, partition_key: str, row_key: str) -> Entity | None:
        found, _ = await self._call("table.get", lambda o: self._client(table).get_entity(partition_key, row_key, **o))
        return None if isinstance(found, Refused) else _entity(found)

    async def _written(self, table: str, entity: Entity, response: Any, ambiguous: bool) -> Entity | None:
        if isinstance(response, Refused):
            # After a lost answer, the refusal may be of our own first attempt (shared/storage/lost_responses.py).
            return await written_by_us(self.get, table, entity) if ambiguous else None
        return entity.with_etag(_etag_of(response))

    async def insert(self, table: str, entity: Entity) -> Entity | None:
        response, ambiguous = await self._call(
            "table.insert", lambda o: self._client(table).create_entity(_row(entity), **o)
        )
        return await self._written(table, entity, response, ambiguous)

    async def replace(self, table: str, entity: Entity) -> Entity | None:
        condition: dict[str, Any] = (
            {"etag": entity.etag, "match_condition": MatchConditions.IfNotModified} if entity.etag is not None else {}
        )
        response, ambiguous = await self._call(
            "table.replace",
            lambda o: self._client(table).update_entity(_row(entity), mode=UpdateMode.REPLACE, **condition, **o),
        )
        return await self._written(table, entity, response, ambiguous)

    async def upsert(self, table: str, entity: Entity) -> Entity:
        response, _ = await self._call(
            "table.upsert",
            lambda o: self._client(table).upsert_entity(_row(entity), mode=UpdateMode.REPLACE, **o),
            refusals=(),
        )
        return entity.with_etag(_etag_of(response))

    async def delete(self, table: str, partition_key: str, row_key: str, etag: str | None = None) -> bool:
        client = self._client(table)
        if etag == "*":  # unconditional, and no answer needed: the SDK ignores a missing entity
            await self._call("table.delete", lambda o: client.delete_entity(partition_key, row_key, **o))
            return True
        if etag is None:
            # delete_entity ignores a missing entity; read first so the caller learns whether it existed.
            if await self.get(table, partition_key, row_key) is None:
                return False
            await self._call("table.delete", lambda o: client.delete_entity(partition_key, row_key, **o))
            return True
        answer, ambiguous = await self._call(
            "table.delete",
            lambda o: client.delete_entity(
                partition_key, row_key, etag=etag, match_condition=MatchConditions.IfNotModified, **o
            ),
        )
        if isinstance(answer, Refused):
            return answer.status == 404 and ambiguous  # gone after a lost answer: our first attempt deleted it
        return True

    async def query(
        self,
        table: str,
        filter: str,
        parameters: dict[str, Any],
        *,
        limit: int | None = None,
        continuation: str | None = None,
    ) -> Page:
        token: Any = None  # the SDK's own form of the keys, though it types its tokens as strings
        if continuation:
            next_pk, next_rk = decode_continuation(continuation)
            token = {"PartitionKey": next_pk, "RowKey": next_rk}

        async def first_page(options: dict[str, Any]) -> Page:
            pages = (
                self._client(table)
                .query_entities(filter, parameters=parameters, results_per_page=limit or 1000, **options)
                .by_page(continuation_token=token)
            )
            entities: list[Entity] = []
            async for page in pages:
                entities.extend([_entity(raw) async for raw in page])
                break
            next_token = pages.continuation_token  # type: ignore[attr-defined]
            encoded = encode_continuation(next_token["PartitionKey"], next_token.get("RowKey")) if next_token else None
            return Page(entities, encoded)

        page, _ = await self._call("table.query", first_page, refusals=())
        return page  # type: ignore[no-any-return]

    async def transact(self, table: str, ops: list[Op]) -> bool:
        return await self.commit(table, ops) is not None

    async def commit(self, table: str, ops: list[Op]) -> list[str | None] | None:
        if transaction_is_empty(ops):
            return []
        operations: list[Any] = []
        for op in ops:
            row = _row(op.entity)
            condition = (
                {"etag": op.entity.etag, "match_condition": MatchConditions.IfNotModified} if op.entity.etag else {}
            )
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
        results, ambiguous = await self._call(
            "table.batch", lambda o: self._client(table).submit_transaction(operations, **o), refusal=_condition_failed
        )
        if isinstance(results, Refused):
            return await transaction_applied(self.get, table, ops) if ambiguous else None
        return [None if op.kind == "delete" else result.get("etag") for op, result in zip(ops, results, strict=True)]

    async def close(self) -> None:
        await self._clients.close()


def _condition_failed(exc: HttpResponseError) -> bool:
    """A transaction whose condition failed (exists, changed, absent): an answer; anything else is an error."""
    return isinstance(exc, TableTransactionError) and getattr(exc, "error_code", None) in (
        "EntityAlreadyExists",
        "UpdateConditionNotSatisfied",
        "ResourceNotFound",
    )
