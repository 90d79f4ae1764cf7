"""Fallback messages: what stands in for this process's publishing, should it die before it publishes.

A change's dispatch request is put before the change is written. Where this process publishes what it writes,
the request only matters if it dies first: it is put to show after `delay` (a writer's lease plus its mark's
wait), and deleted once each of its requests is settled (`settled`), so that no dispatcher ever receives it.
A message put before a change for other reasons (a claim check, a resolution message) may stand in for its
events instead (`guard`): then no request is put at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from shared.logs import fields
from shared.outbox.inflight import Background
from shared.outbox.outage import PARK_AFTER
from shared.outbox.rows import DISPATCH_QUEUE, DispatchRequest, Stream, encode_requests
from shared.storage.base import QueueMessage, QueueStore
from shared.storage.grouped import GroupCommit

log = logging.getLogger("queue.events")

DISPATCH_BATCH = 100  # requests in one message: about 12 KB of JSON (a queue message holds 64 KB)
REMEMBERED_REQUESTS = 10_000  # streams with fallback requests not settled yet


@dataclass
class Fallback:
    """A message that stands in for this process should it die before it publishes some streams' events: a
    dispatch message put to show only later, or a message put before a change for other reasons that is also its
    events' fallback (`Fallbacks.guard`: a claim check, a resolution message). Deleted once none of its parts
    is open: each stream's events published and settled here, and whatever else it waits for (`done_with`)."""

    message: QueueMessage
    open: int
    queue: str = DISPATCH_QUEUE


class Fallbacks:
    def __init__(
        self,
        queues: QueueStore,
        *,
        dispatch_queue: Callable[[str], str],
        parked_queue: Callable[[str], str],
        delay: Callable[[], int],
        max_backoff: int,
        background: Background,
    ) -> None:
        self.queues, self.dispatch_queue, self.parked_queue, self.delay = queues, dispatch_queue, parked_queue, delay
        self.max_backoff, self.background = max_backoff, background
        self._announced: GroupCommit[tuple[str, bool], DispatchRequest] = GroupCommit(
            self._put, lambda waiting: min(len(waiting), DISPATCH_BATCH)
        )
        # Requests put to show only later (their changes' writers publish here), per stream: (seq, its message).
        self._requested: dict[Stream, list[tuple[int, Fallback]]] = {}

    def __len__(self) -> int:
        """Streams with fallback requests not settled yet."""
        return len(self._requested)

    async def request(self, request: DispatchRequest, *, later: bool) -> None:
        """Put the dispatch request (`later`: as a fallback, to show after `delay`). Returns once it is on the
        queue; requests put while another put is in flight share the next message (a fan-out's thousand changes:
        tens of messages, not a thousand, to put, receive and delete)."""
        await self._announced.add((self.dispatch_queue(request.key), later), request)

    async def _put(self, key: tuple[str, bool], requests: list[DispatchRequest]) -> None:
        queue, later = key
        if not later:
            await self.queues.put(queue, encode_requests(requests))
            return
        message = Fallback(
            await self.queues.put(queue, encode_requests(requests), visible_in=self.delay()), len(requests)
        )
        for request in requests:
            self._requested.setdefault(request.stream, []).append((request.seq, message))
        self._forget()

    def open_seqs(self, stream: Stream) -> list[int]:
        """The events of `stream` whose fallbacks are not settled yet."""
        return [seq for seq, _ in self._requested.get(stream, ())]

    def settled(self, stream: Stream, up_to: int) -> None:
        """The stream's events up to `up_to` are published, and the cursor or this process's stored mark says so
        (or a request of its own was put back for them): the fallback requests for them are not needed, and a
        message whose requests all are not is deleted."""
        for seq, message in self._requested.get(stream, ()):
            if seq <= up_to:
                self.done_with(message)
        left = [(seq, message) for seq, message in self._requested.pop(stream, ()) if seq > up_to]
        if left:
            self._requested[stream] = left

    def done_with(self, fallback: Fallback) -> None:
        """One part of `fallback` is done; the message is deleted once none is open."""
        fallback.open -= 1
        if fallback.open == 0:
            self.background.start(self._delete(fallback))

    async def _delete(self, fallback: Fallback) -> None:
        try:
            await self.queues.delete(fallback.queue, fallback.message)
        except Exception:  # it shows after its delay, and its handler finds its work done
            log.info("deleting a settled fallback message failed", exc_info=True, extra=fields(queue=fallback.queue))

    def guard(
        self, queue: str, message: QueueMessage, streams: Sequence[tuple[Stream, int]], *, also: int, keep: bool
    ) -> Fallback:
        """`message`, put before a change, stands in for its events up to the given sequence numbers of `streams`
        (EventLog.guarded_by); deleted once they are settled and `also` more parts are `done_with`, never when it
        is to be `keep`t."""
        fallback = Fallback(message, len(streams) + also + 1 + int(keep), queue)
        for stream, seq in streams:
            self._requested.setdefault(stream, []).append((seq, fallback))
        self._forget()
        self.done_with(fallback)  # the registration's own part: deleted now if nothing is open
        return fallback

    def also_guard(self, fallback: Fallback, stream: Stream, seq: int) -> None:
        """`fallback` (still open) also stands in for `stream`'s events up to `seq`."""
        fallback.open += 1
        self._requested.setdefault(stream, []).append((seq, fallback))
        self._forget()

    def _forget(self) -> None:
        while len(self._requested) > REMEMBERED_REQUESTS:  # forgotten: its message shows, and is handled then
            del self._requested[next(iter(self._requested))]

    async def retry_later(self, request: DispatchRequest) -> int:
        """Put the request back as a new message after a delay that doubles with each attempt (up to
        `max_backoff`), so a dispatch that keeps failing waits instead of ending in the poison queue; after
        PARK_AFTER retries, parked where no trigger counts it (outage.py)."""
        delay = int(min(self.max_backoff, 2 ** min(request.attempt, 30)))
        queue = (self.parked_queue if request.attempt >= PARK_AFTER else self.dispatch_queue)(request.key)
        await self.queues.put(queue, replace(request, attempt=request.attempt + 1).encode(), visible_in=delay)
        return delay
