"""Claims judged by hosts whose clocks disagree (issue 86): the margin the design needs, held over any offsets.

Storage times a check's visibility from the put (a relative delay), and a check handler that finds the run's
`takenUntil` not yet passed by its own clock puts the check back (shared/domain/parking.py). So a run expires no
earlier than `takenUntil` by the clock of the host that judges it. With every host's clock within ±S of true time,
a worker whose own clock is true and that reclaims more than S before `takenUntil` never loses its run; and a run no
longer reclaimed expires by `takenUntil` + S + 2 s (a second put back, a second of rounding) whichever hosts move
and handle its checks. Shown here on the memory connector: one store on the true clock (the tests' `Clock`), hosts
on clocks offset from it, every step a random host moving the parked checks and handling the due ones."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import timeutil
from shared.domain.messages import CLAIM_DUE_QUEUE, ClaimCheck, ResolvedCheck
from shared.runtime import Queue
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Clock
from tests.services import create_task, memory_service

SKEW = 2.0  # S: every host's clock within ±S of true time
STEP = 0.25  # how often (true seconds) checks are moved and handled near takenUntil, and the worker looks
FAR = 8.0  # farther than this from takenUntil, steps of 2 s: nothing falls due there but parked checks moving


class Offset:
    """A host's clock: the true one, `seconds` off."""

    def __init__(self, true: Clock, seconds: float) -> None:
        self.true, self.offset = true, dt.timedelta(seconds=seconds)

    def __call__(self) -> dt.datetime:
        return self.true() + self.offset


async def deliver(hosts: list[Queue], queues: MemoryQueues, rng: random.Random) -> None:
    """What the timer and the trigger do in a step: a host moves the parked checks, each due one is handled by a
    host (the trigger deletes a message once handled)."""
    await rng.choice(hosts).stores.check_queues.move_due()
    for message in await queues.receive(CLAIM_DUE_QUEUE, 32, 30):
        body = message.json()
        if not ResolvedCheck.carried_by(body):
            await rng.choice(hosts).checks.check_claim(ClaimCheck.decode(body))
        await queues.delete(CLAIM_DUE_QUEUE, message)


async def step(
    true: Clock, taken_until: dt.datetime, hosts: list[Queue], queues: MemoryQueues, rng: random.Random
) -> None:
    far = true() < taken_until - dt.timedelta(seconds=FAR)
    true.advance(2.0 if far else STEP)
    await deliver(hosts, queues, rng)


async def state_of(host: Queue, task_id: str) -> str:
    return str((await host.queries.task(task_id)).status()["runs"][0]["state"])


@pytest.mark.looptime  # the mover waits out a due check's fraction of a second: on the loop's fake clock
@settings(max_examples=15, deadline=None)
@given(
    offsets=st.lists(st.floats(-SKEW, SKEW), min_size=2, max_size=4),
    claim_timeout=st.sampled_from([6, 40]),  # a check put straight in the triggered queue, and one parked first
    lead=st.floats(SKEW + STEP + 0.05, 5),  # how long before takenUntil the worker reclaims (its clock is true)
    reclaims=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
async def test_a_run_reclaimed_more_than_the_skew_before_its_claim_ends_is_never_lost(
    offsets, claim_timeout, lead, reclaims, seed
):
    true = Clock(timeutil.now().replace(microsecond=500_000))
    tables, queues = MemoryTables(), MemoryQueues(true)
    hosts = [
        memory_service(tables=tables, queues=queues, clock=Offset(true, o), claim_timeout=claim_timeout)
        for o in offsets
    ]
    rng = random.Random(seed)
    task_id = await create_task(rng.choice(hosts))
    claim = await rng.choice(hosts).claims.claim(task_id, 0, "g", "w")
    taken_until = claim.run.taken_until
    for _ in range(reclaims):
        while true() < taken_until - dt.timedelta(seconds=lead):
            await step(true, taken_until, hosts, queues, rng)
            assert await state_of(hosts[0], task_id) == "running", "expired while its worker reclaimed in time"
        taken_until = (await rng.choice(hosts).claims.reclaim_task(task_id, 0)).run.taken_until
    # No more reclaims: the run expires, but not before takenUntil by the judging host's clock.
    latest = max(offsets)
    while true() < taken_until + dt.timedelta(seconds=SKEW + 2):
        await step(true, taken_until, hosts, queues, rng)
        if await state_of(hosts[0], task_id) != "running":
            assert true() >= taken_until - dt.timedelta(seconds=latest), "expired before any host's takenUntil"
            break
    assert await state_of(hosts[0], task_id) == "exception"
