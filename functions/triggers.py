"""Queue-triggered checks that keep tasks moving (claim expiry, deadlines, dependency resolution), the
reconciler that repairs what a lost or poisoned message left, and the timers that delete expired tasks,
artifacts, objects and worker information.

The message bodies are hints ({taskId, ...}); the queue re-reads the task and acts only if the hint still
matches its state, so stale and duplicated messages are harmless. An exception here makes the host retry the
message, and after `maxDequeueCount` attempts move it to `<queue>-poison`; storage that stays busy is not such
an exception (`later_if_busy`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import azure.functions as func

from functions.shards import trigger_queues
from shared.domain.messages import CLAIM_DUE_QUEUE, DEADLINE_DUE_QUEUE, RESOLVED_QUEUE, ClaimCheck, ResolvedCheck
from shared.domain.parking import Moved
from shared.logs import fields
from shared.operations.writes.stores import Stores
from shared.runtime import get_audit_log, get_queue
from shared.storage.retry import StorageUnavailable

bp = func.Blueprint()  # type: ignore[no-untyped-call]
log = logging.getLogger("queue.functions")
BUSY_DELAY = 15  # seconds a message waits when storage stayed busy through a whole retry budget


async def later_if_busy(queue: str, msg: func.QueueMessage, handle: Callable[[], Awaitable[None]]) -> None:
    """Run `handle`; when storage stays busy beyond its retry budget, put the message back as a new one (a hint:
    the copy is as good) after BUSY_DELAY and finish, so that throttling alone does not use up the message's
    dequeue count and end it in the poison queue. If even that put fails, the host retries the message."""
    try:
        await handle()
    except StorageUnavailable as exc:
        log.warning(
            "storage busy (%s): message put back for %d s",
            exc.message,
            BUSY_DELAY,
            extra=fields(event="busy-later", queue=queue, messageId=msg.id, dequeueCount=msg.dequeue_count),
        )
        await get_queue().stores.queues.put(queue, msg.get_body(), visible_in=BUSY_DELAY)


def _claim_expiry(queue: str) -> Callable[[func.QueueMessage], Awaitable[None]]:
    async def claim_expiry(msg: func.QueueMessage) -> None:
        body = msg.get_json()
        if ResolvedCheck.carried_by(body):  # a claim check that its run's resolution turned into its message
            await _resolution(queue, msg, ResolvedCheck.decode(body))
            return
        check = ClaimCheck.decode(body)

        async def handle() -> None:
            outcome = await get_queue().checks.check_claim(check)
            log.debug(
                "claim check: %s",
                outcome,
                extra=fields(taskId=check.taskId, runId=check.runId, queue=queue, messageId=msg.id),
            )

        await later_if_busy(queue, msg, handle)

    return claim_expiry


def _task_deadline(queue: str) -> Callable[[func.QueueMessage], Awaitable[None]]:
    async def task_deadline(msg: func.QueueMessage) -> None:
        body = msg.get_json()  # {bucket, continuation} (shared/domain/deadlines.py), or {taskId, deadline}

        async def handle() -> None:
            outcome = await get_queue().checks.check_deadlines(body)
            log.debug(
                "deadline check %s: %s",
                body.get("bucket", ""),
                outcome,
                extra=fields(taskId=body.get("taskId"), queue=queue, messageId=msg.id),
            )

        await later_if_busy(queue, msg, handle)

    return task_deadline


def _task_resolved(queue: str) -> Callable[[func.QueueMessage], Awaitable[None]]:
    async def task_resolved(msg: func.QueueMessage) -> None:
        await _resolution(queue, msg, ResolvedCheck.decode(msg.get_json()))

    return task_resolved


async def _resolution(queue: str, msg: func.QueueMessage, check: ResolvedCheck) -> None:
    async def handle() -> None:
        outcome = await get_queue().resolution.follow_up(check)
        log.debug(
            "resolution: %s",
            outcome,
            extra=fields(taskId=check.taskId, runId=check.runId, queue=queue, messageId=msg.id),
        )

    await later_if_busy(queue, msg, handle)


# One function per shard of each triggered check queue (one, with its name of old, unless QUEUE_CHECK_SHARDS says
# more). The claim checks and deadlines due later wait in parking queues that no function watches (move_due_checks).
for _name, _base, _make in (
    ("claim_expiry", CLAIM_DUE_QUEUE, _claim_expiry),
    ("task_deadline", DEADLINE_DUE_QUEUE, _task_deadline),
    ("task_resolved", RESOLVED_QUEUE, _task_resolved),
):
    for _suffix, _queue, _connection in trigger_queues(_base):
        bp.function_name(_name + _suffix)(
            bp.queue_trigger(arg_name="msg", queue_name=_queue, connection=_connection)(_make(_queue))
        )


@bp.function_name("move_due_checks")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_PARK_SCHEDULE%")
async def move_due_checks(timer: func.TimerRequest) -> None:
    """Parked claim checks and deadlines that fall due within QUEUE_PARK_LEAD go to their triggers' queues; so do the
    dispatch requests parked while the bus refused (a few, to probe it, while it still does)."""
    stores = get_queue().stores
    await stores.ready()  # the tables and queues exist (once per process)
    # Side by side: a backlog of parked requests (up to MOVE_VISIBILITY / 2 of moving) never delays a claim check.
    moved, unparked = await asyncio.gather(
        stores.check_queues.move_due(), _unpark_dispatches(stores), return_exceptions=True
    )
    if isinstance(moved, Moved) and (moved.moved or moved.waiting):  # logged whatever the parked requests did
        log.info(
            "parked checks: %d moved to their triggers' queues, %d put back to wait",
            moved.moved,
            moved.waiting,
            extra=fields(event="checks-moved", moved=moved.moved, waiting=moved.waiting),
        )
    for outcome in (moved, unparked):
        if isinstance(outcome, BaseException):
            raise outcome


async def _unpark_dispatches(stores: Stores) -> None:
    if stores.events.dispatching:
        await stores.events.parked.move(refusing=await stores.events.bus.refusing())


@bp.function_name("expire_tasks")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_EXPIRY_SCHEDULE%")
async def expire_tasks(timer: func.TimerRequest) -> None:
    expired = await get_queue().expiry.expire_tasks()
    log.info("expiry: %d tasks deleted", expired)


@bp.function_name("expire_artifacts")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_EXPIRY_SCHEDULE%")
async def expire_artifacts(timer: func.TimerRequest) -> None:
    deleted = await get_queue().expiry.expire_artifacts()
    log.info("expiry: %d artifacts deleted", deleted)


@bp.function_name("expire_objects")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_EXPIRY_SCHEDULE%")
async def expire_objects(timer: func.TimerRequest) -> None:
    deleted = await get_queue().expiry.expire_objects()
    log.info("expiry: %d objects deleted", deleted)


@bp.function_name("expire_worker_info")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_EXPIRY_SCHEDULE%")
async def expire_worker_info(timer: func.TimerRequest) -> None:
    deleted = await get_queue().expiry.expire_worker_info()
    log.info("expiry: %d worker info entries deleted", deleted)


@bp.function_name("expire_index")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_EXPIRY_SCHEDULE%")
async def expire_index(timer: func.TimerRequest) -> None:
    deleted = await get_queue().index.expire_due()
    log.info("expiry: %d index entries and namespaces deleted", deleted)


@bp.function_name("expire_purge_requests")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_EXPIRY_SCHEDULE%")
async def expire_purge_requests(timer: func.TimerRequest) -> None:
    deleted = await get_queue().purge_cache.expire_due()
    log.info("expiry: %d purge-cache requests deleted", deleted)


@bp.function_name("expire_audit_history")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_EXPIRY_SCHEDULE%")
async def expire_audit_history(timer: func.TimerRequest) -> None:
    deleted = await get_audit_log().expire_due()
    log.info("expiry: %d audit history rows deleted", deleted)


@bp.function_name("reconcile")
@bp.timer_trigger(arg_name="timer", schedule="%QUEUE_RECONCILE_SCHEDULE%")
async def reconcile(timer: func.TimerRequest) -> None:
    await get_queue().reconciler.run()  # it logs its own summary and each repair
