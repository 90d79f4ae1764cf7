"""Artifacts: what a run produced. The record is a row of the task's partition; the data is a blob.

Storage: an artifact is the row `artifact:<runId>:<name>` (name key-encoded) of the Tasks table, in the task's
partition. So every artifact write is one transaction with the task entity, conditional on the ETag read: the
run state the write was decided on is the state it is applied to (no artifact slips in after the run resolved),
and the `artifact-created` event (shared/domain/eventlog.py) is recorded with the artifact or not at all.

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

Expiry: before an artifact (or a later `expires`) is written, a row goes in the ArtifactExpiry index (PK = hour
of `expires`). The timer re-reads each artifact it finds there, deletes the blob first and then the row (only
if unchanged since read), so an artifact whose expiry was extended, or that has not expired, is never deleted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import re
import time
import weakref
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from shared import errors, timeutil
from shared.domain.expiry import ExpiryIndex
from shared.domain.tasks import TASKS_TABLE, Run, Task
from shared.logs import fields
from shared.storage.base import (
    BlobInfo,
    BlobStore,
    Entity,
    Op,
    ServedAs,
    delete_all,
    encode_key,
    pack_json,
    unpack_json,
)

if TYPE_CHECKING:
    from shared.service import QueueService

log = logging.getLogger("queue.artifacts")

ARTIFACT_ROW, ARTIFACT_ROW_END = "artifact:", "artifact;"  # ";" sorts right after ":"
ARTIFACT_EXPIRY_TABLE = "ArtifactExpiry"
MAX_NAME_CHARS = 1024  # artifact-response.yml
# Azure Table keys hold 1 KiB of UTF-16: 512 characters. A row key (and its expiry index key, which adds the taskId)
# that would be longer names the artifact by a hash of its name instead (such artifacts list last).
MAX_KEY_CHARS = 512
INDEX_SEPARATOR = "~"  # not in taskIds
EXPIRES_PAST = dt.timedelta(minutes=15)  # how far in the past `expires` may be (Taskcluster)
MAX_LINK_DEPTH = 32
DEFAULT_CONTENT_TYPE = "application/binary"
CONTENT_TYPE_HEADER = "x-ms-blob-content-type"
# Content types a browser displays without running anything: served inline. Any other is an attachment.
INLINE_TYPES = frozenset({"text/plain", "text/csv", "application/json", "application/x-ndjson", "image/png",
                          "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"})
# Blob names kept readable when they are plainly safe in a URL path; any other name is hashed.
_PLAIN_BLOB_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*$")


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


def served_as(content_type: str) -> ServedAs:
    """How a blob artifact's download answers: with its declared content type, and as an attachment (a download,
    not a page) unless the type is one a browser only displays. An artifact declared `text/html` or
    `image/svg+xml` could otherwise run script in the storage account's origin."""
    media = content_type.split(";", 1)[0].strip().lower()
    return ServedAs(content_type, None if media in INLINE_TYPES else "attachment")


def row_key(run_id: int, name: str) -> str:
    key = f"{ARTIFACT_ROW}{run_id}:{encode_key(name)}"
    if len(key) + 23 > MAX_KEY_CHARS:  # 22 characters of taskId and the separator, in the index key
        key = f"{ARTIFACT_ROW}{run_id}:~{hashlib.sha256(name.encode()).hexdigest()}"
    return key


def _index_key(task_id: str, run_id: int, name: str) -> str:
    return f"{task_id}{INDEX_SEPARATOR}{row_key(run_id, name)}"


def _parse_index_key(key: str) -> tuple[str, str]:
    task_id, row = key.split(INDEX_SEPARATOR, 1)
    return task_id, row


def blob_path(task_id: str, run_id: int, name: str) -> str:
    """`<taskId>/<runId>/<name>`; a name that is not plainly URL-safe (dot segments, `\\`, `?`...) is hashed."""
    if _PLAIN_BLOB_NAME.match(name) and not any(part.endswith(".") for part in name.split("/")):
        return f"{task_id}/{run_id}/{name}"
    return f"{task_id}/{run_id}/~{hashlib.sha256(name.encode()).hexdigest()}"


@dataclass
class Artifact:
    task_id: str
    run_id: int
    name: str
    storage_type: str
    content_type: str
    expires: str
    present: bool
    # azure: contentLength, blob, uploadId; reference: url; link: artifact; error: reason, message
    details: dict[str, Any] = field(default_factory=dict)
    etag: str | None = None

    def to_api(self) -> dict[str, Any]:
        """artifact-response (storageType `azure` included: this queue's extension)."""
        out: dict[str, Any] = {"storageType": self.storage_type, "name": self.name, "expires": self.expires,
                               "contentType": self.content_type}
        if "contentLength" in self.details:
            out["contentLength"] = self.details["contentLength"]
        return out

    def to_event(self) -> dict[str, Any]:
        return {"storageType": self.storage_type, "name": self.name, "expires": self.expires,
                "contentType": self.content_type}

    def to_entity(self) -> Entity:
        return Entity(self.task_id, row_key(self.run_id, self.name), {
            "runId": self.run_id, "name": self.name, "storageType": self.storage_type,
            "contentType": self.content_type, "expires": self.expires, "present": self.present,
            **pack_json("details", self.details)}, self.etag)

    @classmethod
    def from_entity(cls, entity: Entity) -> Artifact:
        data = entity.data
        return cls(entity.partition_key, int(data["runId"]), data["name"], data["storageType"],
                   data["contentType"], data["expires"], bool(data["present"]), unpack_json("details", data),
                   entity.etag)


def _conflicts(old: Artifact, new: Artifact) -> list[str]:
    """Why `new` may not replace `old` (Taskcluster's rules): `expires` may grow, a reference may change its URL
    or become a link; anything else must be the same."""
    problems = []
    if new.expires < old.expires:
        problems.append(f"expires may be extended, not shortened (it is {old.expires})")
    if old.storage_type != new.storage_type:
        if (old.storage_type, new.storage_type) != ("reference", "link"):
            problems.append(f"storageType is `{old.storage_type}` (only a reference may become a link)")
        return problems
    if old.content_type != new.content_type:
        problems.append(f"contentType is `{old.content_type}`")
    if old.storage_type == "azure":
        if old.details["contentLength"] != new.details["contentLength"]:
            problems.append(f"contentLength is {old.details['contentLength']}")
    elif old.storage_type in ("link", "error"):
        for key, value in old.details.items():
            if new.details.get(key) != value:
                problems.append(f"{key} is `{value}`")
    return problems


def _run_accepts_artifacts(run: Run, now: dt.datetime, window: float) -> bool:
    if run.state == "running":
        return True
    return (run.state == "exception" and run.resolved is not None
            and timeutil.parse(run.resolved) + dt.timedelta(seconds=window) > now)


class Artifacts:
    """The artifact operations of a QueueService (which they share the task partition and its writes with)."""

    def __init__(self, service: QueueService, blobs: BlobStore | None) -> None:
        self.service = service
        self.tables = service.tables
        self.settings = service.settings
        self._blobs = blobs
        self.index = ExpiryIndex(self.tables, ARTIFACT_EXPIRY_TABLE)
        # One artifact write per task at a time in this process: a worker creating many artifacts at once would
        # otherwise make every write but one lose its ETag race, again and again.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @property
    def blobs(self) -> BlobStore:
        if self._blobs is None:
            raise errors.InternalServerError("No blob storage is configured for artifacts")
        return self._blobs

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
        expires = timeutil.normalize(body["expires"])
        if timeutil.parse(expires) < now - EXPIRES_PAST:
            raise ArtifactExpiresInvalid(expires=expires, problem="it must not be more than 15 minutes in the past")
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

    def _check_run(self, task: Task, run_id: int, expires: str, now: dt.datetime) -> None:
        if run_id >= len(task.runs):
            raise ArtifactRunNotFound(taskId=task.task_id, runId=run_id)
        run = task.runs[run_id]
        if not run.worker_group:
            raise RunNeverClaimed(taskId=task.task_id, runId=run_id)
        if expires > task.definition["expires"]:
            raise ArtifactExpiresInvalid(expires=expires, problem=f"an artifact may not outlive its task, which "
                                         f"expires {task.definition['expires']}")
        if not _run_accepts_artifacts(run, now, self.settings.artifact_exception_window):
            raise RunNotAcceptingArtifacts(taskId=task.task_id, runId=run_id, state=run.state,
                                           window=f"{self.settings.artifact_exception_window:g}")

    async def create(self, task_id: str, run_id: int, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """createArtifact: `body` has passed the create-artifact-request schema."""
        await self.service.ensure_storage()
        now = self.service.clock()
        wanted = self._requested(task_id, run_id, name, body, now)
        indexed: set[str] = set()
        async with self._lock(task_id):
            while True:
                task = await self.service._get(task_id)
                if task is None:
                    raise ArtifactTaskNotFound(taskId=task_id)
                self._check_run(task, run_id, wanted.expires, now)
                old = await self._row(task_id, run_id, name)
                artifact = wanted
                if old is not None:
                    problems = _conflicts(old, wanted)
                    if problems:
                        raise ArtifactConflict(name=name, runId=run_id, taskId=task_id, problems="; ".join(problems))
                    if old.storage_type == "azure":  # the same blob and upload as before, a fresh URL
                        artifact = replace(wanted, details=old.details, present=old.present)
                    artifact.etag = old.etag
                    if (artifact.storage_type, artifact.expires, artifact.details) == (
                            old.storage_type, old.expires, old.details):
                        return await self._created(artifact, now)  # the same request again: nothing to write
                if artifact.expires not in indexed:  # the expiry index first: a crash leaves no unindexed row
                    await self.index.add(_index_key(task_id, run_id, name), artifact.expires)
                    indexed.add(artifact.expires)
                if artifact.present and (old is None or (old.storage_type, old.details) != (
                        artifact.storage_type, artifact.details)):
                    task.emit("artifact-created", run_id, artifact=artifact.to_event())
                op = Op("insert" if old is None else "replace", artifact.to_entity())
                if await self.service._write(task, extra=[op], touch=True):
                    log.info("artifact %s created (%s)", name, artifact.storage_type,
                             extra=fields(event="artifact-created", taskId=task_id, runId=run_id))
                    return await self._created(artifact, now)
                task.emitted.clear()

    async def _created(self, artifact: Artifact, now: dt.datetime) -> dict[str, Any]:
        """The createArtifact response: for `azure`, where and how to upload."""
        if artifact.storage_type != "azure":
            return {"storageType": artifact.storage_type}
        url_expires = min(now + dt.timedelta(seconds=self.settings.artifact_upload_ttl),
                          timeutil.parse(artifact.expires))
        return {
            "storageType": "azure",
            # Once finished, the data may not change: the URL can then only create the blob, which exists.
            "putUrl": await self.blobs.upload_url(self.container, artifact.details["blob"], url_expires,
                                            overwrite=not artifact.present),
            "expires": timeutil.iso(url_expires),
            "contentType": artifact.content_type,
            "uploadId": artifact.details["uploadId"],
            # A single PUT sends both; a block upload sends the content type with its block list.
            "headers": {"x-ms-blob-type": "BlockBlob", CONTENT_TYPE_HEADER: artifact.content_type},
        }

    # --- finishArtifact ---------------------------------------------------------------------------------------

    async def finish(self, task_id: str, run_id: int, name: str, upload_id: str) -> None:
        """finishArtifact: the blob was uploaded; check it exists with the declared size and make it present."""
        await self.service.ensure_storage()
        snapshot: BlobInfo | None = None
        async with self._lock(task_id):
            while True:
                task = await self.service._get(task_id)
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
                if await self.service._write(task, extra=[Op("replace", artifact.to_entity())], touch=True):
                    log.info("artifact %s uploaded (%d bytes)", name, declared,
                             extra=fields(event="artifact-created", taskId=task_id, runId=run_id))
                    return
                task.emitted.clear()

    # --- reading ----------------------------------------------------------------------------------------------

    async def _run_of(self, task_id: str, run_id: int | None) -> int:
        """The run meant: `run_id`, or the latest run when None; 404 when the task or run does not exist."""
        await self.service.ensure_storage()
        task = await self.service._load(task_id)
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
        await self.service.ensure_storage()
        artifact = await self._row(task_id, run_id, name)
        if artifact is None:
            await self._run_of(task_id, run_id)
        return run_id, artifact

    async def follow(self, task_id: str, run_id: int | None, name: str) -> tuple[list[str], Artifact]:
        """The artifact a fetch of `name` serves, following links, and the names on the way (the caller needs
        `queue:get-artifact:<n>` for each). 404 missing or not uploaded, 410 expired, 400 a cycle."""
        run_id, first = await self._named(task_id, run_id, name)
        now = timeutil.iso(self.service.clock())
        chain = [name]
        while True:
            artifact = first if len(chain) == 1 else await self._row(task_id, run_id, chain[-1])
            if artifact is None:
                raise ArtifactNotFound(name=chain[-1], runId=run_id, taskId=task_id)
            if not artifact.present:
                raise ArtifactNotUploaded(name=chain[-1], runId=run_id, taskId=task_id)
            if artifact.expires < now:
                raise ArtifactExpired(name=chain[-1], runId=run_id, taskId=task_id, expires=artifact.expires)
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

    async def info(self, task_id: str, run_id: int | None, name: str) -> dict[str, Any]:
        """artifactInfo: the artifact itself (a link is not followed); only uploaded artifacts are shown."""
        run_id, artifact = await self._named(task_id, run_id, name)
        if artifact is None or not artifact.present:
            raise ArtifactNotFound(name=name, runId=run_id, taskId=task_id)
        return artifact.to_api()

    async def list(self, task_id: str, run_id: int | None, *, limit: int,
                   continuation: str | None) -> dict[str, Any]:
        """listArtifacts: a page of the run's uploaded artifacts, in name order."""
        run_id = await self._run_of(task_id, run_id)
        page = await self.tables.query(
            TASKS_TABLE, "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi and present eq @present",
            {"pk": task_id, "lo": f"{ARTIFACT_ROW}{run_id}:", "hi": f"{ARTIFACT_ROW}{run_id};", "present": True},
            limit=limit, continuation=continuation)
        out: dict[str, Any] = {"artifacts": [Artifact.from_entity(e).to_api() for e in page.entities]}
        if page.continuation:
            out["continuationToken"] = page.continuation
        return out

    # --- expiry -----------------------------------------------------------------------------------------------

    async def _delete(self, artifact: Artifact) -> bool:
        """The blob first, then the row (if unchanged since read): a row never points to a deleted blob
        unless its expiry was extended in between, which the ETag catches."""
        if artifact.storage_type == "azure":
            await self.blobs.delete(self.container, artifact.details["blob"])
        return await self.tables.delete(TASKS_TABLE, artifact.task_id, row_key(artifact.run_id, artifact.name),
                                        etag=artifact.etag)

    async def expire(self, *, batch: int = 100, budget_seconds: float = 60) -> int:
        """Delete artifacts whose `expires` is more than QUEUE_EXPIRY_DELAY ago, a batch at a time."""
        await self.service.ensure_storage()
        cutoff = timeutil.iso(self.service.clock() - dt.timedelta(seconds=self.settings.expiry_delay))
        give_up = time.monotonic() + budget_seconds
        limit = asyncio.Semaphore(16)
        deleted = 0

        async def expire(hour: str, key: str) -> None:
            nonlocal deleted
            task_id, row = _parse_index_key(key)
            async with limit:
                entity = await self.tables.get(TASKS_TABLE, task_id, row)
                artifact = Artifact.from_entity(entity) if entity is not None else None
                # Gone already, or its expiry was extended since this entry (the later one is indexed too).
                if artifact is not None and artifact.expires < cutoff:
                    if not await self._delete(artifact):
                        log.warning("artifact %s changed while expiring; kept", artifact.name,
                                    extra=fields(taskId=task_id))
                        return  # looked at again on the next run
                    deleted += 1
                await self.index.remove(hour, key)

        while time.monotonic() < give_up:
            due = await self.index.due(cutoff, batch)
            if not due:
                break
            await asyncio.gather(*(expire(hour, key) for hour, key in due))
        if deleted:
            log.info("expired %d artifacts", deleted, extra=fields(event="artifacts-expired"))
        return deleted

    async def forget_task(self, task_id: str) -> None:
        """Delete every artifact of an expiring task (all expired: none may outlive its task), blobs first."""
        continuation: str | None = None
        while True:
            page = await self.tables.query(TASKS_TABLE, "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                                           {"pk": task_id, "lo": ARTIFACT_ROW, "hi": ARTIFACT_ROW_END},
                                           limit=100, continuation=continuation)
            artifacts = [Artifact.from_entity(e) for e in page.entities]
            await asyncio.gather(*(self.blobs.delete(self.container, a.details["blob"])
                                   for a in artifacts if a.storage_type == "azure"))
            await delete_all(self.tables, TASKS_TABLE, [(e.partition_key, e.row_key) for e in page.entities])
            continuation = page.continuation
            if continuation is None:
                return
