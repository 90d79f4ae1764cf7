"""An `s3` artifact's upload, as S3 answers a presigned PUT: the queue's own URL takes the body, streams it to Blob
Storage a block at a time, commits it with the representation headers the PUT carried (what S3 keeps and serves)
and answers `200` with the data's MD5 as `ETag`.

Why through the queue: docker-worker and scriptworker PUT to `putUrl` as to S3 and accept only `200` or `204`;
Blob Storage answers every upload `201`, and a Put Block (the one plain PUT it takes) keeps no header. The URL is
signed by the queue (shared/domain/artifacts.py `upload_signature`): it names one artifact and when it stops
working, and is refused once the run takes no more artifacts.

Each PUT is staged in blocks of its own (shared/operations/writes/staging.py) and commits only them, then the blob is
snapshotted and the snapshot recorded with the artifact: downloads read that snapshot. A retried PUT replaces the
data, as on S3, while the run is running; once it resolved (an `exception` run takes artifacts for a while longer),
only an artifact not uploaded yet takes data, so that what readers read of a resolved run never changes. Two racing
PUTs leave one of them whole (the other is told to retry). A worker's uploads, all its runs together, take their
share of the slots (`holder`: the run's worker).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace

from shared import errors, timing, validation
from shared.domain.artifacts import Artifact, RunNotAcceptingArtifacts, run_accepts_artifacts, upload_signature
from shared.domain.tasks import TASKS_TABLE
from shared.logs import fields
from shared.operations.artifacts import Artifacts
from shared.operations.writes.staging import BlockStaging, Limit, url_refusal
from shared.storage.base import BlobProperties

log = logging.getLogger("queue.uploads")
UPLOAD_FINISH_GRACE = dt.timedelta(seconds=timing.UPLOAD_FINISH_GRACE)

_TOKEN_LIST = re.compile(rf"{validation.TOKEN}(?:[ \t]*,[ \t]*{validation.TOKEN})*")
_PRINTABLE = re.compile(r"[\x20-\x7e]{1,1024}")
# The representation headers S3 keeps from a PUT and serves on download (its `Expires` and `x-amz-meta-*` are
# not kept: Blob Storage's SAS cannot serve them), with what each must look like.
KEPT_HEADERS = {
    "content-encoding": ("encoding", _TOKEN_LIST),
    "content-language": ("language", _TOKEN_LIST),
    "cache-control": ("cacheControl", _PRINTABLE),
    "content-disposition": ("disposition", _PRINTABLE),
}


class UploadUrlInvalid(errors.InsufficientScopes):
    """This upload URL does not allow an upload of artifact `{name}` of run {runId} of task `{taskId}`: {problem}.
    Ask createArtifact again for a fresh `putUrl`"""


class UploadHeaderInvalid(errors.InputError):
    """Artifact `{name}`: the upload's `{header}` header `{value}` is not {expected}"""


class ResolvedArtifactUploaded(errors.RequestConflict):
    """Artifact `{name}` of run {runId} of task `{taskId}` was uploaded, and its run resolved: its data does not
    change any more"""


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
    def __init__(self, artifacts: Artifacts, staging: BlockStaging) -> None:
        self.artifacts, self.staging = artifacts, staging
        self.stores = artifacts.stores
        self.settings = self.stores.settings
        self.limit = Limit(
            self.settings.artifact_s3_max_bytes,
            "`QUEUE_ARTIFACT_S3_MAX_BYTES` for an `s3` artifact; upload larger data as an `object` or `azure` artifact",
        )

    async def receive(self, request: UploadRequest, body: AsyncIterator[bytes]) -> str:
        """Store the body as the artifact's data; its ETag (the quoted MD5 of the data, as S3's)."""
        self._check_signature(request)
        kept = self._kept_headers(request)
        self.staging.declared_length(request.name, request.headers, self.limit)  # refused before anything is read
        await self.stores.ready()
        artifact, worker = await self._accepting(request)
        blob = str(artifact.blob)
        staged = await self.staging.stage(
            request.name,
            blob,
            body,
            self.limit,
            request.headers,
            holder=f"worker:{worker}",
            deadline=dt.datetime.fromtimestamp(request.expires, dt.UTC),
        )
        await self._accepting(request, finishing=True)  # the run may have resolved, or the data come, meanwhile
        await self.artifacts.blobs.commit_blocks(
            self.artifacts.container,
            blob,
            staged.block_ids,
            BlobProperties(
                artifact.content_type,
                kept.get("encoding", artifact.details.get("contentEncoding")),
                kept.get("language"),
                kept.get("disposition"),
                kept.get("cacheControl"),
            ),
        )
        snapshot = await self.artifacts.blobs.snapshot(self.artifacts.container, blob)
        if snapshot is None:  # deleted between the commit and the snapshot: the artifact expired meanwhile
            raise NotAnS3Artifact(name=request.name, runId=request.run_id, taskId=request.task_id)
        await self._record(artifact, {**kept, "bytes": str(staged.size), "etag": staged.etag}, str(snapshot.snapshot))
        log.info(
            "artifact %s uploaded (%d bytes)",
            request.name,
            staged.size,
            extra=fields(event="artifact-uploaded", taskId=request.task_id, runId=request.run_id),
        )
        return staged.etag

    def _check_signature(self, request: UploadRequest) -> None:
        expected = upload_signature(
            self.settings.upload_key, request.task_id, request.run_id, request.name, request.expires
        )
        problem = url_refusal(expected, request.signature, request.expires, self.stores.now())
        if problem is not None:
            raise UploadUrlInvalid(name=request.name, runId=request.run_id, taskId=request.task_id, problem=problem)

    def _kept_headers(self, request: UploadRequest) -> dict[str, str]:
        kept: dict[str, str] = {}
        for header, (key, form) in KEPT_HEADERS.items():
            value = request.headers.get(header, "").strip()
            if not value:
                continue
            if not form.fullmatch(value):
                raise UploadHeaderInvalid(
                    name=request.name,
                    header=header,
                    value=value[:200],
                    expected=("a list of tokens" if form is _TOKEN_LIST else "at most 1024 printable ASCII characters"),
                )
            kept[key] = value
        return kept

    async def _accepting(self, request: UploadRequest, *, finishing: bool = False) -> tuple[Artifact, str]:
        """The artifact and the worker of its run (`<workerGroup>/<workerId>`), if the run takes artifacts now;
        when `finishing` a staged upload, also if the run resolved at most UPLOAD_FINISH_GRACE ago (a worker reports
        once its uploads are answered; one that reported first may still see its last upload through). A resolved
        run's artifact that holds data takes no more: what readers read of a resolved run stays what it is."""
        task = await self.artifacts.tasks.get(request.task_id)
        artifact = await self.artifacts.row(request.task_id, request.run_id, request.name)
        if (
            task is None
            or artifact is None
            or artifact.storage_type != "s3"
            or artifact.blob is None
            or request.run_id >= len(task.runs)
        ):
            raise NotAnS3Artifact(name=request.name, runId=request.run_id, taskId=request.task_id)
        run = task.runs[request.run_id]
        window = self.settings.artifact_exception_window
        now = self.stores.now()
        just_resolved = run.resolved is not None and now <= run.resolved + UPLOAD_FINISH_GRACE
        if not run_accepts_artifacts(run, now, window) and not (finishing and just_resolved):
            raise RunNotAcceptingArtifacts(
                taskId=request.task_id, runId=request.run_id, state=run.state, window=f"{window:g}"
            )
        if run.resolved is not None and "uploaded" in artifact.details:
            raise ResolvedArtifactUploaded(name=request.name, runId=request.run_id, taskId=request.task_id)
        return artifact, f"{run.worker_group}/{run.worker_id}"

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
