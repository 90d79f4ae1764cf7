"""Receives from a pending queue shared by the claimWork calls of one process that wait on it at once.

Each receive is a storage call (on Azurite one that scans every message the queue holds), and most of a busy
task queue's receives found little or nothing: eight workers long-polling one task queue each received on their
own, 3.6 receives per task claimed in `bench.lifecycle`. Here the calls that want messages from the same queue
while a receive of it is in flight wait for the next one, which asks for all of them together (at most 32) and
hands the messages out in the order the callers came. A caller's wait for work ends early when this process
writes a pending run hinted on one of its queues (`PendingWakeups`: after the write, not the hint's put, so that
the claim finds the run), so waiting workers share the receive that follows instead of each polling on its own
schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from shared import roundtrips
from shared.storage.base import QueueMessage, QueueStore, Received

MAX_RECEIVE = 32  # Azure's most messages per receive


@dataclass
class _Waiter:
    wanted: int
    answer: asyncio.Future[Received]
    arrived: float = field(default_factory=lambda: roundtrips.now())
    spans: list[roundtrips.Span] | None = field(default_factory=roundtrips.current)  # its traced round trips


@dataclass
class _Queue:
    loop: asyncio.AbstractEventLoop
    waiting: list[_Waiter] = field(default_factory=list)
    receiver: asyncio.Task[None] | None = None


class SharedReceives:
    def __init__(self, queues: QueueStore, ticks: Callable[[], float] = time.monotonic) -> None:
        self.queues = queues
        self.ticks = ticks  # when a receive was sent (Received.sent_at), on EmptyPendingQueues' clock
        self._by_queue: dict[str, _Queue] = {}
        self._giving_back: set[asyncio.Task[None]] = set()

    async def receive(self, queue: str, wanted: int, visibility: int) -> Received:
        """Up to `wanted` messages of `queue`, from a receive shared with the callers waiting at the same time."""
        loop = asyncio.get_running_loop()
        state = self._by_queue.get(queue)
        if state is None or state.loop is not loop:
            state = self._by_queue[queue] = _Queue(loop)
        waiter = _Waiter(max(1, min(wanted, MAX_RECEIVE)), loop.create_future())
        state.waiting.append(waiter)
        if state.receiver is None:
            # A task of its own: a caller that gives up (its request cancelled) strands no other.
            state.receiver = loop.create_task(self._receive(queue, state, visibility))
        try:
            return await asyncio.shield(waiter.answer)
        except asyncio.CancelledError:
            # The caller gave up (its request ended): its share, if it came already, goes back to the queue.
            if not waiter.answer.cancel() and waiter.answer.exception() is None:
                for message in waiter.answer.result():
                    task = loop.create_task(self._give_back(queue, message))
                    self._giving_back.add(task)
                    task.add_done_callback(self._giving_back.discard)
            raise

    async def _give_back(self, queue: str, message: QueueMessage) -> None:
        with contextlib.suppress(Exception):
            await self.queues.release(queue, message, 0)

    async def _receive(self, queue: str, state: _Queue, visibility: int) -> None:
        try:
            while state.waiting:
                batch = _next_batch(state)
                total = sum(waiter.wanted for waiter in batch)
                sent_at = self.ticks()
                try:
                    # This task began in one caller's context: the receive is told to each caller that waits for it.
                    with roundtrips.traced() as spans:
                        received = await self.queues.receive(queue, total, visibility)
                except Exception as exc:
                    _fail(batch, exc)
                    continue
                for waiter in (*batch, *state.waiting):
                    roundtrips.waited(spans, waiter.arrived, waiter.spans)
                await self._share(queue, batch, received, sent_at)
                if len(received) < total and not received.lost:
                    # The queue had no more when this receive answered: the callers that came while it was in
                    # flight get that answer too rather than a receive of their own (an idle task queue's
                    # pollers would receive each empty queue twice per round). A hint put meanwhile wakes them
                    # (PendingWakeups), and its queue is not skipped for having been found empty before it
                    # (EmptyPendingQueues.received).
                    answered, state.waiting = state.waiting, []
                    for waiter in answered:
                        if not waiter.answer.done():
                            waiter.answer.set_result(Received([], lost=False, sent_at=sent_at))
        finally:
            _fail(state.waiting, RuntimeError("the shared receive was stopped"))
            state.waiting, state.receiver = [], None
            if self._by_queue.get(queue) is state:
                del self._by_queue[queue]

    async def _share(self, queue: str, batch: list[_Waiter], received: Received, sent_at: float) -> None:
        """Each waiter of the batch its share of what one receive got, in order; a share whose waiter gave up
        meanwhile goes back to the queue."""
        messages = list(received)
        for waiter in batch:
            mine, messages = messages[: waiter.wanted], messages[waiter.wanted :]
            if waiter.answer.done():  # cancelled meanwhile: its share goes back to the queue
                messages = mine + messages
                continue
            waiter.answer.set_result(Received(mine, lost=received.lost, sent_at=sent_at))
        for message in messages:  # only when a caller gave up while its receive was in flight
            await self._give_back(queue, message)


def _next_batch(state: _Queue) -> list[_Waiter]:
    """The waiters one receive serves, in order of arrival: as many as MAX_RECEIVE messages hold (one at least)."""
    batch: list[_Waiter] = []
    total = 0
    while state.waiting and (not batch or total + state.waiting[0].wanted <= MAX_RECEIVE):
        waiter = state.waiting.pop(0)
        batch.append(waiter)
        total += waiter.wanted
    return batch


def _fail(waiters: list[_Waiter], exc: BaseException) -> None:
    """The waiters not answered yet get `exc` (retrieved here: each caller re-raises it)."""
    for waiter in waiters:
        if not waiter.answer.done():
            waiter.answer.set_exception(exc)
            waiter.answer.exception()


class PendingWakeups:
    """claimWork callers waiting for work on some pending queues, woken when this process writes a run hinted on
    one."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}

    def filled(self, queue: str) -> None:
        for event in self._waiting.get(queue, ()):
            event.set()

    async def wait(self, queues: Iterable[str], seconds: float, event: asyncio.Event | None = None) -> bool:
        """Wait until a hint is put on one of `queues` by this process, or `seconds` pass, or `event` (the
        caller's, cleared first) is set otherwise; True when woken."""
        if event is None:
            event = asyncio.Event()
        event.clear()
        names = list(queues)
        for name in names:
            self._waiting.setdefault(name, set()).add(event)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), seconds)
            return event.is_set()
        finally:
            for name in names:
                waiting = self._waiting.get(name)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._waiting[name]


@dataclass(eq=False)
class Waiter:
    """One claimWork waiting for work: woken by a hint, or released to answer now."""

    woken: asyncio.Event = field(default_factory=asyncio.Event)
    released: bool = False

    def release(self) -> None:
        self.released = True
        self.woken.set()


class ClaimWaiters:
    """The claimWork requests of this process waiting for work, at most `capacity`: one more releases the one that
    has waited longest, which answers at once with nothing (as after its whole wait). On Azure each waiting
    request holds one of an instance's HTTP slots (`perInstanceConcurrency`), and Flex adds instances by the
    requests in flight: an idle fleet polling claimWork would hold an instance per `capacity` waiting workers.
    Released early, a worker comes back after its own pause between calls (generic-worker waits 5 s,
    scriptworker its `poll_interval`), so the requests in flight stay near `capacity` however large the fleet,
    and work made pending is still taken at once by a waiting request (docs/deploy.md, "An idle fleet")."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._waiting: OrderedDict[Waiter, None] = OrderedDict()
        self.released = 0  # how many were released early, for the logs and the benchmark

    def enter(self) -> Waiter:
        while len(self._waiting) >= self.capacity:
            oldest, _ = self._waiting.popitem(last=False)
            oldest.release()
            self.released += 1
        waiter = Waiter()
        self._waiting[waiter] = None
        return waiter

    def leave(self, waiter: Waiter) -> None:
        self._waiting.pop(waiter, None)

    def __len__(self) -> int:
        return len(self._waiting)
