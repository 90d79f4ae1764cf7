"""The event dispatcher: a queue trigger that publishes recorded events to the configured bus.

Each `event-dispatch` message names an event stream (a task's or a task group's) and how far to publish it
(shared/eventlog.py). A bus that refuses is handled inside (the message is put back with a growing delay), and
any other failure is retried by the host a few times and then put back the same way, so these messages do
not end in the poison queue.
"""

from __future__ import annotations

import logging

import azure.functions as func

from functions.checks import CONNECTION
from shared.eventlog import DISPATCH_QUEUE, DispatchRequest
from shared.logs import fields
from shared.runtime import get_publisher, get_service

bp = func.Blueprint()  # type: ignore[no-untyped-call]
log = logging.getLogger("queue.functions")
REQUEUE_AFTER = 4  # attempts by the host (host.json maxDequeueCount is 5) before the message is put back anew


@bp.function_name("event_dispatch")
@bp.queue_trigger(arg_name="msg", queue_name=DISPATCH_QUEUE, connection=CONNECTION)
async def event_dispatch(msg: func.QueueMessage) -> None:
    request = DispatchRequest.decode(msg.get_json())
    publisher = get_publisher()
    if publisher is None:
        log.warning("no event bus configured: dispatch request dropped", extra=fields(queue=DISPATCH_QUEUE))
        return
    events = get_service().events
    try:
        outcome = await events.dispatch(request, publisher)
    except Exception:
        if (msg.dequeue_count or 0) < REQUEUE_AFTER:
            raise  # the host offers it again after host.json's visibilityTimeout
        # Rather than let the host move it to the poison queue (its events would wait for a later change of
        # the same stream): a new message, after a growing delay.
        log.exception("dispatch keeps failing; put back for later", extra=fields(taskId=request.key,
                                                                                 queue=DISPATCH_QUEUE))
        await events.retry_later(request)
        return
    log.debug("dispatch: %s", outcome, extra=fields(taskId=request.key, queue=DISPATCH_QUEUE, messageId=msg.id))
