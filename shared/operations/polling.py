"""Signed-URL polling (`pollTaskUrls`): workers read pending hints straight from Azure Queue Storage.

Azure queues take thousands of requests a second; the API does not need to see a worker's polls at all.

1. `pollTaskUrls` gives, for each of the task queue's seven pending queues (highest priority first), a URL that
   may get messages (`signedPollUrl`) and one that may delete them (`signedDeleteUrl`), signed with a queue SAS
   of permission "process" that expires after QUEUE_POLL_URL_TTL. They grant nothing else: not adding
   messages, not another queue, not a table.
2. The worker GETs the poll URLs in order (optionally `&numofmessages=N`, N ≤ 32) until one answers with a
   `<QueueMessage>`. A message is hidden for QUEUE_PENDING_HINT_VISIBILITY seconds while it is being claimed.
3. The worker hands the response text to `claimWork` as `xmlMessage`. For each message the queue checks the
   hint's signature (an HMAC over the task queue and the hint's fields, so a hint cannot be forged, altered or
   used for another task queue), claims the run it names (only that hint can claim it: a replayed hint finds
   the run claimed), and deletes the message; a stale hint is deleted too. The answer is claimWork's.
   Old protocol: `claimTask(taskId, runId)` then DELETE through `signedDeleteUrl` also works.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import email.utils
import json
import logging
import xml.etree.ElementTree as ET

from shared import errors
from shared.domain.messages import PendingHint
from shared.logs import fields
from shared.operations.claims import Claim
from shared.operations.work_claimer import WorkClaimer
from shared.storage.base import QueueMessage

log = logging.getLogger("queue.polling")

MAX_MESSAGES = 32  # what one Get Messages request returns at most


class PolledMessagesInvalid(errors.InputError):
    """xmlMessage must be the response of a signedPollUrl (Azure Queue Storage's QueueMessagesList): {problem}"""


class HintsRefused(errors.InputError):
    """No message in xmlMessage is a hint this queue wrote for task queue `{taskQueueId}` (forged, altered, or of
    another task queue): {problems}"""


def _text(node: ET.Element, tag: str) -> str:
    found = node.find(tag)
    if found is None or found.text is None:
        raise PolledMessagesInvalid(problem=f"a QueueMessage without {tag}")
    return found.text


def parse_messages(xml_text: str) -> list[QueueMessage]:
    """The messages of a Get Messages response (MessageText still base64, as Azure returns it)."""
    try:
        root = ET.fromstring(xml_text.strip())
    except ET.ParseError as exc:
        raise PolledMessagesInvalid(problem=f"not XML ({exc})") from None
    if root.tag != "QueueMessagesList":
        raise PolledMessagesInvalid(problem=f"the root element is <{root.tag}>")
    messages = []
    for node in root.findall("QueueMessage"):
        try:
            inserted = email.utils.parsedate_to_datetime(_text(node, "InsertionTime"))
            dequeue_count = int(node.findtext("DequeueCount") or 1)
        except (TypeError, ValueError):
            raise PolledMessagesInvalid(problem="a QueueMessage with an unreadable InsertionTime") from None
        messages.append(
            QueueMessage(
                _text(node, "MessageId"),
                _text(node, "PopReceipt"),
                _text(node, "MessageText").encode(),
                dequeue_count,
                inserted,
            )
        )
    if len(messages) > MAX_MESSAGES:
        raise PolledMessagesInvalid(problem=f"{len(messages)} messages; a poll returns at most {MAX_MESSAGES}")
    return messages


def _hint_of(message: QueueMessage) -> PendingHint | None:
    try:
        return PendingHint.decode(json.loads(base64.b64decode(message.content, validate=True)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


class Polling:
    def __init__(self, work: WorkClaimer) -> None:
        self.work = work
        self.stores = work.stores

    async def poll_task_urls(self, task_queue_id: str) -> tuple[list[tuple[str, str]], dt.datetime]:
        """pollTaskUrls: (signedPollUrl, signedDeleteUrl) of each of the task queue's pending queues, highest
        priority first, and when they stop working."""
        stores = self.stores
        await stores.ready()
        names = stores.shards.pending_queues(task_queue_id)
        await stores.ensure_pending_queues(task_queue_id)  # polling a queue that does not exist answers 404
        # To the second: a SAS's expiry is written in whole seconds, and the answer must not promise more.
        expires = (stores.now() + dt.timedelta(seconds=stores.settings.poll_url_ttl)).replace(microsecond=0)
        urls = []
        for name in names:
            base, sas = (await stores.queues.process_url(name, expires)).split("?", 1)
            urls.append(
                (
                    f"{base}/messages?visibilitytimeout={stores.settings.pending_hint_visibility}&{sas}",
                    f"{base}/messages/{{{{messageId}}}}?popreceipt={{{{popReceipt}}}}&{sas}",
                )
            )
        return urls, expires

    async def claim_polled(
        self, task_queue_id: str, worker_group: str, worker_id: str, count: int, xml_text: str
    ) -> list[Claim]:
        """claimWork with `xmlMessage`: claim the runs the polled hints name (up to `count`), without
        long-polling. Messages beyond `count` are made visible again for other workers."""
        stores = self.stores
        messages = parse_messages(xml_text)
        await stores.workers.active(task_queue_id, worker_group, worker_id)
        key = stores.settings.hint_key
        problems: list[str] = []
        wanted: list[tuple[str, QueueMessage]] = []
        for message in messages:
            hint = _hint_of(message)
            if hint is None:
                problems.append(f"message {message.id}: not a pending hint")
            elif not hint.verify(key, task_queue_id):
                problems.append(f"message {message.id}: its signature does not match")
            else:
                queue = stores.shards.pending_queue(task_queue_id, hint.priority, hint.taskId)
                # try_hint reads the hint from the content: hand it the decoded JSON, as a received message has it.
                wanted.append(
                    (
                        queue,
                        QueueMessage(
                            message.id, message.pop_receipt, hint.encode(), message.dequeue_count, message.inserted
                        ),
                    )
                )
        if problems:
            log.warning(
                "refused %d polled messages: %s",
                len(problems),
                "; ".join(problems),
                extra=fields(workerGroup=worker_group, workerId=worker_id),
            )
        if not wanted and problems:
            raise HintsRefused(taskQueueId=task_queue_id, problems="; ".join(problems))
        if await stores.workers.quarantined_until(task_queue_id, worker_group, worker_id):
            claimed, extra = [], wanted  # a quarantined worker gets no work: the hints go back to the others
        else:
            claimed, extra = wanted[:count], wanted[count:]
        results = await asyncio.gather(*(self.work.try_hint(queue, m, worker_group, worker_id) for queue, m in claimed))
        # Claims are saved by now: a hint that cannot be released stays hidden until its visibility ends, no more.
        await asyncio.gather(*(stores.queues.release(queue, m, 0) for queue, m in extra), return_exceptions=True)
        if any(r is not None for r in results):
            await stores.workers.active_best_effort(task_queue_id, worker_group, worker_id)  # claims are saved
        return [r for r in results if r is not None]
