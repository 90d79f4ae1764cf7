"""An object's data PUT through the queue, for clients that send it chunked.

Taskcluster's Go client (generic-worker's object artifacts, `taskcluster` CLI uploads) PUTs its body with
`Transfer-Encoding: chunked` whatever the answered headers say: Go sends no length for the reader it is given. Blob
Storage refuses a chunked Put Blob (411 on Azure, 400 on Azurite), so createUpload answers such a caller
(the Object API's createUpload route says how it is told) the queue's own URL instead of a SAS: the body is staged in
blocks (shared/operations/writes/staging.py) and committed as the object's blob; finishUpload then checks and seals
it as for any upload. Other clients send a length and upload straight to Blob Storage.

The URL is signed by the queue (shared/domain/objects.py `upload_data_signature`): this object and upload until
it expires; it is refused once the object is finished. An artifact's object uploads take the share of its run's
worker (all its runs together) of the staging slots; any other object's, its own.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from shared import errors
from shared.domain.artifacts import run_of_object
from shared.domain.objects import StoredObject, upload_data_signature
from shared.logs import fields
from shared.operations.objects import Objects, UploadConflict
from shared.operations.writes.staging import BlockStaging, Limit, url_refusal
from shared.storage.base import BlobProperties

log = logging.getLogger("queue.objects")


class ObjectUploadUrlInvalid(errors.InsufficientScopes):
    """This upload URL does not allow an upload of object `{name}`: {problem}. Ask createUpload again (same
    uploadId, projectId and expires) for a fresh one"""


class NoSuchUpload(errors.ResourceNotFound):
    """Object `{name}` is not being uploaded with this uploadId (createUpload first)"""


@dataclass(frozen=True)
class ObjectDataRequest:
    """A PUT to an object's upload URL: whom it is for, its signature, its headers (lower-case names)."""

    name: str
    upload_id: str
    expires: int
    signature: str
    headers: Mapping[str, str]


class WorkerOfRun(Protocol):
    async def worker_of(self, task_id: str, run_id: int) -> str | None: ...


class ObjectUploads:
    def __init__(self, objects: Objects, staging: BlockStaging, runs: WorkerOfRun) -> None:
        self.objects, self.staging, self.runs = objects, staging, runs
        self.stores = objects.stores
        self.settings = self.stores.settings

    async def receive(self, request: ObjectDataRequest, body: AsyncIterator[bytes]) -> str:
        """Store the body as the object's data (not yet finished); its ETag (the quoted MD5 of the data)."""
        self._check_signature(request)
        stored = await self._uploading(request)
        limit = Limit(
            stored.content_length if stored.content_length is not None else self.settings.artifact_s3_max_bytes,
            "the contentLength proposed at createUpload",
        )
        staged = await self.staging.stage(
            request.name,
            stored.blob,
            body,
            limit,
            request.headers,
            holder=await self._holder(request.name),
            deadline=dt.datetime.fromtimestamp(request.expires, dt.UTC),
        )
        await self.objects.blobs.commit_blocks(
            self.objects.container, stored.blob, staged.block_ids, BlobProperties(stored.content_type)
        )
        log.info(
            "object %s: %d bytes uploaded through the queue",
            request.name,
            staged.size,
            extra=fields(event="object-uploaded", object=request.name),
        )
        return staged.etag

    def _check_signature(self, request: ObjectDataRequest) -> None:
        expected = upload_data_signature(self.settings.upload_key, request.name, request.upload_id, request.expires)
        problem = url_refusal(expected, request.signature, request.expires, self.stores.now())
        if problem is not None:
            raise ObjectUploadUrlInvalid(name=request.name, problem=problem)

    async def _holder(self, name: str) -> str:
        """Whose share of the staging slots an upload takes: an artifact's object, its run's worker's."""
        run = run_of_object(name)
        worker = await self.runs.worker_of(*run) if run is not None else None
        return f"worker:{worker}" if worker is not None else f"object:{name}"

    async def _uploading(self, request: ObjectDataRequest) -> StoredObject:
        stored = await self.objects.stored(request.name)
        if stored is None or stored.upload_id != request.upload_id:
            raise NoSuchUpload(name=request.name)
        if stored.state == "finished":
            raise UploadConflict(name=request.name, problem="it is finished, and objects do not change")
        return stored
