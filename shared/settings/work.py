"""How work flows: claims and their timeouts, deadlines, claimWork's wait, the pending queues' hints and the
signed polling URLs."""

from __future__ import annotations

from pydantic import BaseModel, Field


class WorkSettings(BaseModel):
    claim_timeout: float = Field(
        default=1200, gt=0, description="Seconds a claim lasts before it must be reclaimed (takenUntil = now + this)."
    )
    deadline_delay: float = Field(
        default=60, ge=0, description="Seconds after a task's deadline at which the deadline check runs."
    )
    max_task_deadline_days: float = Field(default=5, gt=0, description="How far ahead a deadline may be.")
    claim_work_wait: float = Field(
        default=20, ge=0, description="Seconds claimWork long-polls when no work is pending."
    )
    claim_work_waiters: int = Field(
        default=16,
        ge=1,
        description="claimWork requests one process lets wait for work at once; one more makes the one that has "
        "waited longest answer now, with nothing (its worker calls again after its own pause). On Azure keep it "
        "under `httpConcurrency`: an idle fleet then holds this many of an instance's HTTP slots, whatever its "
        'size (docs/deploy.md, "An idle fleet").',
    )
    claim_work_poll_interval: float = Field(
        default=0.5, gt=0, description="Seconds between polls of the pending queues while claimWork waits."
    )
    pending_empty_ttl: float = Field(
        default=1.0,
        ge=0,
        description="Seconds claimWork skips a pending queue "
        "(a task queue and priority) it found empty, unless this process put a hint "
        "in it since; bounds how late another process's new task is seen. 0: always "
        "receive from all seven.",
    )
    pending_hint_visibility: int = Field(
        default=300, ge=1, description="Seconds a received pending hint stays invisible while its claim is attempted."
    )
    poll_url_ttl: float = Field(
        default=1800,
        gt=0,
        description="Seconds the signed polling URLs of "
        "pollTaskUrls work (Taskcluster: 30 minutes); workers ask again before then.",
    )
    worker_info_interval: float = Field(
        default=60,
        ge=0,
        description="Seconds between writes of a worker's "
        "entry (recent tasks, lastDateActive) by one process: claims in between "
        "are buffered, so a busy fleet does not write on every claim.",
    )
    hint_grace: float = Field(
        default=60,
        ge=0,
        description="Seconds a hint whose run is not yet written is kept (and retried) rather than dropped.",
    )
    resolution_grace: int = Field(
        default=10,
        ge=0,
        description="Seconds a task's resolution message stays "
        "hidden while the process that resolved the task unblocks its dependents and "
        "resolves its group itself, right after its answer; the message is deleted "
        "once that is done, and its handler runs only when it was not (the process "
        "died, or took longer). 0: the resolution trigger always does it.",
    )
    hint_retry_delay: int = Field(
        default=1, ge=1, description="Seconds before a hint for a run not yet written is offered again."
    )
    list_page_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=64 * 1024,
        description="What a listing page of task definitions (listTaskGroup, listDependentTasks, listPendingTasks, "
        "listClaimedTasks) weighs at most, but for its last batch of 32 tasks: a heavier page ends early with a "
        "continuationToken (shared/operations/paging.py).",
    )
    purge_cache_seconds: float = Field(
        default=10,
        ge=0,
        description="Seconds a process answers a worker pool's purge-cache requests from what it read (workers ask "
        "before every task): a purge reaches every worker within this (Taskcluster's `cacheTime`).",
    )
