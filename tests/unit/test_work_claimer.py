"""claimWork requests waiting for work are at most `claim_work_waiters` per process: one more makes the one that
has waited longest answer now with nothing, so an idle fleet holds few HTTP slots; work made pending is still
taken at once by a request that waits (shared/operations/writes/receiving.py, ClaimWaiters)."""

from __future__ import annotations

import asyncio

from shared.operations.writes.receiving import ClaimWaiters
from tests.answers import claim_work
from tests.conftest import schema_defaults, slugid, task_definition
from tests.services import memory_service


def test_one_more_waiter_releases_the_one_that_waited_longest():
    waiters = ClaimWaiters(2)
    first, second = waiters.enter(), waiters.enter()
    third = waiters.enter()
    assert first.released and first.woken.is_set() and not second.released and not third.released
    assert len(waiters) == 2 and waiters.released == 1
    waiters.leave(second)
    fourth = waiters.enter()
    assert not third.released and not fourth.released and len(waiters) == 2


async def settled(service, polls, waiting: int) -> None:
    """Until `waiting` of `polls` wait as registered waiters and every other has answered (however loaded the
    machine: each first polls the queues)."""
    for _ in range(400):
        if len(service.work.waiters) == waiting and sum(not poll.done() for poll in polls) == waiting:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{len(service.work.waiters)} waiting, {sum(not p.done() for p in polls)} in flight")


async def test_an_idle_fleet_past_the_bound_is_answered_at_once_and_work_still_goes_to_a_waiter():
    service = memory_service(claim_work_wait=60, claim_work_poll_interval=0.5, claim_work_waiters=2)
    definition = task_definition()
    tq = definition["taskQueueId"]
    polls = [asyncio.ensure_future(claim_work(service, tq, "g", f"w{i}", 1)) for i in range(5)]
    await settled(service, polls, 2)
    # Three were released as the next ones came: answered with nothing, long before their 60 s (settled waits 10).
    done = [poll for poll in polls if poll.done()]
    assert len(done) == 3 and all(poll.result() == [] for poll in done)
    waiting = [poll for poll in polls if not poll.done()]
    # A task made pending now goes to one of the two still waiting, at once.
    task_id = slugid()
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    finished, _ = await asyncio.wait(waiting, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    claimed = [claim for poll in finished for claim in poll.result()]
    assert [claim["status"]["taskId"] for claim in claimed] == [task_id]
    for poll in waiting:
        poll.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)


async def test_an_idle_fleet_of_100_draws_one_instance_with_the_bound_and_four_without():
    """Flex's HTTP scaling as modelled (local_host/scaler.py): the requests in flight over 32 a piece."""
    from local_host.scaler import http_instances

    assert [http_instances(n, 32) for n in (0, 1, 32, 33, 100)] == [0, 1, 1, 2, 4]
    for bound, expected in ((16, 1), (1000, 4)):
        service = memory_service(claim_work_wait=60, claim_work_poll_interval=0.5, claim_work_waiters=bound)
        tq = task_definition()["taskQueueId"]
        polls = [asyncio.ensure_future(claim_work(service, tq, "g", f"w{i}", 1)) for i in range(100)]
        await settled(service, polls, min(bound, 100))
        in_flight = sum(not poll.done() for poll in polls)
        assert http_instances(in_flight, 32) == expected, in_flight
        for poll in polls:
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
