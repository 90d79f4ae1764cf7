"""Artifact operations: createArtifact, finishArtifact, and the reads that follow links and sign download URLs.

Every artifact write is one transaction with the task entity, conditional on the ETag read (the artifact row is in
the task's partition, shared/domain/artifacts.py): the run state the write was decided on is the state it is applied
to (no artifact slips in after the run resolved), and the `artifact-created` event is recorded with the artifact
or not at all.

Storage types:
- `azure` (this queue's extension, the Azure-era type): the data is a block blob in the artifact container.
  createArtifact answers with a SAS URL that may only write that one blob, for QUEUE_ARTIFACT_UPLOAD_TTL, and an
  `uploadId`. The client uploads (one PUT, or blocks and a block list for large files) and calls finishArtifact,
  which takes a snapshot of the blob, checks the snapshot has the declared size and makes the artifact present
  (and announces it). Downloads read that snapshot, which no SAS can write, and are served with the declared
  content type (an attachment where a browser would run it): the uploader can change neither (docs/artifacts.md).
- `reference` (a URL to redirect to), `link` (another artifact of the same run), `error` (reason and message,
  answered with 424): present as soon as they are created.
`s3` and `object` need services this queue does not have (S3, Taskcluster's object service): refused with 400.

Before an artifact (or a later `expires`) is written, a row goes in the ArtifactExpiry index; the expiry timer
(shared/operations/expiry.py) deletes it when it expires.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import weakref
from dataclasses import dataclass, replace
from typing import Any

from shared import errors, timeutil
from shared.domain.artifacts import (
    ARTIFACT_ROW,
    DEFAULT_CONTENT_TYPE,
    EXPIRES_PAST,
    MAX_LINK_DEPTH,
    MAX_NAME_CHARS,
    Artifact,
    blob_path,
    conflicts,
    index_key,
    row_key,
    run_accepts_artifacts,
    served_as,
)
from shared.domain.tasks import TASKS_TABLE, Task
from shared.logs import fields
from shared.operations.repository import TaskRepository
from shared.storage.base import BlobInfo, BlobStore, Op

log = logging.getLogger("queue.artifacts")


@dataclass(frozen=True)
class Created:
    """What createArtifact made: the artifact, and for `azure` the URL to upload to and until when it works."""

    artifact: Artifact
    put_url: str | None = None
    put_url_expires: dt.datetime | None = None


class StorageTypeUnsupported(errors.InputError):
    """storageType `{storageType}` is not supported by this queue, which stores artifacts in Azure Blob Storage:
use `azure` (upload to the returned putUrl, then call finishArtifact), or `reference`, `link` or `error`"""


class ArtifactNameInvalid(errors.InputError):
    """Artifact name is too long: at most {limit} characters"""


class ArtifactExpiresInvalid(errors.InputError):
    """Artifact expires {expires}: {problem}"""


class ArtifactTaskNotFound(errors.InputError):
    """Task `{taskId}` not found: artifacts can only be created for an existing task"""


class ArtifactRunNotFound(errors.InputError):
    """Run {runId} of task `{taskId}` not found"""


class RunNeverClaimed(errors.InputError):
    """Run {runId} of task `{taskId}` was never claimed: artifacts belong to a run a worker claimed"""


class RunNotAcceptingArtifacts(errors.RequestConflict):
    """Run {runId} of task `{taskId}` is {state}: artifacts can be created while a run is running, and for {window}
seconds after it resolved as exception"""


class ArtifactConflict(errors.RequestConflict):
    """Artifact `{name}` of run {runId} of task `{taskId}` exists with different properties: {problems}"""


class ArtifactNotFound(errors.ResourceNotFound):
    """Artifact `{name}` of run {runId} of task `{taskId}` not found"""


class ArtifactNotUploaded(errors.ResourceNotFound):
    """Artifact `{name}` of run {runId} of task `{taskId}` is not available: its upload was not finished
(finishArtifact)"""


class ArtifactExpired(errors.ResourceExpired):
    """Artifact `{name}` of run {runId} of task `{taskId}` expired at {expires}"""


class TaskHasNoRuns(errors.ResourceNotFound):
    """Task `{taskId}` has no runs, so it has no latest artifacts"""


class ArtifactLinkInvalid(errors.InputError):
    """Artifact `{name}` of run {runId} of task `{taskId}` is a link chain that {problem}: {chain}"""


class NothingToFinish(errors.InputError):
    """Artifact `{name}` is a `{storageType}` artifact: only `azure` artifacts are uploaded and finished"""


class UploadIdMismatch(errors.InputError):
    """uploadId `{given}` is not the uploadId createArtifact gave for artifact `{name}`"""


class UploadIncomplete(errors.InputError):
    """Artifact `{name}` cannot be finished: {problem}"""


class Artifacts:
    def __init__(self, tasks: TaskRepository) -> None:
        self.tasks = tasks
        self.stores = tasks.stores
        self.tables = self.stores.tables
        self.settings = self.stores.settings
        # One artifact write per task at a time in this process: a worker creating many artifacts at once would
        # otherwise make every write but one lose its ETag race, again and again.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

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

    async def _row(self, task_id: str, run_id: int, name: str) -> Artifact | None:
        entity = await self.tables.get(TASKS_TABLE, task_id, row_key(run_id, name))
        return Artifact.from_entity(entity) if entity is not None else None

    # --- createArtifact ---------------------------------------------------------------------------------------

    def _requested(self, task_id: str, run_id: int, name: str, body: dict[str, Any], now: dt.datetime) -> Artifact:
        storage_type = body["storageType"]
        if storage_type in ("s3", "object"):
            raise StorageTypeUnsupported(storageType=storage_type)
        if len(name) > MAX_NAME_CHARS:
            raise ArtifactNameInvalid(limit=MAX_NAME_CHARS)
        expires = timeutil.to_ms(timeutil.parse(body["expires"]))
        if expires < now - EXPIRES_PAST:
            raise ArtifactExpiresInvalid(expires=timeutil.iso(expires),
                                         problem="it must not be more than 15 minutes in the past")
        details: dict[str, Any]
        if storage_type == "azure":
            details = {"contentLength": body["contentLength"], "blob": blob_path(task_id, run_id, name),
                       "uploadId": timeutil.slugid()}
        elif storage_type == "reference":
            details = {"url": body["url"]}
        elif storage_type == "link":
            details = {"artifact": body["artifact"]}
        else:
            details = {"reason": body["reason"], "message": body["message"]}
        return Artifact(task_id, run_id, name, storage_type, body.get("contentType") or DEFAULT_CONTENT_TYPE,
                        expires, storage_type != "azure", details)

    def _check_run(self, task: Task, run_id: int, expires: dt.datetime, now: dt.datetime) -> None:
        if run_id >= len(task.runs):
            raise ArtifactRunNotFound(taskId=task.task_id, runId=run_id)
        run = task.runs[run_id]
        if not run.worker_group:
            raise RunNeverClaimed(taskId=task.task_id, runId=run_id)
        if expires > task.expires:
            raise ArtifactExpiresInvalid(expires=timeutil.iso(expires), problem=f"an artifact may not outlive its "
                                         f"task, which expires {task.definition['expires']}")
        if not run_accepts_artifacts(run, now, self.settings.artifact_exception_window):
            raise RunNotAcceptingArtifacts(taskId=task.task_id, runId=run_id, state=run.state,
                                           window=f"{self.settings.artifact_exception_window:g}")

    async def create(self, task_id: str, run_id: int, name: str, body: dict[str, Any]) -> Created:
        """createArtifact: `body` has passed the create-artifact-request schema."""
        await self.stores.ready()
        now = self.stores.now()
        wanted = self._requested(task_id, run_id, name, body, now)
        indexed: set[dt.datetime] = set()
        async with self._lock(task_id):
            while True:
                task = await self.tasks.get(task_id)
                if task is None:
                    raise ArtifactTaskNotFound(taskId=task_id)
                self._check_run(task, run_id, wanted.expires, now)
                old = await self._row(task_id, run_id, name)
                artifact = wanted
                if old is not None:
                    problems = conflicts(old, wanted)
                    if problems:
                        raise ArtifactConflict(name=name, runId=run_id, taskId=task_id, problems="; ".join(problems))
                    if old.storage_type == "azure":  # the same blob and upload as before, a fresh URL
                        artifact = replace(wanted, details=old.details, present=old.present)
                    artifact.etag = old.etag
                    if (artifact.storage_type, artifact.expires, artifact.details) == (
                            old.storage_type, old.expires, old.details):
                        return await self._created(artifact, now)  # the same request again: nothing to write
                if artifact.expires not in indexed:  # the expiry index first: a crash leaves no unindexed row
                    await self.stores.artifact_expiry.add(index_key(task_id, run_id, name), artifact.expires)
                    indexed.add(artifact.expires)
                if artifact.present and (old is None or (old.storage_type, old.details) != (
                        artifact.storage_type, artifact.details)):
                    task.emit("artifact-created", run_id, artifact=artifact.to_event())
                op = Op("insert" if old is None else "replace", artifact.to_entity())
                if await self.tasks.write(task, extra=[op], touch=True):
                    log.info("artifact %s created (%s)", name, artifact.storage_type,
                             extra=fields(event="artifact-created", taskId=task_id, runId=run_id))
                    return await self._created(artifact, now)
                task.emitted.clear()

    async def _created(self, artifact: Artifact, now: dt.datetime) -> Created:
        """For `azure`, where and until when to upload."""
        if artifact.storage_type != "azure":
            return Created(artifact)
        url_expires = min(now + dt.timedelta(seconds=self.settings.artifact_upload_ttl), artifact.expires)
        # Once finished, the data may not change: the URL can then only create the blob, which exists.
        put_url = await self.blobs.upload_url(self.container, artifact.details["blob"], url_expires,
                                              overwrite=not artifact.present)
        return Created(artifact, put_url, url_expires)

    # --- finishArtifact ---------------------------------------------------------------------------------------

    async def finish(self, task_id: str, run_id: int, name: str, upload_id: str) -> None:
        """finishArtifact: the blob was uploaded; check it exists with the declared size and make it present."""
        await self.stores.ready()
        snapshot: BlobInfo | None = None
        async with self._lock(task_id):
            while True:
                task = await self.tasks.get(task_id)
                if task is None:
                    raise errors.TaskNotFound(taskId=task_id)
                if run_id >= len(task.runs):
                    raise errors.RunNotFound(taskId=task_id, runId=run_id)
                artifact = await self._row(task_id, run_id, name)
                if artifact is None:
                    raise ArtifactNotFound(name=name, runId=run_id, taskId=task_id)
                if artifact.storage_type != "azure":
                    raise NothingToFinish(name=name, storageType=artifact.storage_type)
                if upload_id != artifact.details["uploadId"]:
                    raise UploadIdMismatch(given=upload_id, name=name)
                if artifact.present:
                    return  # finished already
                # The artifact is a snapshot of what was uploaded: its putUrl may still write the blob until it
                # expires, but nothing can change the snapshot, which is what downloads read.
                snapshot = snapshot or await self.blobs.snapshot(self.container, artifact.details["blob"])
                declared = artifact.details["contentLength"]
                if snapshot is None:
                    raise UploadIncomplete(name=name, problem="no blob was uploaded to its putUrl (or a block "
                                           "upload did not commit its block list)")
                if snapshot.size != declared:
                    raise UploadIncomplete(name=name, problem=f"the uploaded blob holds {snapshot.size} bytes, but "
                                           f"contentLength {declared} was declared")
                artifact.present = True
                artifact.details["snapshot"] = snapshot.snapshot
                task.emit("artifact-created", run_id, artifact=artifact.to_event())
                if await self.tasks.write(task, extra=[Op("replace", artifact.to_entity())], touch=True):
                    log.info("artifact %s uploaded (%d bytes)", name, declared,
                             extra=fields(event="artifact-created", taskId=task_id, runId=run_id))
                    return
                task.emitted.clear()

    # --- reading ----------------------------------------------------------------------------------------------

    async def _run_of(self, task_id: str, run_id: int | None) -> int:
        """The run meant: `run_id`, or the latest run when None; 404 when the task or run does not exist."""
        await self.stores.ready()
        task = await self.tasks.load(task_id)
        if run_id is None:
            if not task.runs:
                raise TaskHasNoRuns(taskId=task_id)
            return task.last_run_id
        if run_id >= len(task.runs):
            raise errors.RunNotFound(taskId=task_id, runId=run_id)
        return run_id

    async def _named(self, task_id: str, run_id: int | None, name: str) -> tuple[int, Artifact | None]:
        """The run meant and its artifact `name` (None if there is none). With a given run the artifact row is
        read first: the task is read only to tell which 404 a missing artifact is."""
        if run_id is None:
            run_id = await self._run_of(task_id, None)
            return run_id, await self._row(task_id, run_id, name)
        await self.stores.ready()
        artifact = await self._row(task_id, run_id, name)
        if artifact is None:
            await self._run_of(task_id, run_id)
        return run_id, artifact

    async def follow(self, task_id: str, run_id: int | None, name: str) -> tuple[list[str], Artifact]:
        """The artifact a fetch of `name` serves, following links, and the names on the way (the caller needs
        `queue:get-artifact:<n>` for each). 404 missing or not uploaded, 410 expired, 400 a cycle."""
        run_id, first = await self._named(task_id, run_id, name)
        now = self.stores.now()
        chain = [name]
        while True:
            artifact = first if len(chain) == 1 else await self._row(task_id, run_id, chain[-1])
            if artifact is None:
                raise ArtifactNotFound(name=chain[-1], runId=run_id, taskId=task_id)
            if not artifact.present:
                raise ArtifactNotUploaded(name=chain[-1], runId=run_id, taskId=task_id)
            if artifact.expires < now:
                raise ArtifactExpired(name=chain[-1], runId=run_id, taskId=task_id,
                                      expires=timeutil.iso(artifact.expires))
            if artifact.storage_type != "link":
                return chain, artifact
            target = artifact.details["artifact"]
            problem = ("loops" if target in chain else f"is longer than {MAX_LINK_DEPTH} links"
                       if len(chain) > MAX_LINK_DEPTH else None)
            if problem is not None:
                raise ArtifactLinkInvalid(name=name, runId=run_id, taskId=task_id, problem=problem,
                                          chain=" -> ".join([*chain, target]))
            chain.append(target)

    async def url_of(self, artifact: Artifact) -> str:
        """Where the artifact's data is read: a short-lived read URL of its blob, or the reference's URL."""
        if artifact.storage_type == "azure":
            expires = timeutil.now() + dt.timedelta(seconds=self.settings.artifact_download_ttl)
            # Artifacts finished before snapshots were taken have none: their blob itself is read.
            return await self.blobs.download_url(self.container, artifact.details["blob"], expires,
                                                 snapshot=artifact.details.get("snapshot"),
                                                 served_as=served_as(artifact.content_type))
        return str(artifact.details["url"])

    async def info(self, task_id: str, run_id: int | None, name: str) -> Artifact:
        """artifactInfo: the artifact itself (a link is not followed); only uploaded artifacts are shown."""
        run_id, artifact = await self._named(task_id, run_id, name)
        if artifact is None or not artifact.present:
            raise ArtifactNotFound(name=name, runId=run_id, taskId=task_id)
        return artifact

    async def list(self, task_id: str, run_id: int | None, *, limit: int,
                   continuation: str | None) -> tuple[list[Artifact], str | None]:
        """listArtifacts: a page of the run's uploaded artifacts, in name order."""
        run_id = await self._run_of(task_id, run_id)
        page = await self.tables.query(
            TASKS_TABLE, "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi and present eq @present",
            {"pk": task_id, "lo": f"{ARTIFACT_ROW}{run_id}:", "hi": f"{ARTIFACT_ROW}{run_id};", "present": True},
            limit=limit, continuation=continuation)
        return [Artifact.from_entity(e) for e in page.entities], page.continuation
