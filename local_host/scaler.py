"""Azure's target scaler for the queue triggers, as a model: what each queue-triggered function would vote for on
Flex Consumption, read from the same queues (issue #66).

The Storage Queues extension's target scaler (QueueTargetScaler, Microsoft.Azure.WebJobs.Extensions.Storage.Queues)
votes for `ceil(queueLength / (batchSize + newBatchThreshold))` instances of a function, host.json's
`extensions.queues` giving the two (48 with this project's). `queueLength` is the queue's
ApproximateMessagesCount, delayed (invisible) messages included, read as 0 only when a peek finds no visible
message. On Flex every queue-triggered function scales on instances of its own, so the app's instances for its
triggers are the sum of the votes (up to `maximumInstanceCount`, which the HTTP API shares).

So a queue that holds long-delayed messages, a claim's check for each running task or a message per second of
deadlines, draws a vote for all of them whenever one of them is due: the vote follows the work outstanding, not
the work that is due. `sample` reads each watched queue's count and peek as the scaler does; `InstanceSeconds`
adds the votes up over a run.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from local_host.triggers import QueueOptions
from shared.domain.messages import TRIGGERED_QUEUES, Shards
from shared.outbox.rows import DISPATCH_QUEUE
from shared.storage.base import QueueStore

PROJECT = Path(__file__).resolve().parent.parent
WATCHED = (*TRIGGERED_QUEUES, DISPATCH_QUEUE)  # the check queues a trigger listens to


def per_instance(options: QueueOptions) -> int:
    """Messages one instance of a queue-triggered function is meant to take: batchSize + newBatchThreshold."""
    return options.batch_size + options.new_batch_threshold


def vote(messages: int, due: bool, concurrency: int) -> int:
    """The instances the scaler asks for a queue holding `messages` (its approximate count), `due` when a peek
    finds one visible."""
    return math.ceil(messages / concurrency) if due and messages > 0 else 0


def watched_queues(shards: Shards) -> list[str]:
    """Every queue a trigger listens to: each shard of each check queue."""
    return [queue for base in WATCHED for queue in shards.check_queues(base)]


def http_instances(in_flight: int, per_instance: int) -> int:
    """Flex Consumption's HTTP scaling, as a model: every HTTP function of an app scales together, on instances of
    their own, to keep the requests in flight per instance at its `perInstanceConcurrency` (infra's
    `httpConcurrency`); a long-polling request counts as any other while it waits."""
    return math.ceil(in_flight / per_instance) if in_flight > 0 else 0


@dataclass(frozen=True)
class Vote:
    queue: str
    messages: int  # ApproximateMessagesCount: delayed messages too
    due: bool  # a peek found a visible message
    instances: int


async def sample(queues: QueueStore, names: Iterable[str], concurrency: int) -> list[Vote]:
    """Each queue's vote, read as the scaler reads it: its approximate count and a peek."""

    async def one(name: str) -> Vote:
        messages, due = await asyncio.gather(queues.approximate_count(name), queues.any_visible(name))
        return Vote(name, messages, due, vote(messages, due, concurrency))

    return list(await asyncio.gather(*(one(name) for name in names)))


@dataclass
class InstanceSeconds:
    """The votes of a run added up: instance-seconds per queue (each sample's vote held until the next one), and
    the most instances asked for at once."""

    per_queue: dict[str, float] = field(default_factory=dict)
    peak: int = 0
    peak_votes: tuple[Vote, ...] = ()
    _last: float | None = None
    _held: Sequence[Vote] = ()

    def add(self, votes: Sequence[Vote], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._last is not None:
            for held in self._held:
                self.per_queue[held.queue] = self.per_queue.get(held.queue, 0.0) + held.instances * (now - self._last)
        self._last, self._held = now, votes
        total = sum(v.instances for v in votes)
        if total > self.peak:
            self.peak, self.peak_votes = total, tuple(v for v in votes if v.instances)

    @property
    def total(self) -> float:
        return sum(self.per_queue.values())

    def report(self, seconds: float) -> str:
        """One line: instance-seconds in all and by queue, the mean, and the peak with what voted for it."""
        by_queue = ", ".join(f"{q} {s:.0f}" for q, s in sorted(self.per_queue.items(), key=lambda kv: -kv[1]) if s)
        at_peak = ", ".join(f"{v.queue} {v.instances} ({v.messages} messages)" for v in self.peak_votes)
        return (
            f"instance-seconds {self.total:.0f} over {seconds:.0f} s (mean {self.total / max(seconds, 1e-9):.1f} "
            f"instances){': ' + by_queue if by_queue else ''}; peak {self.peak}{': ' + at_peak if at_peak else ''}"
        )


def host_concurrency(host_json: Path = PROJECT / "host.json") -> int:
    """per_instance of the project's host.json."""
    return per_instance(QueueOptions.from_host_json(host_json))
