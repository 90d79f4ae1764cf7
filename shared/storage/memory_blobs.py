"""An in-memory blob store with Azure's semantics for what the queue uses (blocks committed as a blob, conditional
writes, snapshots, signed-URL shapes), for fast unit tests; proven again against Azurite in the integration tests."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Sequence

from shared.storage.base import BlobInfo, BlobProperties, BlocksMissing, ServedAs


class MemoryBlobs:
    """Blobs in a dict. Its URLs (`memory://<container>/<blob>?sp=<w|r>&se=<expiry>`) are not fetchable; tests
    store and read blobs with `put` and `get`."""

    def __init__(self) -> None:
        self.blobs: dict[tuple[str, str], tuple[bytes, str | None]] = {}
        self.containers: set[str] = set()
        self._snapshots = itertools.count(1)
        self.blocks: dict[tuple[str, str, str], bytes] = {}
        self.properties: dict[tuple[str, str], BlobProperties] = {}  # what commit_blocks set (tests read it)

    async def ensure_container(self, container: str) -> None:
        self.containers.add(container)

    def _url(self, container: str, blob: str, permission: str, expires: dt.datetime) -> str:
        return f"memory://{container}/{blob}?sp={permission}&se={expires.isoformat()}"

    async def upload_url(self, container: str, blob: str, expires: dt.datetime, *, overwrite: bool = True) -> str:
        return self._url(container, blob, "cw" if overwrite else "c", expires)

    async def download_url(
        self,
        container: str,
        blob: str,
        expires: dt.datetime,
        *,
        snapshot: str | None = None,
        served_as: ServedAs | None = None,
    ) -> str:
        url = self._url(container, blob, "r", expires)
        if snapshot is not None:
            url += f"&snapshot={snapshot}"
        if served_as is not None:
            url += f"&rsct={served_as.content_type}&rscd={served_as.content_disposition or ''}"
            for key, value in (
                ("rsce", served_as.content_encoding),
                ("rscl", served_as.content_language),
                ("rscc", served_as.cache_control),
            ):
                if value:
                    url += f"&{key}={value}"
        return url

    def put(self, container: str, blob: str, data: bytes, content_type: str | None = None) -> None:
        self.blobs[(container, blob)] = (data, content_type)

    def get(self, container: str, blob: str) -> bytes | None:
        found = self.blobs.get((container, blob))
        return found[0] if found else None

    async def info(self, container: str, blob: str) -> BlobInfo | None:
        found = self.blobs.get((container, blob))
        return BlobInfo(len(found[0]), found[1], None) if found else None

    async def snapshot(self, container: str, blob: str) -> BlobInfo | None:
        found = self.blobs.get((container, blob))
        if found is None:
            return None
        snapshot = f"snapshot-{next(self._snapshots)}"
        self.blobs[(container, f"{blob}?snapshot={snapshot}")] = found
        return BlobInfo(len(found[0]), found[1], None, snapshot)

    def put_block(self, container: str, blob: str, block_id: str, data: bytes) -> None:
        """What a PUT to the Put Block URL of earlier versions did (tests of its uploads' sealing)."""
        self.blocks[(container, blob, block_id)] = data

    async def stage_block(self, container: str, blob: str, block_id: str, data: bytes) -> None:
        self.blocks[(container, blob, block_id)] = bytes(data)

    async def commit_blocks(
        self, container: str, blob: str, block_ids: Sequence[str], properties: BlobProperties
    ) -> None:
        if any((container, blob, i) not in self.blocks for i in block_ids):
            raise BlocksMissing()
        data = b"".join(self.blocks[(container, blob, i)] for i in block_ids)
        for block in [k for k in self.blocks if k[:2] == (container, blob)]:
            del self.blocks[block]  # Put Block List discards the blob's other uncommitted blocks
        self.blobs[(container, blob)] = (data, properties.content_type)
        self.properties[(container, blob)] = properties

    async def commit_block(
        self, container: str, blob: str, block_id: str, *, content_type: str, content_encoding: str | None = None
    ) -> bool:
        data = self.blocks.get((container, blob, block_id))
        if data is None:
            return False
        self.blobs[(container, blob)] = (data, content_type)
        return True

    async def write(self, container: str, blob: str, data: bytes, content_type: str) -> BlobInfo:
        self.blobs[(container, blob)] = (data, content_type)
        return BlobInfo(len(data), content_type, None)

    async def read(self, container: str, blob: str, *, snapshot: str | None = None) -> bytes | None:
        return self.get(container, f"{blob}?snapshot={snapshot}" if snapshot else blob)

    def get_snapshot(self, container: str, blob: str, snapshot: str) -> bytes | None:
        return self.get(container, f"{blob}?snapshot={snapshot}")

    async def delete(self, container: str, blob: str) -> bool:
        """The blob, its snapshots and its uncommitted blocks."""
        for block in [k for k in self.blocks if k[:2] == (container, blob)]:
            del self.blocks[block]
        for key in [k for k in self.blobs if k[0] == container and k[1].startswith(f"{blob}?snapshot=")]:
            del self.blobs[key]
        return self.blobs.pop((container, blob), None) is not None

    async def close(self) -> None:
        return None
