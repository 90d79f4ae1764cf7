"""Long-delayed checks parked where no trigger counts them, and brought to a triggered queue shortly before they
fall due.

Why: on Flex Consumption each queue-triggered function scales on its own, and the Storage Queue target scaler votes
`ceil(ApproximateMessagesCount / (batchSize + newBatchThreshold))` as soon as a peek finds one message visible, so
delayed messages count too. A claim check waits for its `takenUntil` (20 minutes), a deadline bucket for its second
(up to days): kept in the triggered queues, 2,000 running tasks voted 84 instances once one check was due
(`bench.votes`).

So a check due more than `lead` seconds ahead (QUEUE_PARK_LEAD) is put to its parking queue (`claim-expiry`,
`task-deadlines`: the names of old, which no trigger watches now), visible `lead` seconds before it is due; the
`move_due_checks` timer (QUEUE_PARK_SCHEDULE, more often than `lead`) receives what shows there and puts it to the
triggered queue (`claim-expiry-due`, `task-deadlines-due`) with what is left of its delay, then deletes it. A check
due sooner goes to the triggered queue straight away. A mover that dies between the put and the delete leaves the
parked message to show again after timing.MOVE_VISIBILITY and be moved twice: the handlers take the copy as they
take any stale or duplicated check.

What a running deployment stored stays readable both ways. Upgrading, the checks 0.2.0 queued with their whole
delay sit in the parking queue and are moved when they show, at most a timer period late. Rolling back, 0.2.0
triggers the parking queue itself: a parked check that it receives before it is due it puts back until then
(its handlers' `_put_back_if_early`); the checks already moved (at most `lead` seconds' worth) are in a queue it
does not read. Its reconciler resolves a claim past its `takenUntil` and a task past its deadline, but not what
a resolved run's claim check stands in for (its resolution's events and dependents, when its process was stopped
before it finished them: the fault campaign's rollout found such events unpublished). So a rollback to 0.2.0 ends
with `return_due` (`python -m local_host return-checks`), which puts every check of the triggered queues back in
the parking queues, visible when it is due (docs/deploy.md#releases-upgrades-and-rollbacks).
tests/acceptance/test_release_compatibility.py holds the first; the second rests on 0.2.0's put-back.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shared import timeutil, timing
from shared.domain.messages import CLAIM_DUE_QUEUE, CLAIM_QUEUE, DEADLINE_DUE_QUEUE, DEADLINE_QUEUE, Shards, bucket_time
from shared.storage.base import QueueMessage, QueueStore
from shared.storage.sharded import shard_name, split_shard

DUE_QUEUE = {CLAIM_QUEUE: CLAIM_DUE_QUEUE, DEADLINE_QUEUE: DEADLINE_DUE_QUEUE}  # parking queue -> triggered queue
PARKED_KIND = {due: parked for parked, due in DUE_QUEUE.items()}  # triggered queue -> the kind of check it holds
MOVE_BATCH = 32  # messages one receive takes (Azure's most)
ONE_SECOND = dt.timedelta(seconds=1)  # the least a check put back for being early waits
RECEIVES_PER_QUEUE = 100  # receives one tick makes of one parking queue at most (3,200 checks)


def due_of(body: Any, now: dt.datetime) -> dt.datetime:
    """When a parked message falls due, from what it says: a claim check at its `takenUntil`, a deadline bucket at
    its second, a per-task deadline check (the form of old) at its deadline; a resolution message (a claim check a
    resolution turned into one) or anything unreadable now, for its handler to take or refuse."""
    if not isinstance(body, dict) or "taskGroupId" in body:
        return now
    try:
        if "takenUntil" in body:
            return timeutil.parse(str(body["takenUntil"]))
        if "bucket" in body:
            return bucket_time(str(body["bucket"]))
        if "deadline" in body:
            return timeutil.parse(str(body["deadline"]))
    except (TypeError, ValueError):
        pass
    return now


@dataclass
class Moved:
    """What one tick of the mover did: checks moved to their triggered queue, checks put back to wait (shown early:
    clock skew, or a check put with its whole delay by an older release is never early), and receives made."""

    moved: int = 0
    waiting: int = 0
    receives: int = 0


class CheckQueues:
    """Where a delayed check goes (parked or straight to its triggered queue), and the mover between the two."""

    def __init__(
        self,
        queues: QueueStore,
        shards: Shards,
        lead_seconds: int,
        clock: Callable[[], dt.datetime] = timeutil.now,
    ) -> None:
        self.queues, self.shards, self.lead, self.clock = queues, shards, lead_seconds, clock

    def parks(self, delay_seconds: float) -> bool:
        """Whether a check due in `delay_seconds` is parked."""
        return delay_seconds > self.lead

    def queue(self, base: str, key: str, *, parked: bool) -> str:
        """The shard of `base`'s parking queue, or of its triggered queue, that holds the checks of `key`."""
        return self.shards.check_queue(base if parked else DUE_QUEUE[base], key)

    async def put(
        self,
        base: str,
        key: str,
        body: bytes,
        due: dt.datetime,
        *,
        parked: bool | None = None,
        now: dt.datetime | None = None,
    ) -> tuple[str, QueueMessage]:
        """Put check `body` of kind `base` (CLAIM_QUEUE, DEADLINE_QUEUE) for `key`, due at `due`: parked when it is
        due later than `lead` (or as `parked` says: a claim check goes where its task's reference says it is);
        the queue and the message as stored."""
        delay = timeutil.ceil_seconds(due - (self.clock() if now is None else now))
        parked = self.parks(delay) if parked is None else parked
        queue = self.queue(base, key, parked=parked)
        visible_in = max(0, delay - self.lead) if parked else max(0, delay)
        return queue, await self.queues.put(queue, body, visible_in=visible_in)

    async def put_back_if_early(
        self, base: str, key: str, body: bytes, due: dt.datetime, now: dt.datetime | None = None
    ) -> bool:
        """A check delivered before it is due (clock skew; visibility is in whole seconds) is put back for at least
        a second (parked if it is still far off); whether it was early."""
        now = self.clock() if now is None else now
        if due <= now:
            return False
        await self.put(base, key, body, max(due, now + ONE_SECOND), now=now)
        return True

    async def return_due(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> int:
        """Put every check of the triggered queues back in its parking queue, visible when it is due, until they are
        empty; how many. A message can be received only once it shows, and what waits there shows within `lead`
        seconds (it is due by then), so this ends within about `lead` seconds (bounded by twice that)."""
        returned = 0
        give_up = time.monotonic() + 2 * self.lead + timing.MOVE_VISIBILITY
        while True:
            returned += await self.return_shown()
            left = sum([await self.queues.approximate_count(q) for q in self.triggered_queues()])
            if not left or time.monotonic() > give_up:
                return returned
            await sleep(1.0)

    async def return_shown(self) -> int:
        """One pass of `return_due` over what shows now."""
        returned = 0
        for due_queue in self.triggered_queues():
            base, shard = split_shard(due_queue)
            target = shard_name(PARKED_KIND[base], shard)
            while True:
                batch = await self.queues.receive(due_queue, MOVE_BATCH, int(timing.MOVE_VISIBILITY))
                for message in batch:
                    try:
                        body = message.json()
                    except ValueError:
                        body = None
                    now = self.clock()
                    delay = timeutil.ceil_seconds(due_of(body, now) - now)
                    await self.queues.put(target, message.content, visible_in=delay)
                    await self.queues.delete(due_queue, message)
                returned += len(batch)
                if len(batch) < MOVE_BATCH:
                    break
        return returned

    def triggered_queues(self) -> list[str]:
        return [queue for base in PARKED_KIND for queue in self.shards.check_queues(base)]

    def parking_queues(self) -> list[str]:
        return [queue for base in DUE_QUEUE for queue in self.shards.check_queues(base)]

    async def move_due(self) -> Moved:
        """Move every check that shows in the parking queues to its triggered queue (the timer's work)."""
        done = Moved()
        for outcome in await asyncio.gather(*(self._move_from(queue) for queue in self.parking_queues())):
            done.moved += outcome.moved
            done.waiting += outcome.waiting
            done.receives += outcome.receives
        return done

    async def _move_from(self, parking: str) -> Moved:
        base, shard = split_shard(parking)
        target = shard_name(DUE_QUEUE[base], shard)
        done = Moved()
        started = time.monotonic()
        while done.receives < RECEIVES_PER_QUEUE and time.monotonic() - started < timing.MOVE_VISIBILITY / 2:
            batch = await self.queues.receive(parking, MOVE_BATCH, int(timing.MOVE_VISIBILITY))
            done.receives += 1
            results = await asyncio.gather(*(self._move_one(parking, target, message) for message in batch))
            done.moved += sum(results)
            done.waiting += len(results) - sum(results)
            if len(batch) < MOVE_BATCH:
                break
        return done

    async def _move_one(self, parking: str, target: str, message: QueueMessage) -> bool:
        """Move one parked message (True), or hide it again until `lead` before it is due (False)."""
        try:
            body = message.json()
        except ValueError:
            body = None
        now = self.clock()
        remaining = (due_of(body, now) - now).total_seconds()
        if self.parks(math.ceil(remaining)):
            await self.queues.release(parking, message, math.ceil(remaining) - self.lead)
            return False
        # Visibility is in whole seconds: the put waits out the fraction, so that the check shows when it is due
        # rather than up to a second after (a claim's expiry is acted on within a second of its takenUntil).
        whole = max(0, math.floor(remaining))
        await asyncio.sleep(max(0.0, remaining - whole))
        await self.queues.put(target, message.content, visible_in=whole)
        await self.queues.delete(parking, message)
        return True
