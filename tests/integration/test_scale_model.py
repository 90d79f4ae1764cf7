"""The model of Azure's queue-trigger scaler (local_host/scaler.py) on Azurite, which counts a queue's messages as
Azure does (delayed ones included): the claim checks of running tasks and the deadline buckets of a day wait in
parking queues that no trigger watches (shared/domain/parking.py), so they draw no instances on Flex Consumption
until they are nearly due (issue #66)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from local_host import scaler
from local_host.triggers import QueueOptions
from shared.domain.messages import CLAIM_DUE_QUEUE, CLAIM_QUEUE, DEADLINE_DUE_QUEUE, DEADLINE_QUEUE, ClaimCheck, Shards
from shared.outbox.rows import DISPATCH_QUEUE
from tests.conftest import azurite_of_its_own, schema_defaults, slugid, task_definition, task_queue_id
from tests.services import azurite_service

RUNNING = 60


@pytest.fixture(scope="module")
def own_azurite(tmp_path_factory):
    """An Azurite of this module's own: another module's claim checks, due, would make this one's queues due."""
    with azurite_of_its_own(tmp_path_factory, "scale-model") as instance:
        yield instance


def test_the_vote_is_the_scalers_formula():
    options = QueueOptions(batch_size=32, new_batch_threshold=16)
    assert scaler.per_instance(options) == 48 == scaler.host_concurrency()  # this project's host.json
    assert scaler.vote(400, due=False, concurrency=48) == 0  # nothing visible: the scaler reads the length as 0
    assert scaler.vote(401, due=True, concurrency=48) == 9  # one due: all 401 count
    assert scaler.vote(0, due=True, concurrency=48) == 0
    assert scaler.watched_queues(Shards(checks=2)) == [
        f"{base}{suffix}" for base in scaler.WATCHED for suffix in ("", "-s1")
    ]


def test_instance_seconds_hold_each_vote_until_the_next_sample():
    counted = scaler.InstanceSeconds()
    counted.add([scaler.Vote("a", 96, True, 2), scaler.Vote("b", 0, False, 0)], now=10.0)
    counted.add([scaler.Vote("a", 10, True, 1), scaler.Vote("b", 48, True, 1)], now=13.0)
    counted.add([], now=15.0)
    assert counted.per_queue == {"a": 2 * 3 + 1 * 2, "b": 1 * 2} and counted.total == 10
    assert counted.peak == 2 and "instance-seconds 10 over 5 s" in counted.report(5)


def test_parked_checks_do_not_count_in_the_vote_when_one_is_due(own_azurite):
    """Running tasks with claims of 20 minutes and deadlines a day away leave a claim check each, and a deadline
    bucket per second of deadlines: parked, where no trigger watches. When one check is due, only it counts (it
    was the whole count of the queue, 61 messages and 2 instances, while they waited in the watched queue)."""

    async def go() -> None:
        queue = azurite_service(own_azurite.connection_string, claim_timeout=1200, deadline_delay=0)
        try:
            await queue.stores.ready()
            tq = task_queue_id()
            start = dt.datetime.now(dt.UTC)
            for i in range(RUNNING):
                deadline = start + dt.timedelta(hours=23, seconds=i)  # a bucket each
                definition = task_definition(taskQueueId=tq, deadline=deadline.isoformat().replace("+00:00", "Z"))
                await queue.creation.create_task(slugid(), dict(definition, **schema_defaults(definition)))
            claimed = 0
            while claimed < RUNNING:
                claimed += len(await queue.work.claim_work(tq, "wg", "w", 32))
            parked = {v.queue: v for v in await scaler.sample(queue.stores.queues, [CLAIM_QUEUE, DEADLINE_QUEUE], 48)}
            assert parked[CLAIM_QUEUE].messages == RUNNING and parked[DEADLINE_QUEUE].messages == RUNNING
            watched = [CLAIM_DUE_QUEUE, DEADLINE_DUE_QUEUE, DISPATCH_QUEUE]
            quiet = {v.queue: v for v in await scaler.sample(queue.stores.queues, watched, 48)}
            assert quiet[CLAIM_DUE_QUEUE].messages == quiet[DEADLINE_DUE_QUEUE].messages == 0
            assert sum(v.instances for v in quiet.values()) == 0
            # One claim check comes due (a claim of a second, say): it alone counts.
            await queue.stores.check_queues.put(CLAIM_QUEUE, "x", ClaimCheck(slugid(), 0, start).encode(), start)
            due = {v.queue: v for v in await scaler.sample(queue.stores.queues, watched, 48)}
            assert due[CLAIM_DUE_QUEUE].due and due[CLAIM_DUE_QUEUE].messages == 1
            assert due[CLAIM_DUE_QUEUE].instances == 1
            assert (await queue.stores.check_queues.move_due()).moved == 0  # the parked ones are far from due
        finally:
            await queue.close()

    asyncio.run(go())
