"""The event dispatcher: a queue trigger that publishes recorded events to the configured bus.

Each `event-dispatch` message names an event stream (a task's or a task group's) and how far to publish it
(shared/eventlog.py). A bus that refuses is handled inside (the message is put back with a growing delay),
so these messages do not end in the poison queue because the broker was down.
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


@bp.function_name("event_dispatch")
@bp.queue_trigger(arg_name="msg", queue_name=DISPATCH_QUEUE, connection=CONNECTION)
async def event_dispatch(msg: func.QueueMessage) -> None:
    request = DispatchRequest.decode(msg.get_json())
    publisher = get_publisher()
    if publisher is None:
        log.warning("no event bus configured: dispatch request dropped", extra=fields(queue=DISPATCH_QUEUE))
        return
    outcome = await get_service().events.dispatch(request, publisher)
    log.debug("dispatch: %s", outcome, extra=fields(taskId=request.key, queue=DISPATCH_QUEUE, messageId=msg.id))
