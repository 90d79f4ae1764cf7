"""An `s3` artifact's upload, as S3 answers a presigned PUT: the queue's own URL takes the body, streams it to Blob
Storage a block at a time, commits it with the representation headers the PUT carried (what S3 keeps and serves)
and answers `200` with the data's MD5 as `ETag`.

Why through the queue: docker-worker and scriptworker PUT to `putUrl` as to S3 and accept only `200` or `204`;
Blob Storage answers every upload `201`, and a Put Block (the one plain PUT it takes) keeps no header. The URL is
signed by the queue (shared/domain/artifacts.py `upload_signature`): it names one artifact and when it stops
working, and is refused once the run takes no more artifacts.

Each PUT stages its own blocks (ids unique to the request) and commits only them, then snapshots the blob and
records the snapshot with the artifact: downloads read that snapshot. A retried PUT replaces the data, as on S3,
while the run takes artifacts; two racing PUTs leave one of them whole (the other is told to retry).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace

from shared import errors, timeutil
from shared.domain.artifacts import Artifact, RunNotAcceptingArtifacts, run_accepts_artifacts, upload_signature
from shared.domain.tasks import TASKS_TABLE
from shared.logs import fields
from shared.operations.artifacts import Artifacts
from shared.storage.base import BlobProperties

log = logging.getLogger("queue.uploads")

BLOCK_BYTES = 4 * 1024 * 1024  # staged at a time; a second is read while one is staged
_TOKEN_LIST = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:[ \t]*,[ \t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*")
_PRINTABLE = re.compile(r"[\x20-\x7e]{1,1024}")
# The representation headers S3 keeps from a PUT and serves on download (its `Expires` and `x-amz-meta-*` are
# not kept: Blob Storage's SAS cannot serve them), with what each must look like.
KEPT_HEADERS = {"content-encoding": ("encoding", _TOKEN_LIST), "content-language": ("language", _TOKEN_LIST),
                "cache-control": ("cacheControl", _PRINTABLE), "content-disposition": ("disposition", _PRINTABLE)}


class UploadUrlInvalid(errors.InsufficientScopes):
    """This upload URL does not allow an upload of artifact `{name}` of run {runId} of task `{taskId}`: {problem}.
Ask createArtifact again for a fresh `putUrl`"""


class UploadTooLarge(errors.InputTooLarge):
    """Artifact `{name}`: the upload is {size} bytes; an `s3` artifact holds at most {limit} bytes on this deployment
(`QUEUE_ARTIFACT_S3_MAX_BYTES`); upload larger data as an `object` or `azure` artifact"""


class UploadHeaderInvalid(errors.InputError):
    """Artifact `{name}`: the upload's `{header}` header `{value}` is not {expected}"""


class UploadDigestMismatch(errors.InputError):
    """Artifact `{name}`: the upload's Content-MD5 is {given}, but the data received has MD5 {received} (S3's
BadDigest); nothing was stored"""


class UploadTruncated(errors.InputError):
    """Artifact `{name}`: the upload declared Content-Length {declared} but sent {received} bytes; nothing was
stored"""


class NotAnS3Artifact(errors.ResourceNotFound):
    """Artifact `{name}` of run {runId} of task `{taskId}` is not an `s3` artifact created by createArtifact: only
those are uploaded here"""


@dataclass(frozen=True)
class UploadRequest:
    """A PUT to an `s3` artifact's upload URL: whom it is for, its signature, its headers (lower-case names)."""

    task_id: str
    run_id: int
    name: str
    expires: int
    signature: str
    headers: Mapping[str, str]


class S3Uploads:
    def __init__(self, artifacts: Artifacts) -> None:
        self.artifacts = artifacts
        self.stores = artifacts.stores
        self.settings = self.stores.settings
        # Memory is bounded by uploads at once (each holds up to two blocks); the others wait, their bodies
        # unread (the server stops reading a connection whose body is not consumed).
        self._slots = asyncio.Semaphore(self.settings.artifact_upload_slots)

    async def receive(self, request: UploadRequest, body: AsyncIterator[bytes]) -> str:
        """Store the body as the artifact's data; its ETag (the quoted MD5 of the data, as S3's)."""
        self._check_signature(request)
        kept = self._kept_headers(request)
        declared = self._declared_length(request)
        await self.stores.ready()
        artifact = await self._accepting(request)
        async with self._slots:
            block_ids, size, md5 = await self._stage(request, body, artifact)
        self._check_received(request, declared, size, md5)
        blob = str(artifact.blob)
        await self.artifacts.blobs.commit_blocks(self.artifacts.container, blob, block_ids, BlobProperties(
            artifact.content_type, kept.get("encoding", artifact.details.get("contentEncoding")), kept.get("language"),
            kept.get("disposition"), kept.get("cacheControl")))
        snapshot = await self.artifacts.blobs.snapshot(self.artifacts.container, blob)
        if snapshot is None:  # deleted between the commit and the snapshot: the artifact expired meanwhile
            raise NotAnS3Artifact(name=request.name, runId=request.run_id, taskId=request.task_id)
        etag = f'"{md5.hex()}"'
        await self._record(artifact, {**kept, "bytes": str(size), "etag": etag}, str(snapshot.snapshot))
        log.info("artifact %s uploaded (%d bytes)", request.name, size,
                 extra=fields(event="artifact-uploaded", taskId=request.task_id, runId=request.run_id))
        return etag

    def _check_signature(self, request: UploadRequest) -> None:
        expected = upload_signature(self.settings.upload_key, request.task_id, request.run_id, request.name,
                                    request.expires)
        problem = None
        if not hmac.compare_digest(expected, request.signature):
            problem = "its signature does not match"
        elif request.expires < self.stores.now().timestamp():
            problem = f"it expired at {timeutil.iso(dt.datetime.fromtimestamp(request.expires, dt.UTC))}"
        if problem is not None:
            raise UploadUrlInvalid(name=request.name, runId=request.run_id, taskId=request.task_id, problem=problem)

    def _kept_headers(self, request: UploadRequest) -> dict[str, str]:
        kept: dict[str, str] = {}
        for header, (key, form) in KEPT_HEADERS.items():
            value = request.headers.get(header, "").strip()
            if not value:
                continue
            if not form.fullmatch(value):
                raise UploadHeaderInvalid(name=request.name, header=header, value=value[:200], expected=(
                    "a list of tokens" if form is _TOKEN_LIST else "at most 1024 printable ASCII characters"))
            kept[key] = value
        return kept

    def _declared_length(self, request: UploadRequest) -> int | None:
        value = request.headers.get("content-length")
        if value is None:
            return None  # chunked: bounded while it is read
        if not value.isdigit():
            raise UploadHeaderInvalid(name=request.name, header="content-length", value=value[:200],
                                      expected="a number of bytes")
        if int(value) > self.settings.artifact_s3_max_bytes:
            raise UploadTooLarge(name=request.name, size=value, limit=self.settings.artifact_s3_max_bytes)
        return int(value)

    async def _accepting(self, request: UploadRequest) -> Artifact:
        """The artifact, if its run takes artifacts now (an upload begun then may finish after the run resolved,
        as one to S3 would)."""
        task = await self.artifacts.tasks.get(request.task_id)
        artifact = await self.artifacts.row(request.task_id, request.run_id, request.name)
        if (task is None or artifact is None or artifact.storage_type != "s3" or artifact.blob is None
                or request.run_id >= len(task.runs)):
            raise NotAnS3Artifact(name=request.name, runId=request.run_id, taskId=request.task_id)
        run = task.runs[request.run_id]
        window = self.settings.artifact_exception_window
        if not run_accepts_artifacts(run, self.stores.now(), window):
            raise RunNotAcceptingArtifacts(taskId=request.task_id, runId=request.run_id, state=run.state,
                                           window=f"{window:g}")
        return artifact

    async def _stage(self, request: UploadRequest, body: AsyncIterator[bytes],
                     artifact: Artifact) -> tuple[list[str], int, bytes]:
        """Stage the body in blocks of BLOCK_BYTES, one staged while the next is read; the block ids, the size
        and the MD5."""
        prefix = secrets.token_hex(8)  # this request's own blocks: a racing PUT commits only its own
        block_ids: list[str] = []
        md5, size, buffer = hashlib.md5(usedforsecurity=False), 0, bytearray()
        staging: asyncio.Task[None] | None = None
        limit = self.settings.artifact_s3_max_bytes

        async def flush() -> None:
            nonlocal staging, buffer
            if staging is not None:
                await staging
            block_ids.append(f"{prefix}-{len(block_ids):06d}")
            staging = asyncio.create_task(self.artifacts.blobs.stage_block(
                self.artifacts.container, str(artifact.blob), block_ids[-1], bytes(buffer)))
            buffer = bytearray()

        try:
            async for chunk in body:
                size += len(chunk)
                if size > limit:
                    raise UploadTooLarge(name=request.name, size=f"more than {limit}", limit=limit)
                md5.update(chunk)
                buffer += chunk
                if len(buffer) >= BLOCK_BYTES:
                    await flush()
            if buffer:
                await flush()
            if staging is not None:
                await staging
        except BaseException:
            if staging is not None and not staging.done():
                staging.cancel()
            raise
        return block_ids, size, md5.digest()

    @staticmethod
    def _check_received(request: UploadRequest, declared: int | None, size: int, md5: bytes) -> None:
        if declared is not None and size != declared:
            raise UploadTruncated(name=request.name, declared=declared, received=size)
        given = request.headers.get("content-md5")
        if given is None:
            return
        try:
            matches = base64.b64decode(given, validate=True) == md5
        except binascii.Error:
            matches = False
        if not matches:
            raise UploadDigestMismatch(name=request.name, given=given[:60], received=base64.b64encode(md5).decode())

    async def _record(self, artifact: Artifact, uploaded: dict[str, str], snapshot: str) -> None:
        """The snapshot and what the PUT said, recorded with the artifact (on its ETag; a row changed meanwhile,
        by createArtifact extending `expires`, say, is read again)."""
        for _ in range(10):
            details = {**artifact.details, "snapshot": snapshot, "uploaded": uploaded}
            if await self.stores.tables.replace(TASKS_TABLE, replace(artifact, details=details).to_entity()):
                return
            again = await self.artifacts.row(artifact.task_id, artifact.run_id, artifact.name)
            if again is None:
                raise NotAnS3Artifact(name=artifact.name, runId=artifact.run_id, taskId=artifact.task_id)
            artifact = again
        raise errors.ServiceUnavailable()
