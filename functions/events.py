"""The event dispatcher: a queue trigger that publishes recorded events to the configured bus; and a timer that
makes every exchange exist from an instance's start, before any event, so that consumers can bind at once.

Each `event-dispatch` message names one event stream (a task's or a task group's) and how far to publish it, or
a batch of such requests announced together (shared/outbox/log.py); a batch's streams are dispatched concurrently.
A bus that refuses is handled inside (the request is put back with a growing delay), and any other failure is
retried by the host a few times (the whole message: the streams already published find nothing left to do) and
then each failing request is put back the same way, so these messages do not end in the poison queue.
"""

from __future__ import annotations

import asyncio
import logging

import azure.functions as func

from functions.shards import trigger_queues
from shared.logs import fields
from shared.outbox.rows import DISPATCH_QUEUE, DispatchRequest, PublishError, decode_requests
from shared.runtime import get_publisher, get_queue
from shared.storage.retry import StorageUnavailable

bp = func.Blueprint()  # type: ignore[no-untyped-call]
log = logging.getLogger("queue.functions")
REQUEUE_AFTER = 4  # attempts by the host (host.json maxDequeueCount is 5) before the message is put back anew
BATCH_CONCURRENCY = 16  # streams of one batch dispatched at once
EXCHANGES_SCHEDULE = "0 */10 * * * *"  # and at every start: a connection declares them all, once per process


async def event_dispatch(msg: func.QueueMessage) -> None:
    requests = decode_requests(msg.get_json())
    publisher = get_publisher()
    if publisher is None:
        log.warning("no event bus configured: dispatch request dropped", extra=fields(queue=DISPATCH_QUEUE))
        return
    events = get_queue().stores.events
    limit = asyncio.Semaphore(BATCH_CONCURRENCY)

    async def dispatch(request: DispatchRequest) -> str:
        async with limit:
            return await events.dispatch(request, publisher)

    outcomes = await asyncio.gather(*(dispatch(r) for r in requests), return_exceptions=True)
    failed = [(r, o) for r, o in zip(requests, outcomes, strict=True) if isinstance(o, BaseException)]
    if failed:
        busy = all(isinstance(error, StorageUnavailable) for _, error in failed)
        if (msg.dequeue_count or 0) < REQUEUE_AFTER and not busy:
            raise failed[0][1]  # the host offers it again after host.json's visibilityTimeout
        for request, error in failed:
            # Rather than let the host move it to the poison queue (its events would wait for a later change of
            # the same stream), or use up its attempts on busy storage: a new message, after a growing delay.
            log.error(
                "dispatch keeps failing; put back for later",
                exc_info=error,
                extra=fields(taskId=request.key, queue=DISPATCH_QUEUE),
            )
            await events.retry_later(request)
        return
    for request, outcome in zip(requests, outcomes, strict=True):
        log.debug("dispatch: %s", outcome, extra=fields(taskId=request.key, queue=DISPATCH_QUEUE, messageId=msg.id))


for _suffix, _queue, _connection in trigger_queues(DISPATCH_QUEUE):  # a function per shard of the queue
    bp.function_name("event_dispatch" + _suffix)(
        bp.queue_trigger(arg_name="msg", queue_name=_queue, connection=_connection)(event_dispatch)
    )


@bp.function_name("declare_exchanges")
@bp.timer_trigger(arg_name="timer", schedule=EXCHANGES_SCHEDULE, run_on_startup=True)
async def declare_exchanges(timer: func.TimerRequest) -> None:
    """Connect to the bus, which declares every exchange (Taskcluster's publisher asserts them when it connects):
    at an instance's start, not at its first event, so a consumer on a new broker or vhost can bind at once."""
    publisher = get_publisher()
    if publisher is None:
        return
    try:
        await publisher.prepare()
    except PublishError as exc:  # tried again on schedule, and by the first publish
        log.warning("the exchanges could not be declared: %s", exc, extra=fields(event="exchanges-not-declared"))
