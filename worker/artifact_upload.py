"""Client side of `azure` artifacts: upload data to the `putUrl` createArtifact gave, straight to Blob Storage.

Small data goes in one PUT; larger data in blocks (Put Block, then Put Block List), several at a time, which is
what Blob Storage requires beyond a single PUT's limit and what makes multi-GB uploads resumable and fast. The
azure-storage-blob SDK does both from the URL alone (the SAS in it is the only credential). Call finishArtifact
with the response's `uploadId` afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

from azure.storage.blob import BlobClient, ContentSettings

BLOCK_SIZE = 8 * 1024 * 1024
SINGLE_PUT_LIMIT = 32 * 1024 * 1024
CONCURRENCY = 4


def upload(
    created: dict[str, Any],
    data: bytes | BinaryIO | Path,
    *,
    block_size: int = BLOCK_SIZE,
    single_put_limit: int = SINGLE_PUT_LIMIT,
    concurrency: int = CONCURRENCY,
) -> int:
    """Upload `data` (bytes, a binary file, or a path) to an `azure` createArtifact response; its size."""
    if created.get("storageType") != "azure":
        raise ValueError(f"not an azure artifact upload: storageType {created.get('storageType')!r}")
    client = BlobClient.from_blob_url(
        created["putUrl"], max_block_size=block_size, max_single_put_size=single_put_limit
    )
    settings = ContentSettings(content_type=created["contentType"])
    with client:
        if isinstance(data, Path):
            size = os.path.getsize(data)
            with open(data, "rb") as stream:
                client.upload_blob(
                    stream, length=size, overwrite=True, max_concurrency=concurrency, content_settings=settings
                )
            return size
        if isinstance(data, bytes):
            client.upload_blob(data, overwrite=True, max_concurrency=concurrency, content_settings=settings)
            return len(data)
        start = data.tell()
        size = data.seek(0, os.SEEK_END) - start
        data.seek(start)
        client.upload_blob(data, length=size, overwrite=True, max_concurrency=concurrency, content_settings=settings)
        return size
