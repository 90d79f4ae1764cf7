"""Artifact blobs over the azure-storage-blob SDK's async client, and their SAS URLs (signed with the account key,
or a user delegation key when the connection is a managed identity)."""

from __future__ import annotations

import contextlib
import datetime as dt
import urllib.parse
from collections.abc import Sequence
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import (
    BlobBlock,
    BlobSasPermissions,
    ContentSettings,
    UserDelegationKey,
    generate_blob_sas,
)
from azure.storage.blob.aio import BlobLeaseClient, BlobServiceClient, ExponentialRetry  # the async client's own

from shared.connections import StorageConnection
from shared.storage.azure.common import SAS_CLOCK_SKEW, Clients, DelegationKeys, Signer, as_connection
from shared.storage.base import BlobInfo, BlobProperties, BlocksMissing, ServedAs
from shared.storage.retry import RetryPolicy


class AzureBlobs:
    """Blobs and their SAS URLs. With a connection string the SAS are signed with its account key; with an
    identity, with a user delegation key (asked of Azure, valid up to 7 days, renewed a day before it ends)."""

    def __init__(self, connection: str | StorageConnection, policy: RetryPolicy | None = None) -> None:
        connection = as_connection(connection)
        policy = policy or RetryPolicy()
        # Blob calls keep the SDK's storage retry policy (every one of them is safe to repeat: overwriting
        # writes, snapshots, commits of the same block), with delays that fit the same budget as the others.
        self._clients = Clients(
            connection,
            "blob",
            BlobServiceClient,
            "get_container_client",
            policy,
            retry_policy=ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=4, random_jitter_range=1),
        )
        from azure.storage.blob import BlobServiceClient as SyncBlobServiceClient

        self._signer = Signer(connection, "blob", SyncBlobServiceClient)
        self._by_identity = connection.uses_identity
        if not self._by_identity:
            self._signer.require_key("Artifact URLs", "the artifact storage connection string has no AccountKey")
        self._delegation_keys = DelegationKeys(self._ask_delegation_key)

    async def _ask_delegation_key(self, start: dt.datetime, expiry: dt.datetime) -> UserDelegationKey:
        key: UserDelegationKey = await self._clients.service.get_user_delegation_key(start, expiry)
        return key

    async def _signed(
        self,
        container: str,
        blob: str,
        permission: BlobSasPermissions,
        expires: dt.datetime,
        *,
        snapshot: str | None = None,
        served_as: ServedAs | None = None,
    ) -> str:
        start = dt.datetime.now(dt.UTC) - SAS_CLOCK_SKEW
        options: dict[str, Any] = {"permission": permission, "expiry": expires, "start": start, "snapshot": snapshot}
        if served_as is not None:
            options.update(
                content_type=served_as.content_type,
                content_disposition=served_as.content_disposition,
                content_encoding=served_as.content_encoding,
                content_language=served_as.content_language,
                cache_control=served_as.cache_control,
            )
        if self._by_identity:
            sas = generate_blob_sas(
                self._signer.account,
                container,
                blob,
                user_delegation_key=await self._delegation_keys.key(expires),
                **options,
            )
        else:
            sas = generate_blob_sas(self._signer.account, container, blob, account_key=self._signer.key, **options)
        at = f"snapshot={urllib.parse.quote(snapshot)}&" if snapshot else ""
        return f"{self._signer.endpoint}/{container}/{urllib.parse.quote(blob, safe='/~')}?{at}{sas}"

    async def upload_url(self, container: str, blob: str, expires: dt.datetime, *, overwrite: bool = True) -> str:
        return await self._signed(container, blob, BlobSasPermissions(create=True, write=overwrite), expires)

    async def download_url(
        self,
        container: str,
        blob: str,
        expires: dt.datetime,
        *,
        snapshot: str | None = None,
        served_as: ServedAs | None = None,
    ) -> str:
        return await self._signed(
            container, blob, BlobSasPermissions(read=True), expires, snapshot=snapshot, served_as=served_as
        )

    async def snapshot(self, container: str, blob: str) -> BlobInfo | None:
        blobs = self._clients.get(container)
        try:
            made = await blobs.get_blob_client(blob).create_snapshot()
        except ResourceNotFoundError:
            return None
        props = await blobs.get_blob_client(blob, snapshot=made["snapshot"]).get_blob_properties()
        return BlobInfo(int(props.size), props.content_settings.content_type, props.etag, made["snapshot"])

    async def stage_block(self, container: str, blob: str, block_id: str, data: bytes) -> None:
        # The SDK base64-encodes block ids itself.
        await self._clients.get(container).get_blob_client(blob).stage_block(block_id, data, length=len(data))

    async def commit_blocks(
        self, container: str, blob: str, block_ids: Sequence[str], properties: BlobProperties
    ) -> None:
        client = self._clients.get(container).get_blob_client(blob)
        try:
            await client.commit_block_list(
                [BlobBlock(block_id=i) for i in block_ids],
                content_settings=ContentSettings(
                    content_type=properties.content_type,
                    content_encoding=properties.content_encoding,
                    content_language=properties.content_language,
                    content_disposition=properties.content_disposition,
                    cache_control=properties.cache_control,
                ),
            )
        except HttpResponseError as exc:
            code = getattr(exc, "error_code", None) or ""
            if str(getattr(code, "value", code)) == "InvalidBlockList":
                raise BlocksMissing() from None
            raise

    async def commit_block(
        self, container: str, blob: str, block_id: str, *, content_type: str, content_encoding: str | None = None
    ) -> bool:
        """Commit the one block `block_id` as the blob; False when there is no such block to commit (the blob is
        then taken as it is). An upload URL's write permission also lets its holder take a lease on the blob or
        make it an append blob (Azure's SAS names kinds of operation, not one): a lease is broken (the account
        may), and a blob of another type has no block to commit."""
        client = self._clients.get(container).get_blob_client(blob)
        for attempt in range(2):
            try:
                # The SDK base64-encodes block ids itself.
                await client.commit_block_list(
                    [BlobBlock(block_id=block_id)],
                    content_settings=ContentSettings(content_type=content_type, content_encoding=content_encoding),
                )
                return True
            except HttpResponseError as exc:
                code = getattr(exc, "error_code", None) or ""
                code = str(getattr(code, "value", code))  # the SDK's StorageErrorCode, or a plain string
                if code in ("InvalidBlockList", "InvalidBlobType") or exc.status_code == 404:
                    return False
                if exc.status_code == 412 and "Lease" in code and attempt == 0:
                    await BlobLeaseClient(client).break_lease(lease_break_period=0)
                    continue
                raise
        return False

    async def write(self, container: str, blob: str, data: bytes, content_type: str) -> BlobInfo:
        client = self._clients.get(container).get_blob_client(blob)
        made = await client.upload_blob(
            data, overwrite=True, content_settings=ContentSettings(content_type=content_type)
        )
        return BlobInfo(len(data), content_type, made.get("etag"))

    async def read(self, container: str, blob: str, *, snapshot: str | None = None) -> bytes | None:
        try:
            stream = await self._clients.get(container).get_blob_client(blob, snapshot=snapshot).download_blob()
            data: bytes = await stream.readall()
        except ResourceNotFoundError:
            return None
        return data

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
