"""Artifact writes: createArtifact and finishArtifact.

Every artifact write is one transaction with the task entity, conditional on the ETag read (the artifact row is in
the task's partition, shared/domain/artifacts.py): the run state the write was decided on is the state it is applied
to (no artifact slips in after the run resolved), and the `artifact-created` event is recorded with the artifact or
not at all. Before an artifact (or a later `expires`) is written, a row goes in the ArtifactExpiry index; the expiry
timer (shared/operations/expiry.py) deletes it when it expires.

Storage types (docs/artifacts.md):
- `azure` with `contentLength` (this queue's form): a block blob the returned `putUrl` may write; finishArtifact
  takes a snapshot, checks its size and makes the artifact present (and announces it).
- `azure` without `contentLength` (the Azure-era form) and `s3` (what docker-worker and generic-worker send): present
  at once, as in Taskcluster; the worker PUTs to `putUrl` (for `s3` a plain PUT, which uploads the blob's one block)
  and calls nothing more. The data is sealed (committed, and a snapshot taken) when the artifact is first read.
- `object`: the data is an object of the Object service (shared/operations/objects.py), uploaded with the
  temporary credentials createArtifact answers; finishArtifact makes it present once the object is finished.
- `reference`, `link`, `error`: present as soon as they are created.
Downloads read snapshots, which no upload URL can change, with the declared content type (shared/domain/artifacts.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import urllib.parse
import weakref
from dataclasses import dataclass, replace
from typing import Any

from shared import errors, timeutil, validation
from shared.domain.artifacts import (
    DEFAULT_CONTENT_TYPE,
    EXPIRES_PAST,
    MAX_NAME_CHARS,
    Artifact,
    ArtifactConflict,
    ArtifactExpiresInvalid,
    ArtifactNameInvalid,
    ArtifactNotFound,
    ArtifactRunNotFound,
    ArtifactTaskNotFound,
    ArtifactTooLarge,
    ContentTypeInvalid,
    NothingToFinish,
    RunNeverClaimed,
    RunNotAcceptingArtifacts,
    UploadIdMismatch,
    UploadIncomplete,
    blob_path,
    conflicts,
    index_key,
    object_name,
    row_key,
    run_accepts_artifacts,
    upload_path,
    upload_signature,
)
from shared.domain.tasks import TASKS_TABLE, Task
from shared.logs import fields
from shared.operations.objects import Objects
from shared.operations.writes.livelogs import MAX_LIVE_PER_RUN
from shared.operations.writes.repository import TaskRepository
from shared.storage.base import BlobInfo, BlobStore, Op

log = logging.getLogger("queue.artifacts")

UPLOAD_CREDENTIALS = dt.timedelta(hours=24)  # object artifacts' upload credentials last at most this (Taskcluster's)


class TooManyLiveArtifacts(errors.InputError):
    """Artifact `{name}`: a run may have at most {limit} `azure` artifacts created without `contentLength` (live
    logs, sealed when the run resolves); give `contentLength` and call finishArtifact for the others"""


@dataclass(frozen=True)
class Created:
    """What createArtifact made: the artifact, and where and until when its data is uploaded (azure, s3: a URL;
    object: temporary credentials for the Object service)."""

    artifact: Artifact
    put_url: str | None = None
    put_url_expires: dt.datetime | None = None
    credentials: dict[str, str] | None = None


class ReferenceNotHttp(errors.InputError):
    """Artifact `{name}`: a reference's url must be http or https, not `{url}` (the queue redirects readers to
    it: a `javascript:`, `data:` or `file:` address has no use there)"""


def _http_reference(name: str, url: str) -> str:
    if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https"):
        raise ReferenceNotHttp(name=name, url=url[:200])
    return url


class Artifacts:
    def __init__(self, tasks: TaskRepository, objects: Objects) -> None:
        self.tasks, self.objects = tasks, objects
        self.stores = tasks.stores
        self.tables = self.stores.tables
        self.settings = self.stores.settings
        # One artifact write per task at a time in this process: a worker creating many artifacts at once would
        # otherwise make every write but one lose its ETag race, again and again.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def worker_of(self, task_id: str, run_id: int) -> str | None:
        """`<workerGroup>/<workerId>` of a run that was claimed; None for a task or run there is not."""
        task = await self.tasks.get(task_id)
        if task is None or run_id >= len(task.runs) or task.runs[run_id].worker_id is None:
            return None
        run = task.runs[run_id]
        return f"{run.worker_group}/{run.worker_id}"

    @property
    def blobs(self) -> BlobStore:
        if self.stores.blobs is None:
            raise errors.InternalServerError("No blob storage is configured for artifacts")
        return self.stores.blobs

    @property
    def container(self) -> str:
        return self.settings.artifact_container

    def _lock(self, task_id: str) -> asyncio.Lock:
        lock = self._locks.get(task_id)
        if lock is None:
            lock = self._locks[task_id] = asyncio.Lock()
        return lock

    async def row(self, task_id: str, run_id: int, name: str) -> Artifact | None:
        entity = await self.tables.get(TASKS_TABLE, task_id, row_key(run_id, name))
        if entity is None or entity.data.get("name") != name:  # another name's row (written before keys escaped
            return None  # a leading `~`): not this artifact
        return Artifact.from_entity(entity)

    # --- createArtifact ---------------------------------------------------------------------------------------

    def _requested(self, task: Task, run_id: int, name: str, body: dict[str, Any], now: dt.datetime) -> Artifact:
        storage_type, task_id = body["storageType"], task.task_id
        if len(name) > MAX_NAME_CHARS:
            raise ArtifactNameInvalid(limit=MAX_NAME_CHARS)
        content_type = body.get("contentType") or DEFAULT_CONTENT_TYPE
        if len(content_type) > 255 or not validation.MEDIA_TYPE.fullmatch(content_type):
            raise ContentTypeInvalid(name=name, contentType=content_type[:300])
        expires = timeutil.to_ms(timeutil.parse(body["expires"]))
        if expires < now - EXPIRES_PAST:
            raise ArtifactExpiresInvalid(
                expires=timeutil.iso(expires), problem="it must not be more than 15 minutes in the past"
            )
        details: dict[str, Any]
        present = True
        if storage_type == "azure":
            details = {"blob": blob_path(task_id, run_id, name)}
            if "contentLength" in body:  # this queue's form: uploaded, then finished
                details.update(contentLength=body["contentLength"], uploadId=timeutil.slugid())
                present = False
        elif storage_type == "s3":
            if body.get("contentLength", 0) > self.settings.artifact_s3_max_bytes:
                raise ArtifactTooLarge(name=name, size=body["contentLength"], limit=self.settings.artifact_s3_max_bytes)
            details = {"blob": blob_path(task_id, run_id, name)}
            if body.get("contentEncoding"):
                details["contentEncoding"] = body["contentEncoding"]
        elif storage_type == "object":
            details = {
                "object": object_name(task_id, run_id, name),
                "projectId": task.definition["projectId"],
                "uploadId": timeutil.slugid(),
            }
            present = False
        elif storage_type == "reference":
            details = {"url": _http_reference(name, body["url"])}
        elif storage_type == "link":
            details = {"artifact": body["artifact"]}
        else:
            details = {"reason": body["reason"], "message": body["message"]}
        return Artifact(task_id, run_id, name, storage_type, content_type, expires, present, details)

    def _check_run(self, task: Task, run_id: int, expires: dt.datetime, now: dt.datetime) -> None:
        if run_id >= len(task.runs):
            raise ArtifactRunNotFound(taskId=task.task_id, runId=run_id)
        run = task.runs[run_id]
        if not run.worker_group:
            raise RunNeverClaimed(taskId=task.task_id, runId=run_id)
        if expires > task.expires:
            raise ArtifactExpiresInvalid(
                expires=timeutil.iso(expires),
                problem=f"an artifact may not outlive its task, which expires {task.definition['expires']}",
            )
        if not run_accepts_artifacts(run, now, self.settings.artifact_exception_window):
            raise RunNotAcceptingArtifacts(
                taskId=task.task_id,
                runId=run_id,
                state=run.state,
                window=f"{self.settings.artifact_exception_window:g}",
            )

    async def create(self, task_id: str, run_id: int, name: str, body: dict[str, Any]) -> Created:
        """createArtifact: `body` has passed the create-artifact-request schema."""
        await self.stores.ready()
        now = self.stores.now()
        indexed: set[dt.datetime] = set()
        async with self._lock(task_id):
            while True:
                task = await self.tasks.get(task_id)
                if task is None:
                    raise ArtifactTaskNotFound(taskId=task_id)
                wanted = self._requested(task, run_id, name, body, now)
                self._check_run(task, run_id, wanted.expires, now)
                old = await self.row(task_id, run_id, name)
                artifact = wanted
                if old is not None:
                    problems = conflicts(old, wanted)
                    if problems:
                        raise ArtifactConflict(name=name, runId=run_id, taskId=task_id, problems="; ".join(problems))
                    if old.storage_type in ("azure", "s3", "object"):  # the same data and upload as before
                        artifact = replace(wanted, details=old.details, present=old.present)
                    artifact.etag = old.etag
                    if (artifact.storage_type, artifact.expires, artifact.details) == (
                        old.storage_type,
                        old.expires,
                        old.details,
                    ):
                        return await self._created(artifact, task, now)  # the same request again: no write
                if artifact.expires not in indexed:  # the expiry index first: a crash leaves no unindexed row
                    await self.stores.artifact_expiry.add(index_key(task_id, run_id, name), artifact.expires)
                    indexed.add(artifact.expires)
                live = old is None and artifact.storage_type == "azure" and "contentLength" not in artifact.details
                if live:
                    live = self._track_live(task, run_id, name)
                # As Taskcluster: announced when present, except `s3` (whose data may never come).
                if (
                    artifact.present
                    and artifact.storage_type != "s3"
                    and (old is None or (old.storage_type, old.details) != (artifact.storage_type, artifact.details))
                ):
                    task.emit("artifact-created", run_id, artifact=artifact.to_event())
                op = Op("insert" if old is None else "replace", artifact.to_entity())
                if await self.tasks.write(task, extra=[op], touch=not live):  # the run records a live artifact
                    log.info(
                        "artifact %s created (%s)",
                        name,
                        artifact.storage_type,
                        extra=fields(event="artifact-created", taskId=task_id, runId=run_id),
                    )
                    return await self._created(artifact, task, now)
                task.emitted.clear()

    @staticmethod
    def _track_live(task: Task, run_id: int, name: str) -> bool:
        """An Azure-era `azure` artifact of a run still going: recorded in the run, so that its blob is sealed when
        the run resolves (shared/operations/writes/livelogs.py). One created after the run resolved (within the
        exception window) is sealed by its first read."""
        run = task.runs[run_id]
        if run.resolved_state:
            return False
        if len(run.live) >= MAX_LIVE_PER_RUN:
            raise TooManyLiveArtifacts(name=name, limit=MAX_LIVE_PER_RUN)
        run.live[name] = ""
        return True

    async def _created(self, artifact: Artifact, task: Task, now: dt.datetime) -> Created:
        """Where and until when the data is uploaded."""
        url_expires = min(now + dt.timedelta(seconds=self.settings.artifact_upload_ttl), artifact.expires)
        blob = artifact.blob
        if artifact.storage_type == "s3":
            return Created(artifact, self._s3_put_url(artifact, url_expires), url_expires)
        if artifact.storage_type == "azure" and blob is not None:
            # Once finished, the data may not change: the URL can then only create the blob, which exists.
            finished = artifact.present and "contentLength" in artifact.details
            put_url = await self.blobs.upload_url(self.container, blob, url_expires, overwrite=not finished)
            return Created(artifact, put_url, url_expires)
        if artifact.storage_type == "object":
            return Created(artifact, credentials=self._upload_credentials(artifact, task, now))
        return Created(artifact)

    def _s3_put_url(self, artifact: Artifact, expires: dt.datetime) -> str:
        """The queue's own URL that a plain PUT uploads the data to, as to a presigned S3 URL (it answers as S3
        does, and keeps the PUT's representation headers: shared/operations/s3_uploads.py)."""
        seconds = int(expires.timestamp())
        signature = upload_signature(
            self.settings.upload_key, artifact.task_id, artifact.run_id, artifact.name, seconds
        )
        path = upload_path(artifact.task_id, artifact.run_id, artifact.name)
        return f"{self.settings.public_root_url}/api/queue/v1{path}?expires={seconds}&signature={signature}"

    def _upload_credentials(self, artifact: Artifact, task: Task, now: dt.datetime) -> dict[str, str]:
        """Temporary credentials that may upload exactly this object (Taskcluster's clientId and scope)."""
        run = task.runs[artifact.run_id]
        client_id = f"artifact-upload/{task.task_id}/{artifact.run_id}/on/{run.worker_group}/{run.worker_id}"
        scope = f"object:upload:{artifact.details['projectId']}:{artifact.details['object']}"
        return self.stores.credentials(client_id, [scope], min(artifact.expires, now + UPLOAD_CREDENTIALS))

    # --- finishArtifact ---------------------------------------------------------------------------------------

    async def finish(self, task_id: str, run_id: int, name: str, upload_id: str) -> None:
        """finishArtifact: `azure` (with contentLength): the blob was uploaded, check it has the declared size;
        `object`: the object was uploaded and finished. Then the artifact is present and announced."""
        await self.stores.ready()
        snapshot: BlobInfo | None = None
        async with self._lock(task_id):
            while True:
                task = await self.tasks.get(task_id)
                if task is None:
                    raise errors.TaskNotFound(taskId=task_id)
                if run_id >= len(task.runs):
                    raise errors.RunNotFound(taskId=task_id, runId=run_id)
                artifact = await self.row(task_id, run_id, name)
                if artifact is None:
                    raise ArtifactNotFound(name=name, runId=run_id, taskId=task_id)
                if "uploadId" not in artifact.details:
                    raise NothingToFinish(name=name, storageType=artifact.storage_type)
                if upload_id != artifact.details["uploadId"]:
                    raise UploadIdMismatch(given=upload_id, name=name)
                if artifact.present:
                    return  # finished already
                if artifact.storage_type == "object":
                    await self._check_object(artifact, upload_id)
                else:
                    snapshot = snapshot or await self._check_blob(artifact)
                    artifact.details["snapshot"] = snapshot.snapshot
                artifact.present = True
                task.emit("artifact-created", run_id, artifact=artifact.to_event())
                if await self.tasks.write(task, extra=[Op("replace", artifact.to_entity())], touch=True):
                    log.info(
                        "artifact %s finished (%s)",
                        name,
                        artifact.storage_type,
                        extra=fields(event="artifact-created", taskId=task_id, runId=run_id),
                    )
                    return
                task.emitted.clear()

    async def _check_blob(self, artifact: Artifact) -> BlobInfo:
        # The artifact is a snapshot of what was uploaded: its putUrl may still write the blob until it expires,
        # but nothing can change the snapshot, which is what downloads read.
        snapshot = await self.blobs.snapshot(self.container, str(artifact.blob))
        declared = artifact.details["contentLength"]
        if snapshot is None:
            raise UploadIncomplete(
                name=artifact.name,
                problem="no blob was uploaded to its putUrl (or a block upload did not commit its block list)",
            )
        if snapshot.size != declared:
            raise UploadIncomplete(
                name=artifact.name,
                problem=f"the uploaded blob holds {snapshot.size} bytes, but contentLength {declared} was declared",
            )
        return snapshot

    async def _check_object(self, artifact: Artifact, upload_id: str) -> None:
        found = await self.objects.stored(artifact.details["object"])
        if found is None or found.upload_id != upload_id or found.state != "finished":
            raise UploadIncomplete(
                name=artifact.name,
                problem=f"object `{artifact.details['object']}` was not "
                "uploaded with this uploadId and finished (object.createUpload, the upload, then "
                "object.finishUpload)",
            )
