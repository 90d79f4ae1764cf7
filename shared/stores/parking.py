"""The check queues: put a check due later in its parking queue and move it to its trigger's queue shortly before it is
due (shared/domain/parking.py: what is due when)."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Awaitable, Callable

from shared import timeutil, timing
from shared.domain.messages import Shards
from shared.domain.parking import DUE_QUEUE, PARKED_KIND, Moved, due_of
from shared.storage.base import QueueMessage, QueueStore
from shared.storage.batches import batches, until_empty
from shared.storage.sharded import shard_name, split_shard

ONE_SECOND = dt.timedelta(seconds=1)  # the least a check put back for being early waits

RECEIVES_PER_QUEUE = 100  # receives one tick makes of one parking queue at most (3,200 checks)


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
        within = 2 * self.lead + timing.MOVE_VISIBILITY
        return await until_empty(self.return_shown, self.queues, self.triggered_queues(), within, sleep)

    async def return_shown(self) -> int:
        """One pass of `return_due` over what shows now."""
        returned = 0
        for due_queue in self.triggered_queues():
            base, shard = split_shard(due_queue)
            target = shard_name(PARKED_KIND[base], shard)
            async for batch in batches(self.queues, due_queue, max_receives=RECEIVES_PER_QUEUE):
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
        async for batch in batches(self.queues, parking, max_receives=RECEIVES_PER_QUEUE):
            done.receives += 1
            results = await asyncio.gather(*(self._move_one(parking, target, message) for message in batch))
            done.moved += sum(results)
            done.waiting += len(results) - sum(results)
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
