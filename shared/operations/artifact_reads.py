"""Artifact reads: following links to the artifact a fetch serves, where its data is read (a signed URL of a blob's
snapshot, a reference's URL, or an object and credentials to download it), artifactInfo and the listings.

An `s3` artifact, and an `azure` one created without `contentLength` (the Azure-era form), is present from its
creation, and its worker calls nothing after uploading. An `s3` artifact's PUT through the queue records the
snapshot downloads read (shared/operations/s3_uploads.py). One uploaded to the Put Block URL earlier versions handed
out is sealed when first read: its one block is committed with the declared content type and encoding, a snapshot
is taken, and downloads read that snapshot from then on. An artifact whose data has not been uploaded yet answers
404.
An Azure-era `azure` artifact of a run still pending or running is not sealed: reads go to its blob as it is, so a
log the worker appends to (worker/live_log.py) is read as it grows; once the run resolved, reads go to the snapshot
taken when it resolved (shared/operations/writes/livelogs.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass

from shared import errors, timeutil
from shared.domain.artifacts import (
    ARTIFACT_ROW,
    MAX_LINK_DEPTH,
    S3_BLOCK,
    Artifact,
    ArtifactExpired,
    ArtifactLinkInvalid,
    ArtifactNotFound,
    ArtifactNotUploaded,
    TaskHasNoRuns,
    served_as,
)
from shared.domain.tasks import TASKS_TABLE
from shared.operations.artifacts import Artifacts
from shared.operations.writes.livelogs import NOT_UPLOADED
from shared.storage.base import BlobInfo

DOWNLOAD_CREDENTIALS = dt.timedelta(hours=1)  # an object artifact's download credentials (Taskcluster's)
CLIENT_ID_SAFE = re.compile(r"[A-Za-z0-9!@/:.+|_-]+")  # what may stand in a clientId (and a Hawk header's id)


@dataclass(frozen=True)
class Location:
    """Where an artifact's data is read: a URL to GET without credentials, or (`object`) the object's name and
    credentials that may download it from the Object service."""

    url: str | None = None
    object_name: str | None = None
    credentials: dict[str, str] | None = None


class ArtifactReads:
    def __init__(self, artifacts: Artifacts) -> None:
        self.artifacts = artifacts
        self.tasks, self.objects = artifacts.tasks, artifacts.objects
        self.stores = artifacts.stores
        self.settings = self.stores.settings

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
            return run_id, await self.artifacts.row(task_id, run_id, name)
        await self.stores.ready()
        artifact = await self.artifacts.row(task_id, run_id, name)
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
            artifact = first if len(chain) == 1 else await self.artifacts.row(task_id, run_id, chain[-1])
            if artifact is None:
                raise ArtifactNotFound(name=chain[-1], runId=run_id, taskId=task_id)
            if not artifact.present:
                raise ArtifactNotUploaded(name=chain[-1], runId=run_id, taskId=task_id)
            if artifact.expires < now:
                raise ArtifactExpired(
                    name=chain[-1], runId=run_id, taskId=task_id, expires=timeutil.iso(artifact.expires)
                )
            if artifact.storage_type != "link":
                return chain, artifact
            target = artifact.details["artifact"]
            problem = (
                "loops"
                if target in chain
                else f"is longer than {MAX_LINK_DEPTH} links"
                if len(chain) > MAX_LINK_DEPTH
                else None
            )
            if problem is not None:
                raise ArtifactLinkInvalid(
                    name=name, runId=run_id, taskId=task_id, problem=problem, chain=" -> ".join([*chain, target])
                )
            chain.append(target)

    async def location(self, artifact: Artifact) -> Location:
        """Where the artifact's data is read (sealing an `s3` or Azure-era `azure` artifact's data first)."""
        if artifact.storage_type == "object":
            stored = await self.objects.finished(artifact.details["object"])
            url, _ = await self.objects.url(stored)
            return Location(url, artifact.details["object"], self._download_credentials(artifact))
        if artifact.blob is None:
            return Location(str(artifact.details["url"]))
        snapshot: str | None
        if artifact.sealed:
            # Artifacts finished before snapshots were taken have none: their blob itself is read.
            snapshot = artifact.details.get("snapshot")
        elif artifact.storage_type == "azure":
            snapshot = await self._live_snapshot(artifact)
        else:
            snapshot = (await self._seal(artifact)).details["snapshot"]
        expires = self.stores.now() + dt.timedelta(seconds=self.settings.artifact_download_ttl)
        url = await self.artifacts.blobs.download_url(
            self.artifacts.container,
            str(artifact.blob),
            expires,
            snapshot=snapshot,
            served_as=served_as(
                artifact.content_type,
                artifact.details.get("contentEncoding"),
                uploaded=artifact.details.get("uploaded"),
            ),
        )
        return Location(url)

    async def _live_snapshot(self, artifact: Artifact) -> str | None:
        """What an Azure-era `azure` artifact (a live log) is read from: its growing blob (None) while its run
        goes; once it resolved, the snapshot taken when it resolved (shared/operations/writes/livelogs.py), or for one
        recorded nowhere (created after the run resolved, or before runs recorded them) a snapshot taken now."""
        task = await self.tasks.load(artifact.task_id)
        run = task.runs[artifact.run_id] if artifact.run_id < len(task.runs) else None
        if run is not None and run.state in ("pending", "running"):
            return None
        sealed = run.live.get(artifact.name) if run is not None else None
        if sealed == NOT_UPLOADED:
            raise ArtifactNotUploaded(name=artifact.name, runId=artifact.run_id, taskId=artifact.task_id)
        if sealed:
            return sealed
        return str((await self._seal(artifact)).details["snapshot"])

    async def _seal(self, artifact: Artifact) -> Artifact:
        """Commit and snapshot the data of an artifact that has no finish step, once; 404 while there is none.
        Racing readers may both seal: the artifact row keeps the first snapshot."""
        blobs, container, blob = self.artifacts.blobs, self.artifacts.container, str(artifact.blob)
        if artifact.storage_type == "s3":
            # The uploaded block becomes the blob, with the declared properties. A worker that wrote the blob
            # itself (a Put Blob, with the URL's write permission) left no block: its blob is taken as it is.
            await blobs.commit_block(
                container,
                blob,
                S3_BLOCK,
                content_type=artifact.content_type,
                content_encoding=artifact.details.get("contentEncoding"),
            )
        snapshot: BlobInfo | None = await blobs.snapshot(container, blob)
        if snapshot is None:
            raise ArtifactNotUploaded(name=artifact.name, runId=artifact.run_id, taskId=artifact.task_id)
        sealed = Artifact(
            artifact.task_id,
            artifact.run_id,
            artifact.name,
            artifact.storage_type,
            artifact.content_type,
            artifact.expires,
            artifact.present,
            {**artifact.details, "snapshot": snapshot.snapshot},
            artifact.etag,
        )
        written = await self.stores.tables.replace(TASKS_TABLE, sealed.to_entity())
        if written is None:  # changed meanwhile (sealed by another reader, or its expiry extended): read it again
            again = await self.artifacts.row(artifact.task_id, artifact.run_id, artifact.name)
            if again is None or not again.sealed:
                raise ArtifactNotUploaded(name=artifact.name, runId=artifact.run_id, taskId=artifact.task_id)
            return again
        return sealed

    def _download_credentials(self, artifact: Artifact) -> dict[str, str]:
        """Temporary credentials that may download exactly this object, for an hour (Taskcluster's)."""
        name = (
            artifact.name
            if CLIENT_ID_SAFE.fullmatch(artifact.name)
            else hashlib.sha256(artifact.name.encode()).hexdigest()[:32]
        )
        return self.stores.credentials(
            f"artifact-download/{artifact.task_id}/{artifact.run_id}/{name}",
            [f"object:download:{artifact.details['object']}"],
            self.stores.now() + DOWNLOAD_CREDENTIALS,
        )

    async def info(self, task_id: str, run_id: int | None, name: str) -> Artifact:
        """artifactInfo: the artifact itself (a link is not followed); only present artifacts are shown."""
        run_id, artifact = await self._named(task_id, run_id, name)
        if artifact is None or not artifact.present:
            raise ArtifactNotFound(name=name, runId=run_id, taskId=task_id)
        return artifact

    async def list(
        self, task_id: str, run_id: int | None, *, limit: int, continuation: str | None
    ) -> tuple[list[Artifact], str | None]:
        """listArtifacts: a page of the run's present artifacts, in name order."""
        run_id = await self._run_of(task_id, run_id)
        page = await self.stores.tables.query(
            TASKS_TABLE,
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi and present eq @present",
            {"pk": task_id, "lo": f"{ARTIFACT_ROW}{run_id}:", "hi": f"{ARTIFACT_ROW}{run_id};", "present": True},
            limit=limit,
            continuation=continuation,
        )
        return [Artifact.from_entity(e) for e in page.entities], page.continuation
