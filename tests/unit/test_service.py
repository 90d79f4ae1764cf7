"""Domain rules through the queue as shared/runtime.py wires it, on the in-memory connector: fast, and independent of
Azurite."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import pytest

from shared import errors, timeutil
from shared.domain.messages import CLAIM_QUEUE, DEADLINE_QUEUE, ClaimCheck, DeadlineCheck, PendingHint, pending_queue
from shared.operations.claims import Claim, ClaimRefusal
from shared.storage.base import Received
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.answers import claim_work, resolution_messages
from tests.clock import Ticks
from tests.conftest import schema_defaults, slugid, task_definition
from tests.services import memory_service


async def create(service, **overrides):
    task_id = slugid()
    definition = task_definition(**overrides)
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    return task_id, definition


async def _received(service, queue):
    return await service.stores.queues.receive(queue, 32, 0)


async def test_createtask_puts_deadline_check_and_hint_before_the_task(service):
    task_id, definition = await create(service)
    [hint] = await _received(service, pending_queue(definition["taskQueueId"], "lowest"))
    assert PendingHint.decode(hint.json()).taskId == task_id
    assert (await service.queries.task(task_id)).status()["state"] == "pending"


async def test_concurrent_claims_of_one_run_return_one_claim(service):
    task_id, _ = await create(service)

    async def race():
        return await asyncio.gather(*(service.claims.claim(task_id, 0, "g", f"w{i}") for i in range(8)))

    results = await race()
    assert sum(isinstance(r, Claim) for r in results) == 1
    assert all(r is ClaimRefusal.CONFLICT for r in results if not isinstance(r, Claim))


async def test_only_the_runs_own_hint_claims_it(service):
    task_id, definition = await create(service)
    [message] = await _received(service, pending_queue(definition["taskQueueId"], "lowest"))
    hint = PendingHint.decode(message.json()).hintId
    assert await service.claims.claim(task_id, 0, "g", "w", "a-duplicate") is ClaimRefusal.CONFLICT
    assert isinstance(await service.claims.claim(task_id, 0, "g", "w", hint), Claim)
    assert isinstance(await service.claims.claim(task_id, 0, "g", "w", hint), Claim)  # a retry of the same hint
    assert await service.claims.claim(task_id, 0, "g", "w", "another") is ClaimRefusal.CONFLICT


async def test_stale_and_duplicated_claim_checks_change_nothing(service, clock):
    task_id, _ = await create(service)
    claim = await service.claims.claim(task_id, 0, "g", "w")
    first_until = claim.run.taken_until
    clock.advance(10)
    await service.claims.reclaim_task(task_id, 0)
    clock.advance(55)  # past the first takenUntil, before the reclaimed one
    assert await service.checks.check_claim(ClaimCheck(task_id, 0, first_until)) == "stale"
    assert (await service.queries.task(task_id)).status()["state"] == "running"
    clock.advance(60)
    until = (await service.queries.task(task_id)).status()["runs"][0]["takenUntil"]
    check = ClaimCheck(task_id, 0, timeutil.parse(until))
    assert await service.checks.check_claim(check) == "expired"
    after = (await service.queries.task(task_id)).status()
    # A duplicate of the same message finds the run resolved: it makes sure of what follows (here nothing: the
    # task was retried, and its events were asked for by the expiry's own write) and changes nothing.
    assert await service.checks.check_claim(check) == "followed-up"
    assert (await service.queries.task(task_id)).status() == after


async def test_early_claim_check_is_put_back(service, clock):
    task_id, _ = await create(service)
    claim = await service.claims.claim(task_id, 0, "g", "w")
    await service.stores.queues.receive(CLAIM_QUEUE, 32, 0)  # drop the original check from view
    assert await service.checks.check_claim(ClaimCheck(task_id, 0, claim.run.taken_until)) == "early"
    assert (await service.queries.task(task_id)).status()["state"] == "running"
    assert await service.stores.queues.approximate_count(CLAIM_QUEUE) == 2


async def test_claim_check_for_a_missing_task_is_harmless(service):
    assert await service.checks.check_claim(ClaimCheck(slugid(), 0, timeutil.now())) == "task-gone"
    assert await service.checks.check_deadline(DeadlineCheck(slugid(), timeutil.now())) == "task-gone"


async def test_deadline_check_for_another_deadline_is_stale(service, clock):
    task_id, definition = await create(service)
    clock.advance(3700)
    other = timeutil.parse(definition["deadline"]) - dt.timedelta(seconds=5)
    assert await service.checks.check_deadline(DeadlineCheck(task_id, other)) == "stale"
    real = DeadlineCheck(task_id, timeutil.parse(definition["deadline"]))
    assert await service.checks.check_deadline(real) == "exceeded"
    assert await service.checks.check_deadline(real) == "already-resolved"
    # The task's deadline bucket is still queued; when it comes due it finds the task resolved already.
    [bucket] = service.stores.queues.contents(DEADLINE_QUEUE)
    assert await service.checks.check_deadlines(json.loads(bucket)) == "checked 1"
    assert (await service.queries.task(task_id)).status()["runs"][-1]["reasonResolved"] == "deadline-exceeded"


async def test_hint_for_a_run_not_yet_written_is_kept_while_young(service, clock):
    task_id, definition = await create(service)
    tq = definition["taskQueueId"]
    queue = pending_queue(tq, "lowest")
    future = PendingHint(task_id, 1, "h")  # run 1 does not exist (yet)
    await service.stores.queues.put(queue, future.encode())
    await service.claims.claim(task_id, 0, "g", "w")  # run 0 is taken
    await service.stores.queues.receive(queue, 32, 0)  # make the original hint of run 0 cycle
    assert await claim_work(service, tq, "g", "w2", 1) == []
    assert await service.stores.queues.approximate_count(queue) >= 1  # the young hint was released, not deleted
    clock.advance(120)
    assert await claim_work(service, tq, "g", "w2", 1) == []
    assert await service.stores.queues.approximate_count(queue) == 0  # old now: dropped


async def test_claim_work_waits_as_long_as_the_setting_says(service):

    service.stores.settings = service.settings.model_copy(
        update={"claim_work_wait": 0.5, "claim_work_poll_interval": 0.1}
    )
    started = time.monotonic()
    assert await claim_work(service, "p/none", "g", "w", 1) == []
    assert time.monotonic() - started >= 0.5


async def test_errors_are_raised_as_taskcluster_errors(service):
    with pytest.raises(errors.TaskNotFound) as found:
        (await service.queries.task("missing")).status()
    assert found.value.status == 404 and found.value.code == "ResourceNotFound"
    assert "missing" in found.value.message


def test_keys_are_encoded_for_azure():
    from shared.storage.keys import decode_key, encode_key

    for value in ["task-client/abc/0/on/g/w", "a\\b#c?d%e", "plain", "ctl\x01"]:
        encoded = encode_key(value)
        assert not set("/\\#?") & set(encoded) and all(c >= " " for c in encoded)
        assert decode_key(encoded) == value


async def test_dependency_resolving_while_its_dependent_is_being_created(service, clock, monkeypatch):
    """The dependency resolves after createTask read it (unresolved) and before it wrote the dependent, in another
    process: the resolution finds no task to release, and leaves a message of its own for it, which releases it
    once written."""
    from shared.domain.messages import ResolvedCheck

    root, definition = await create(service)
    tq = definition["taskQueueId"]
    await claim_work(service, tq, "g", "w", 1)
    write = service.tasks.write

    async def elsewhere(table, key):
        return False  # the dependent's write is not known to be in flight here

    monkeypatch.setattr(service.stores.events.in_flight, "settled", elsewhere)

    async def write_while_root_resolves(task, **kwargs):
        if kwargs.get("insert") and task.task_id != root:  # the dependent, read its dependency, is written now
            service.tasks.write = write
            await service.lifecycle.resolve(root, 0, "completed", "completed")
            [(_, message)] = await resolution_messages(service)
            assert await service.resolution.resolve_dependencies(ResolvedCheck.decode(message.json())) == "resolved"
        return await write(task, **kwargs)

    service.tasks.write = write_while_root_resolves
    dependent, _ = await create(service, taskQueueId=tq, dependencies=[root])
    assert (await service.queries.task(dependent)).status()["state"] == "unscheduled"
    clock.advance(service.stores.settings.hint_retry_delay + 0.1)
    [(_, message)] = await resolution_messages(service)
    later = ResolvedCheck.decode(message.json())
    assert later.dependent == dependent and later.taskId == root
    assert await service.resolution.follow_up(later) == "resolved"
    assert (await service.queries.task(dependent)).status()["state"] == "pending"
    assert await service.resolution.follow_up(later) == "resolved"  # again: harmless
    assert len((await service.queries.task(dependent)).runs) == 1


async def test_retried_create_task_finishes_what_a_crash_after_its_write_left(service):
    """createTask wrote the dependent, then its answer was lost; its dependency resolved and that resolution was
    lost too (its message gone before the dependents were released). The client's retry (same definition) must
    release it, not only answer 200: it writes its edges again, which prove the dependency completed."""
    root, definition = await create(service)
    tq = definition["taskQueueId"]
    task_id = slugid()
    body = task_definition(taskQueueId=tq, dependencies=[root])
    await service.creation.create_task(task_id, dict(body, **schema_defaults(body)))
    await claim_work(service, tq, "g", "w", 1)
    await service.lifecycle.resolve(root, 0, "completed", "completed")
    for name, message in await resolution_messages(service):
        await service.stores.queues.delete(name, message)  # lost
    assert (await service.queries.task(task_id)).status()["state"] == "unscheduled"
    again = await service.creation.create_task(task_id, dict(body, **schema_defaults(body)))
    assert again.status()["state"] == "pending"


async def test_claim_work_skips_a_pending_queue_found_empty_until_a_hint_is_put_or_the_ttl_passes(clock):
    tables, queues, ticks = MemoryTables(), MemoryQueues(), Ticks(step=1e-6)
    service = memory_service(tables=tables, queues=queues, clock=clock, ticks=ticks, pending_empty_ttl=0.3)
    other = memory_service(tables=tables, queues=queues, clock=clock, pending_empty_ttl=0.3)  # another process
    definition = task_definition()
    tq = definition["taskQueueId"]
    assert await claim_work(service, tq, "g", "w", 1) == []  # every queue found empty
    # A task created by this process is seen at once (its hint clears the skip)...
    task_id = slugid()
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    [claim] = await claim_work(service, tq, "g", "w", 1)
    assert claim["status"]["taskId"] == task_id
    # ...one created by another process once the skip has lapsed, and not before.
    assert await claim_work(service, tq, "g", "w", 1) == []
    late_id = slugid()
    await other.creation.create_task(late_id, dict(definition, **schema_defaults(definition)))
    assert await claim_work(service, tq, "g", "w", 1) == []
    ticks.advance(0.3)
    [late] = await claim_work(service, tq, "g", "w", 1)
    assert late["status"]["taskId"] == late_id


async def test_claim_work_answers_with_its_claims_even_when_recording_the_worker_fails(service):
    """Once claims are saved, nothing may fail before they are answered: a worker that never hears of them would
    leave them claimed until they expire."""
    task_id, definition = await create(service)
    calls = []

    async def first_ok(*args):  # claimWork records the worker before it claims (that may fail), and after
        calls.append(args)
        if len(calls) > 1:
            raise RuntimeError("storage unavailable")

    service.stores.workers.active = first_ok
    [claim] = await claim_work(service, definition["taskQueueId"], "wg", "w", 1)
    assert claim["status"]["taskId"] == task_id and len(calls) == 2
    assert (await service.queries.task(task_id)).status()["state"] == "running"


class LosingReceives(MemoryQueues):
    """A queue store whose next `losing` receives that find messages take them and lose the answer (as a dropped
    connection does after Azure applied the receive): the messages stay hidden, the caller gets none."""

    losing = 1

    async def receive(self, queue, max_messages, visibility_timeout):
        taken = await super().receive(queue, max_messages, visibility_timeout)
        if self.losing and taken:
            self.losing -= 1
            return Received(lost=True)
        return taken


async def test_claim_work_after_a_lost_receive_claims_from_the_index(clock):
    queues, ticks = LosingReceives(clock), Ticks(step=1e-6)  # the hint hides on the queue's clock, the skip on ticks
    service = memory_service(queues=queues, clock=clock, ticks=ticks, pending_hint_visibility=1)
    older, definition = await create(service, priority="lowest")
    tq = definition["taskQueueId"]
    clock.advance(1)
    newer, _ = await create(service, taskQueueId=tq, priority="high")
    # The receive from the high queue takes `newer`'s hint and loses it; the index gives the oldest run instead.
    [first] = await claim_work(service, tq, "g", "w", 1)
    assert first["status"]["taskId"] == older
    assert first["status"]["runs"][0]["state"] == "running"
    # `newer`'s hint is still hidden, and `older`'s is stale now: the index is looked at again while it hides.
    [second] = await claim_work(service, tq, "g", "w", 1)
    assert second["status"]["taskId"] == newer
    clock.advance(1.1)  # the hidden hint comes back
    ticks.advance(1.1)
    assert await claim_work(service, tq, "g", "w2", 2) == []  # its run is claimed: dropped, nothing doubled
    assert await service.stores.queues.approximate_count(pending_queue(tq, "high")) == 0


async def test_a_duplicated_hint_does_not_give_the_same_worker_its_claim_twice(service, clock):
    # A put retried after a lost answer leaves two copies of a hint (Azure Queue has no idempotency key).
    task_id, definition = await create(service)
    tq = definition["taskQueueId"]
    queue = pending_queue(tq, "lowest")
    [hint] = await service.stores.queues.receive(queue, 32, 1)
    await service.stores.queues.put(queue, hint.content)
    clock.advance(1.1)  # the original is visible again
    [claim] = await claim_work(service, tq, "g", "w", 1)
    assert claim["status"]["taskId"] == task_id
    assert await claim_work(service, tq, "g", "w", 1) == []  # the copy is dropped, not answered again
    assert await service.stores.queues.approximate_count(queue) == 0


async def test_the_same_hint_received_again_gives_the_worker_its_claim_again(service):
    # The claimWork answer was lost before the hint was deleted: the same message comes back to the same worker,
    # which gets its claim again; a copy of the hint (another message) does not.
    task_id, definition = await create(service)
    queue = pending_queue(definition["taskQueueId"], "lowest")
    [message] = await service.stores.queues.receive(queue, 32, 1)
    hint = PendingHint.decode(message.json())
    first = await service.claims.claim(task_id, 0, "g", "w", hint.hintId, f"{hint.hintId}@{message.id}")
    again = await service.claims.claim(task_id, 0, "g", "w", hint.hintId, f"{hint.hintId}@{message.id}")
    assert isinstance(first, Claim) and isinstance(again, Claim)
    assert again.run.taken_until == first.run.taken_until
    copy = await service.claims.claim(task_id, 0, "g", "w", hint.hintId, f"{hint.hintId}@another-message")
    assert copy is ClaimRefusal.CONFLICT
