"""Signed-URL polling on Azurite: workers read pending hints straight from Azure Queue Storage with the URLs of
pollTaskUrls, and claim with what they read; the URLs do nothing else, and hints cannot be forged."""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.parse

import httpx
import pytest

from shared.domain.messages import PendingHint, pending_queue
from shared.storage.sharded import stable_hash
from tests.acceptance.conftest import QUICK_CLAIMS
from tests.acceptance.helpers import poll_task_urls
from tests.conftest import SHARDS, STORAGE_FAULTS, expect_error, slugid, task_definition, task_queue_id

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}
# Under injected storage faults (QUEUE_TEST_STORAGE_FAULTS) a call may take seconds of retries: longer URLs.
POLL_URL_TTL = 10 if STORAGE_FAULTS else 3


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(poll_url_ttl=POLL_URL_TTL, **QUICK_CLAIMS)


@pytest.fixture
def queue(host):
    return host.client()


# pollTaskUrls is not in the official client (Taskcluster removed it): call it through the client's own
# machinery, which signs the request as for any other method.


def poll(urls, count=1):
    """GET each signedPollUrl in order until one returns messages: (index, response text)."""
    for index, entry in enumerate(urls["queues"]):
        response = httpx.get(entry["signedPollUrl"] + f"&numofmessages={count}")
        assert response.status_code == 200, response.text
        if "<MessageId>" in response.text:
            return index, response.text
    return None, None


def polled_task(queue):
    """A task of a fresh task queue, polled: (task queue, taskId, URLs, index of the queue, XML, the message)."""
    tq, task_id = task_queue_id(), slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq))
    urls = poll_task_urls(queue, tq)
    index, xml_text = poll(urls)
    [message] = message_fields(xml_text)
    return tq, task_id, urls, index, xml_text, message


def url_of(urls, queue_name):
    """The signedPollUrl of one pending queue (by its name) among those pollTaskUrls answered."""
    [url] = [q["signedPollUrl"] for q in urls["queues"] if f"/{queue_name}/messages?" in q["signedPollUrl"]]
    return url


def same_shard_ids(count):
    """Task ids whose hints go to one pending queue of a priority, however many shards it has."""
    ids: list[str] = []
    while len(ids) < count:
        task_id = slugid()
        if stable_hash(task_id) % SHARDS == 0:
            ids.append(task_id)
    return ids


def delete_url(urls, index, message):
    return (
        urls["queues"][index]["signedDeleteUrl"]
        .replace("{{messageId}}", urllib.parse.quote(message["id"]))
        .replace("{{popReceipt}}", urllib.parse.quote(message["pop"], safe=""))
    )


def message_fields(xml_text):
    return [
        dict(zip(("id", "pop", "text"), m, strict=True))
        for m in re.findall(
            r"<MessageId>(.*?)</MessageId>.*?<PopReceipt>(.*?)</PopReceipt>.*?<MessageText>(.*?)</MessageText>",
            xml_text,
            re.S,
        )
    ]


def with_text(xml_text, new_text):
    return re.sub(r"<MessageText>.*?</MessageText>", f"<MessageText>{new_text}</MessageText>", xml_text, flags=re.S)


def hint_json(text):
    return json.loads(base64.b64decode(text))


def encoded(hint):
    return base64.b64encode(json.dumps(hint).encode()).decode()


def test_worker_polls_azure_directly_and_claims_with_the_message(queue):
    tq = task_queue_id()
    low, high = slugid(), slugid()
    queue.createTask(low, task_definition(taskQueueId=tq, priority="low"))
    queue.createTask(high, task_definition(taskQueueId=tq, priority="very-high"))
    urls = poll_task_urls(queue, tq)
    assert len(urls["queues"]) == 7 * SHARDS
    index, xml_text = poll(urls)
    assert index // SHARDS == 1  # very-high: the second priority (its shards), highest first
    claimed = queue.claimWork(tq, {**WORKER, "tasks": 1, "xmlMessage": xml_text})["tasks"]
    assert [c["status"]["taskId"] for c in claimed] == [high]
    assert claimed[0]["runId"] == 0 and claimed[0]["credentials"]["clientId"].startswith("task-client/")
    # The queue deleted the message it consumed: the delete URL finds it gone.
    [message] = message_fields(xml_text)
    assert httpx.delete(delete_url(urls, index, message)).status_code == 404
    # Replayed by another worker: the run is claimed already, nothing is claimed again.
    other = {"workerGroup": "wg-1", "workerId": "worker-2"}
    assert queue.claimWork(tq, {**other, "tasks": 1, "xmlMessage": xml_text})["tasks"] == []
    # claimWork without a message still serves the same pending queues.
    assert [c["status"]["taskId"] for c in queue.claimWork(tq, {**other, "tasks": 1})["tasks"]] == [low]


def test_old_protocol_claim_task_then_delete_through_the_signed_url(queue):
    _, task_id, urls, index, _, message = polled_task(queue)
    hint = hint_json(message["text"])
    assert hint["taskId"] == task_id and hint["runId"] == 0 and hint["sig"]
    assert queue.claimTask(task_id, str(hint["runId"]), WORKER)["status"]["state"] == "running"
    assert httpx.delete(delete_url(urls, index, message)).status_code == 204


def test_signed_urls_get_and_delete_that_queue_only_until_they_expire(host, queue):
    tq, task_id = task_queue_id(), slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq))
    urls = poll_task_urls(queue, tq)
    # lowest, the shard of the task: where its hint is
    poll_url = url_of(urls, pending_queue(tq, "lowest", stable_hash(task_id) % SHARDS))
    base, query = poll_url.split("?", 1)
    queue_url = base.rsplit("/messages", 1)[0]
    # Adding a message, reading another queue, listing queues, peeking metadata: all refused.
    assert (
        httpx.post(
            f"{base}?{query}", content="<QueueMessage><MessageText>eA==</MessageText></QueueMessage>"
        ).status_code
        == 403
    )
    other_queue = url_of(urls, pending_queue(tq, "low")).split("?", 1)[0]
    assert httpx.get(f"{other_queue}?{query}").status_code == 403
    account = queue_url.rsplit("/", 1)[0]
    assert httpx.get(f"{account}?comp=list&{query}").status_code == 403
    assert httpx.get(f"{queue_url}?comp=metadata&{query}").status_code == 403
    table = account.replace(f":{urllib.parse.urlsplit(account).port}", f":{_table_port(host)}")
    assert httpx.get(f"{table}/Tasks()?{query}").status_code == 403
    assert "<MessageId>" in httpx.get(poll_url).text  # it does what it is for
    time.sleep(POLL_URL_TTL + 1.5)
    assert httpx.get(poll_url).status_code == 403  # expired: ask pollTaskUrls again
    assert httpx.get(poll_task_urls(queue, tq)["queues"][6]["signedPollUrl"]).status_code == 200


def _table_port(host):
    match = re.search(r"TableEndpoint=http://127.0.0.1:(\d+)/", host.env["QUEUE_STORAGE"])
    assert match
    return match.group(1)


def test_forged_altered_and_foreign_hints_are_refused(queue):
    elsewhere = task_queue_id()
    tq, task_id, _, _, xml_text, message = polled_task(queue)
    hint = hint_json(message["text"])
    victim = slugid()
    queue.createTask(victim, task_definition(taskQueueId=tq))
    forged = [
        {**hint, "taskId": victim},  # altered: another task of the same queue
        {**hint, "runId": 1},  # altered run
        {**hint, "sig": base64.urlsafe_b64encode(b"x" * 32).decode().rstrip("=")},  # forged signature
        {k: v for k, v in hint.items() if k != "sig"},  # unsigned
    ]
    for fake in forged:
        body = expect_error(
            400,
            "InputError",
            queue.claimWork,
            tq,
            {**WORKER, "tasks": 1, "xmlMessage": with_text(xml_text, encoded(fake))},
        )
        assert "signature" in body["message"]
    expect_error(400, "InputError", queue.claimWork, tq, {**WORKER, "tasks": 1, "xmlMessage": "<nope/>"})
    # A genuine hint of task queue `tq`, handed to claimWork of another task queue: refused, and left in place.
    expect_error(400, "InputError", queue.claimWork, elsewhere, {**WORKER, "tasks": 1, "xmlMessage": xml_text})
    assert queue.status(task_id)["status"]["state"] == "pending"
    assert queue.status(victim)["status"]["state"] == "pending"
    claimed = queue.claimWork(tq, {**WORKER, "tasks": 1, "xmlMessage": xml_text})["tasks"]
    assert [c["status"]["taskId"] for c in claimed] == [task_id]


def test_messages_beyond_the_count_asked_are_left_for_others(queue):
    tq = task_queue_id()
    ids = same_shard_ids(3)
    for task_id in ids:
        queue.createTask(task_id, task_definition(taskQueueId=tq))
    urls = poll_task_urls(queue, tq)
    _, xml_text = poll(urls, count=3)
    assert len(message_fields(xml_text)) == 3
    claimed = queue.claimWork(tq, {**WORKER, "tasks": 1, "xmlMessage": xml_text})["tasks"]
    assert len(claimed) == 1
    others = queue.claimWork(tq, {"workerGroup": "wg-1", "workerId": "worker-2", "tasks": 2})["tasks"]
    assert sorted(c["status"]["taskId"] for c in claimed + others) == sorted(ids)


def test_poll_task_urls_needs_its_scope(host, queue):
    from tests.conftest import queue_client

    tq = task_queue_id()
    narrowed = queue_client(host.root_url, authorizedScopes=[f"queue:poll-task-urls:{tq[:-3]}*"])
    assert len(poll_task_urls(narrowed, tq)["queues"]) == 7 * SHARDS
    narrow = queue_client(host.root_url, authorizedScopes=["queue:poll-task-urls:other/*"])
    expect_error(403, "InsufficientScopes", poll_task_urls, narrow, tq)


def test_hints_are_signed_for_their_task_queue():
    key = b"k" * 32
    hint = PendingHint("t", 0, "h", "lowest").signed(key, "p/w")
    assert hint.verify(key, "p/w")
    assert not hint.verify(key, "p/other") and not hint.verify(b"x" * 32, "p/w")
    assert PendingHint.decode(json.loads(hint.encode())) == hint
