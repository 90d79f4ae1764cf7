"""What the queue triggers would draw on Flex Consumption while tasks run: each watched queue's approximate count,
and the instances Azure's target scaler votes for once one message in it is due (local_host/scaler.py).

    .venv/bin/python -m bench.votes [--running 2000] [--claim-timeout 1200] [--deadlines-over 86400] [--lead 60]
    .venv/bin/python -m bench.votes --root-url http://127.0.0.1:7071 --storage "$QUEUE_STORAGE" [--running 400]

The second form measures a running queue (`make run`: QUEUE_STORAGE is in the data dir's runtime.json; the
TASKCLUSTER_* credentials it prints in the environment): the tasks are created and claimed through the official
client, the queues read from its storage, and nothing else is put there but the one due claim check and bucket.

Starts its own Azurite (in memory; it counts a queue's messages as Azure does, delayed ones included), creates
`--running` tasks whose deadlines are spread over `--deadlines-over` seconds (a day: a bucket message each second
that holds one), claims them all with claims of `--claim-timeout` seconds, and prints each watched queue's count,
whether a message is due, and the vote: first as it stands (nothing due yet), then with one claim check and one
deadline bucket due, as at any moment while claims and deadlines come due; then in a steady state, where claims
were taken over the last `--claim-timeout` seconds, so that one comes due every `claim-timeout / running` seconds
(the bench puts `--running` more checks with their `takenUntil` spread so, and runs the mover once). Issue #66: the
claim checks and deadlines wait parked (shared/domain/parking.py), so the votes follow the work due within
QUEUE_PARK_LEAD (`--lead`), not the work outstanding. The parking queues are listed for their counts; no trigger
watches them. Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from local_host import azurite, scaler
from shared import timeutil
from shared.domain.deadlines import DeadlineBucket
from shared.domain.messages import CLAIM_QUEUE, DEADLINE_QUEUE, ClaimCheck, Shards, bucket_of
from shared.runtime import Queue, build_queue
from shared.settings import load_settings
from shared.storage.rest import RestQueues, RestTables
from shared.stores.parking import CheckQueues

CONCURRENCY = 32
TASK_QUEUE = "bench/votes"


def definition(deadline: dt.datetime, now: dt.datetime) -> dict[str, object]:
    return {
        "taskQueueId": TASK_QUEUE,
        "schedulerId": "bench",
        "taskGroupId": timeutil.slugid(),
        "routes": [],
        "priority": "lowest",
        "retries": 5,
        "created": timeutil.iso(now),
        "deadline": timeutil.iso(deadline),
        "expires": timeutil.iso(deadline + dt.timedelta(days=1)),
        "scopes": [],
        "payload": {},
        "metadata": {"name": "votes", "description": "", "owner": "bench@example.com", "source": "https://example.com"},
        "tags": {},
        "extra": {},
        "dependencies": [],
        "requires": "all-completed",
        "projectId": "none",
        "provisionerId": "bench",
        "workerType": "votes",
    }


async def fill(queue: Queue, running: int, spread: float) -> None:
    """`running` tasks, deadlines spread over `spread` seconds from an hour on, all claimed."""
    now = timeutil.to_ms(timeutil.now())
    limit = asyncio.Semaphore(CONCURRENCY)

    async def create(i: int) -> None:
        deadline = now + dt.timedelta(hours=1, seconds=spread * i / max(running, 1))
        async with limit:
            await queue.creation.create_task(timeutil.slugid(), definition(deadline, now))

    await asyncio.gather(*(create(i) for i in range(running)))
    claimed = 0
    while claimed < running:
        claimed += len(await queue.work.claim_work(TASK_QUEUE, "bench", "votes", 32))
        print(f"  claimed {claimed}/{running}", end="\r", flush=True)
    print()


async def sample(queues: RestQueues, title: str) -> None:
    """Each watched queue's vote, then the parking queues' counts (no trigger watches them)."""
    show(title, await scaler.sample(queues, scaler.watched_queues(Shards()), scaler.host_concurrency()))
    parked = await scaler.sample(queues, [CLAIM_QUEUE, DEADLINE_QUEUE], scaler.host_concurrency())
    print("  parked, watched by no trigger: " + ", ".join(f"{v.queue} {v.messages}" for v in parked))


def show(title: str, votes: list[scaler.Vote]) -> None:
    print(title)
    for vote in votes:
        print(
            f"  {vote.queue:20} {vote.messages:6} messages, {'due' if vote.due else 'none due':8} -> {vote.instances}"
        )
    print(f"  instances voted for: {sum(v.instances for v in votes)}")


async def measure(store: azurite.Azurite, args: argparse.Namespace) -> None:
    settings = load_settings(
        storage=store.connection_string,
        root_access_token="x" * 30,
        claim_timeout=args.claim_timeout,
        deadline_delay=0,
        claim_work_wait=0,
        park_lead=args.lead,
    )
    queues = RestQueues(store.connection_string)
    queue = build_queue(settings, RestTables(store.connection_string), queues)
    checks = queue.stores.check_queues

    try:
        started = time.monotonic()
        await fill(queue, args.running, args.deadlines_over)
        print(f"{args.running} tasks created and claimed in {time.monotonic() - started:.0f} s")
        await sample(queues, "as they stand (nothing due yet):")
        print(f"  the mover: {await checks.move_due()}")
        past = timeutil.now() - dt.timedelta(seconds=1)
        await checks.put(CLAIM_QUEUE, "due", ClaimCheck(timeutil.slugid(), 0, past).encode(), past)
        await checks.put(DEADLINE_QUEUE, "due", DeadlineBucket(bucket_of(past)).encode(), past)
        await sample(queues, "one claim check and one deadline bucket due:")
        await steady(checks, args)
        print(f"  the mover: {await checks.move_due()}")
        await sample(queues, f"steady state, one claim coming due every {args.claim_timeout / args.running:.2f} s:")
    finally:
        await queue.close()


async def steady(checks: CheckQueues, args: argparse.Namespace) -> None:
    """`--running` claim checks more, their `takenUntil` spread over the claim timeout, as claims taken over the last
    claim timeout left them."""
    now = timeutil.to_ms(timeutil.now())
    limit = asyncio.Semaphore(CONCURRENCY)

    async def put(i: int) -> None:
        due = now + dt.timedelta(seconds=args.claim_timeout * (i + 1) / args.running)
        async with limit:
            await checks.put(CLAIM_QUEUE, str(i), ClaimCheck(timeutil.slugid(), 0, due).encode(), due)

    await asyncio.gather(*(put(i) for i in range(args.running)))


def fill_through_api(args: argparse.Namespace) -> str:
    """`--running` tasks created and claimed through the official client against `--root-url`; their task queue."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import taskcluster

    client = taskcluster.Queue(
        {
            "rootUrl": args.root_url,
            "credentials": {
                "clientId": os.environ["TASKCLUSTER_CLIENT_ID"],
                "accessToken": os.environ["TASKCLUSTER_ACCESS_TOKEN"],
            },
        }
    )
    task_queue = f"bench/votes-{timeutil.slugid().lower()[:8].replace('_', 'x').replace('-', 'y')}"
    now = timeutil.to_ms(timeutil.now())

    def create(i: int) -> None:
        deadline = now + dt.timedelta(hours=1, seconds=args.deadlines_over * i / max(args.running, 1))
        body = dict(definition(deadline, now), taskQueueId=task_queue, provisionerId=None, workerType=None)
        client.createTask(timeutil.slugid(), {k: v for k, v in body.items() if v is not None})

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(create, range(args.running)))
    claimed = 0
    while claimed < args.running:
        claimed += len(
            client.claimWork(task_queue, {"tasks": 32, "workerGroup": "bench", "workerId": "votes"})["tasks"]
        )
        print(f"  claimed {claimed}/{args.running}", end="\r", flush=True)
    print()
    return task_queue


async def measure_running(args: argparse.Namespace) -> None:
    """The running queue's watched and parked queues, as its tasks left them, then with one check and one bucket
    due (a check for a task that does not exist, and a bucket with no rows: their handlers find nothing to do)."""
    started = time.monotonic()
    fill_through_api(args)
    print(f"{args.running} tasks created and claimed through {args.root_url} in {time.monotonic() - started:.0f} s")
    queues = RestQueues(args.storage)

    try:
        await sample(queues, "as they stand:")
        past = timeutil.now() - dt.timedelta(seconds=1)
        checks = CheckQueues(queues, Shards(), args.lead)
        await checks.put(CLAIM_QUEUE, "due", ClaimCheck(timeutil.slugid(), 0, past).encode(), past)
        await checks.put(DEADLINE_QUEUE, "due", DeadlineBucket(bucket_of(past)).encode(), past)
        await sample(queues, "one claim check and one deadline bucket due:")
    finally:
        await queues.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.votes", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--running", type=int, default=2000)
    parser.add_argument("--claim-timeout", type=int, default=1200)
    parser.add_argument("--deadlines-over", type=float, default=86400.0)
    parser.add_argument("--lead", type=int, default=60, help="QUEUE_PARK_LEAD")
    parser.add_argument("--root-url", help="measure this running queue (with --storage) instead of one of its own")
    parser.add_argument("--storage", help="the running queue's QUEUE_STORAGE connection string")
    args = parser.parse_args()
    if args.root_url:
        if not args.storage:
            parser.error("--root-url needs --storage (make run: QUEUE_STORAGE in the data dir's runtime.json)")
        asyncio.run(measure_running(args))
        return 0
    with tempfile.TemporaryDirectory() as data:
        store = azurite.start(Path(data), in_memory=True)
        try:
            asyncio.run(measure(store, args))
        finally:
            store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
