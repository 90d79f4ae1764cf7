"""Queue-triggered checks that keep tasks moving: claim expiry and deadlines.

The message bodies are hints ({taskId, ...}); the service re-reads the task and acts only if the hint still
matches its state, so stale and duplicated messages are harmless. An exception here makes the host retry the
message, and after `maxDequeueCount` attempts move it to `<queue>-poison`.
"""

from __future__ import annotations

import logging

import azure.functions as func

from shared.logs import fields
from shared.queues import CLAIM_QUEUE, DEADLINE_QUEUE, ClaimCheck, DeadlineCheck
from shared.runtime import get_service

bp = func.Blueprint()  # type: ignore[no-untyped-call]
log = logging.getLogger("queue.functions")
CONNECTION = "QUEUE_STORAGE"


@bp.function_name("claim_expiry")
@bp.queue_trigger(arg_name="msg", queue_name=CLAIM_QUEUE, connection=CONNECTION)
async def claim_expiry(msg: func.QueueMessage) -> None:
    check = ClaimCheck.decode(msg.get_json())
    outcome = await get_service().check_claim(check)
    log.debug("claim check: %s", outcome, extra=fields(taskId=check.taskId, runId=check.runId,
                                                        queue=CLAIM_QUEUE, messageId=msg.id))


@bp.function_name("task_deadline")
@bp.queue_trigger(arg_name="msg", queue_name=DEADLINE_QUEUE, connection=CONNECTION)
async def task_deadline(msg: func.QueueMessage) -> None:
    check = DeadlineCheck.decode(msg.get_json())
    outcome = await get_service().check_deadline(check)
    log.debug("deadline check: %s", outcome, extra=fields(taskId=check.taskId, queue=DEADLINE_QUEUE,
                                                           messageId=msg.id))
