"""Long-delayed checks parked where no trigger counts them, and brought to a triggered queue shortly before they
fall due.

Why: on Flex Consumption each queue-triggered function scales on its own, and the Storage Queue target scaler votes
`ceil(ApproximateMessagesCount / (batchSize + newBatchThreshold))` as soon as a peek finds one message visible, so
delayed messages count too. A claim check waits for its `takenUntil` (20 minutes), a deadline bucket for its second
(up to days): kept in the triggered queues, 2,000 running tasks voted 84 instances once one check was due
(`bench.votes`).

So a check due more than `lead` seconds ahead (QUEUE_PARK_LEAD) is put to its parking queue (`claim-expiry`,
`task-deadlines`: the names of old, which no trigger watches now), visible `lead` seconds before it is due; the
`move_due_checks` timer (QUEUE_PARK_SCHEDULE, more often than `lead`) receives what shows there and puts it to the
triggered queue (`claim-expiry-due`, `task-deadlines-due`) with what is left of its delay, then deletes it. A check
due sooner goes to the triggered queue straight away. A mover that dies between the put and the delete leaves the
parked message to show again after timing.MOVE_VISIBILITY and be moved twice: the handlers take the copy as they
take any stale or duplicated check.

What a running deployment stored stays readable both ways. Upgrading, the checks 0.2.0 queued with their whole
delay sit in the parking queue and are moved when they show, at most a timer period late. Rolling back, 0.2.0
triggers the parking queue itself: a parked check that it receives before it is due it puts back until then
(its handlers' `_put_back_if_early`); the checks already moved (at most `lead` seconds' worth) are in a queue it
does not read. Its reconciler resolves a claim past its `takenUntil` and a task past its deadline, but not what
a resolved run's claim check stands in for (its resolution's events and dependents, when its process was stopped
before it finished them: the fault campaign's rollout found such events unpublished). So a rollback to 0.2.0 ends
with `return_due` (`python -m local_host return-checks`), which puts every check of the triggered queues back in
the parking queues, visible when it is due (docs/deploy.md#releases-upgrades-and-rollbacks).
tests/acceptance/test_release_compatibility.py holds the first; the second rests on 0.2.0's put-back.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from shared import timeutil
from shared.domain.messages import CLAIM_DUE_QUEUE, CLAIM_QUEUE, DEADLINE_DUE_QUEUE, DEADLINE_QUEUE, bucket_time

DUE_QUEUE = {CLAIM_QUEUE: CLAIM_DUE_QUEUE, DEADLINE_QUEUE: DEADLINE_DUE_QUEUE}  # parking queue -> triggered queue
PARKED_KIND = {due: parked for parked, due in DUE_QUEUE.items()}  # triggered queue -> the kind of check it holds


def due_of(body: Any, now: dt.datetime) -> dt.datetime:
    """When a parked message falls due, from what it says: a claim check at its `takenUntil`, a deadline bucket at
    its second, a per-task deadline check (the form of old) at its deadline; a resolution message (a claim check a
    resolution turned into one) or anything unreadable now, for its handler to take or refuse."""
    if not isinstance(body, dict) or "taskGroupId" in body:
        return now
    try:
        if "takenUntil" in body:
            return timeutil.parse(str(body["takenUntil"]))
        if "bucket" in body:
            return bucket_time(str(body["bucket"]))
        if "deadline" in body:
            return timeutil.parse(str(body["deadline"]))
    except (TypeError, ValueError):
        pass
    return now


@dataclass
class Moved:
    """What one tick of the mover did: checks moved to their triggered queue, checks put back to wait (shown early:
    clock skew, or a check put with its whole delay by an older release is never early), and receives made."""

    moved: int = 0
    waiting: int = 0
    receives: int = 0
