"""Live logs sealed when their run resolves.

An Azure-era `azure` artifact (created without `contentLength`) has no finish step: its worker writes its blob for
as long as the run goes (the reference worker's `public/logs/live.log`), and reads follow the growing blob. Its
name is recorded in its run (`Run.live`) by createArtifact, in the same transaction. Before a change that resolves
the run is written, the blobs of those artifacts are snapshotted and the snapshots recorded in the run, with the
resolution: what a read serves from then on is what the blob held when the run resolved, whatever the upload URL
writes afterwards (it stays valid until it expires). A change that is not written leaves its snapshots unread;
they are deleted with their blob.
"""

from __future__ import annotations

import asyncio

from shared.domain.artifacts import blob_path
from shared.domain.tasks import Task
from shared.operations.writes.stores import Stores

MAX_LIVE_PER_RUN = 16  # Azure-era `azure` artifacts a run may have (each sealed when the run resolves)
NOT_UPLOADED = "-"  # recorded for a live artifact whose blob did not exist when its run resolved


def unsealed(task: Task) -> list[tuple[int, str]]:
    """The live artifacts of the task's resolved runs whose blob was not snapshotted yet: (runId, name)."""
    return [
        (run_id, name)
        for run_id, run in enumerate(task.runs)
        if run.resolved_state
        for name, snapshot in run.live.items()
        if not snapshot
    ]


async def seal_live(stores: Stores, task: Task) -> None:
    """Snapshot the blobs of the live artifacts of runs this change resolves, and record the snapshots in their
    runs (written with the change). Nothing to do, and no storage call, for runs without live artifacts."""
    pending = unsealed(task)
    if not pending or stores.blobs is None:
        return
    container = stores.settings.artifact_container
    taken = await asyncio.gather(
        *(stores.blobs.snapshot(container, blob_path(task.task_id, run_id, name)) for run_id, name in pending)
    )
    for (run_id, name), info in zip(pending, taken, strict=True):
        task.runs[run_id].live[name] = info.snapshot if info is not None and info.snapshot else NOT_UPLOADED
