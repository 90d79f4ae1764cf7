"""What a day of a Firefox-like load costs in workers (issue #87): a worker pool run as an event-driven Container
Apps job (infra/app/worker-pool.bicep), always on, or as VMs kept until 15 minutes idle (worker-manager's way), each
simulated task by task over the same day, and what each adds to the queue's own bill.

    .venv/bin/python -m bench.costs [--pushes 60] [--tasks-per-push 150] [--seed 1] [--always-on 100]

The day: `--pushes` pushes between 07:00 and 21:00 (none at night), each releasing `--tasks-per-push` tasks in three
waves (a fifth at once, three tenths 15 minutes later, the rest after 35: decision, builds, tests), each task
running a log-normal time around `--median-minutes` (at most an hour) on one worker of 1 vCPU and 2 GiB. A worker
runs one task at a time.

- jobs: every `--polling-interval` s the rule reads the pending tasks and starts executions for them up to
  `--max-executions` (less those running); an execution takes tasks after `--container-start` s and exits after
  `--idle-exit` s without one. Billed per second of each execution, at Container Apps' consumption rates.
- always on: `--always-on` workers, billed the whole day at the same rates.
- VMs: one is asked for as soon as a task waits with no idle VM (up to `--max-executions`), takes tasks after
  `--vm-boot` s and is deleted after 15 minutes without one; billed per second at `--vm-hourly`.

Printed per policy: worker-seconds billed and their cost, the share that ran tasks, the wait from a task's release
to its start (p50 / p95 / max), and the queue's own cost of the idle workers: an idle worker long-polls claimWork,
each poll an execution of the queue's function app (Flex Consumption: `--flex-gb-second` per GB-second of an
instance of `--instance-gb`, shared by `--http-concurrency` polls, and `--flex-per-million` executions); for jobs
also the rule's own readings of the pool's `--rules` queues (`--queue-per-10k` per 10,000 operations).

The prices are parameters: their defaults are Microsoft's pay-as-you-go list prices (USD, East US) as of 2026-11;
check https://azure.microsoft.com/pricing/ for your region. The container start and VM boot are assumptions, not
Microsoft figures (Microsoft documents none): set them from your own image.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

DAY = 86_400.0


@dataclass(frozen=True)
class Task:
    ready: float  # seconds since midnight it is released
    runs: float  # seconds it runs


def firefox_day(pushes: int, tasks_per_push: int, median_minutes: float, seed: int) -> list[Task]:
    """The day's tasks, by release time."""
    rng = random.Random(seed)
    waves = ((0.0, 0.2), (900.0, 0.3), (2100.0, 0.5))
    tasks = []
    for _ in range(pushes):
        pushed = rng.uniform(7 * 3600, 21 * 3600)
        for offset, share in waves:
            for _ in range(round(tasks_per_push * share)):
                runs = min(3600.0, rng.lognormvariate(math.log(median_minutes * 60), 0.8))
                tasks.append(Task(pushed + offset, runs))
    return sorted(tasks, key=lambda t: t.ready)


@dataclass
class Outcome:
    policy: str
    billed: float = 0.0  # worker-seconds paid for
    busy: float = 0.0  # worker-seconds that ran tasks
    idle: float = 0.0  # worker-seconds ready and without a task (long-polling claimWork)
    started: int = 0  # workers started
    peak: int = 0
    waits: list[float] = field(default_factory=list)


@dataclass
class Pool:
    """Workers that start after `start_delay`, run one task at a time and leave after `idle_timeout` without one;
    `provision(now, pending, workers)` says how many to start when asked (`ask_every`: on a timer; else on each
    release)."""

    start_delay: float
    idle_timeout: float
    provision: Callable[[int, int, int], int]  # (pending, workers, busy workers) -> workers to start
    ask_every: float | None = None

    def run(self, tasks: list[Task], outcome: Outcome, initial: int = 0) -> Outcome:
        events: list[tuple[float, int, str, int]] = []
        order = itertools.count()
        pending: list[Task] = []
        workers: dict[int, float] = {}  # worker -> when it started (asked for)
        idle_since: dict[int, float] = {}
        names = itertools.count()

        def push(at: float, kind: str, worker: int = -1) -> None:
            heapq.heappush(events, (at, next(order), kind, worker))

        def start(now: float, delay: float) -> None:
            worker = next(names)
            workers[worker] = now
            outcome.started += 1
            outcome.peak = max(outcome.peak, len(workers))
            ready_at[worker] = now + delay
            push(now + delay, "ready", worker)

        ready_at: dict[int, float] = {}

        def starting(now: float) -> int:
            return sum(1 for w, at in ready_at.items() if at > now and w in workers)

        def take(now: float, worker: int) -> None:
            if pending:
                task = pending.pop(0)
                outcome.waits.append(now - task.ready)
                outcome.busy += task.runs
                push(now + task.runs, "ready", worker)
            else:
                idle_since[worker] = now
                if self.idle_timeout < math.inf:
                    push(now + self.idle_timeout, "idle", worker)

        for task in tasks:
            push(task.ready, "release")
        for _ in range(initial):
            start(0.0, 0.0)
        if self.ask_every:
            push(random.Random(1).uniform(0, self.ask_every), "ask")
        released = iter(tasks)
        while events:
            now, _, kind, worker = heapq.heappop(events)
            if kind == "release":
                pending.append(next(released))
                if self.ask_every is None:
                    # Tasks not yet covered: less the idle workers and those still starting.
                    uncovered = len(pending) - len(idle_since) - starting(now)
                    for _ in range(self.provision(uncovered, len(workers), 0)):
                        start(now, self.start_delay)
                idle = sorted(idle_since, key=idle_since.__getitem__)
                if idle:
                    outcome.idle += now - idle_since.pop(idle[0])
                    take(now, idle[0])
            elif kind == "ask":
                busy = len(workers) - len(idle_since) - starting(now)
                for _ in range(self.provision(len(pending), len(workers), busy)):
                    start(now, self.start_delay)
                if len(outcome.waits) < len(tasks) or workers:
                    push(now + self.ask_every, "ask")  # type: ignore[operator]
            elif kind == "ready":
                take(now, worker)
            elif worker in idle_since and now - idle_since[worker] >= self.idle_timeout - 1e-6:  # float sums
                outcome.idle += now - idle_since.pop(worker)
                outcome.billed += now - workers.pop(worker)
        return outcome


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--pushes", type=int, default=60)
    add("--tasks-per-push", type=int, default=150)
    add("--median-minutes", type=float, default=8.0)
    add("--seed", type=int, default=1)
    add("--max-executions", type=int, default=300, help="the most workers at once, for jobs and VMs")
    add("--always-on", type=int, default=300)
    add("--polling-interval", type=float, default=30.0)
    add("--idle-exit", type=float, default=60.0)
    add("--container-start", type=float, default=20.0, help="seconds from an execution's start to its first claim")
    add("--vm-boot", type=float, default=240.0, help="seconds from a VM's request to its first claim")
    add("--vcpu-second", type=float, default=0.000024, help="Container Apps consumption, active, USD")
    add("--gib-second", type=float, default=0.000003, help="Container Apps consumption, active, USD")
    add("--vm-hourly", type=float, default=0.096, help="a D2s v5 Linux VM, USD an hour")
    add("--flex-gb-second", type=float, default=0.000026, help="Flex Consumption on demand, USD")
    add("--flex-per-million", type=float, default=0.40, help="Flex Consumption, USD a million executions")
    add("--instance-gb", type=float, default=2.0)
    add("--http-concurrency", type=int, default=32)
    add("--claim-work-wait", type=float, default=20.0, help="seconds a claimWork long-poll waits")
    add("--rules", type=int, default=8, help="a pool's scale rules (8 priorities x pending shards)")
    add("--queue-per-10k", type=float, default=0.004, help="Queue Storage operations, USD per 10,000")
    args = parser.parse_args(argv)
    if min(args.pushes, args.tasks_per_push, args.max_executions, args.always_on, args.rules) < 1:
        parser.error("--pushes, --tasks-per-push, --max-executions, --always-on and --rules must be at least 1")
    tasks = firefox_day(args.pushes, args.tasks_per_push, args.median_minutes, args.seed)
    most = args.max_executions

    # KEDA's default strategy for jobs: the executions the signal asks for, less those running. With the pending
    # queues as the signal a busy execution's task is no longer counted (its hint was deleted at the claim).
    jobs = Pool(args.container_start, args.idle_exit, lambda want, have, busy: max(0, min(want, most) - have))
    jobs.ask_every = args.polling_interval
    # The same with a signal that counts the claimed tasks too (taskQueueCounts: pendingTasks + claimedTasks).
    counts = Pool(args.container_start, args.idle_exit, lambda want, have, busy: max(0, min(want + busy, most) - have))
    counts.ask_every = args.polling_interval
    vms = Pool(args.vm_boot, 900.0, lambda want, have, busy: max(0, min(want, most - have)))
    always = Pool(0.0, math.inf, lambda want, have, busy: 0)
    container_second = args.vcpu_second * 1 + args.gib_second * 2
    rows = [
        (jobs.run(tasks, Outcome("jobs")), container_second),
        (counts.run(tasks, Outcome("jobs, counts signal")), container_second),
        (vms.run(tasks, Outcome("VMs, 15 min idle")), args.vm_hourly / 3600),
        (always.run(tasks, Outcome(f"always on ({args.always_on})"), initial=args.always_on), container_second),
    ]
    done = rows[-1][0]
    done.billed = args.always_on * DAY
    done.idle = done.billed - done.busy
    busy = sum(t.runs for t in tasks)
    print(f"day: {len(tasks)} tasks in {args.pushes} pushes, {busy / 3600:.0f} task-hours (seed {args.seed})")
    print(
        f"{'policy':<20} {'worker-h':>9} {'workers $':>10} {'ran tasks':>10} {'wait p50':>9} {'p95':>7} {'max':>7} "
        f"{'started':>8} {'peak':>5} {'queue $':>8}"
    )
    for outcome, per_second in rows:
        polls = outcome.idle / args.claim_work_wait
        queue = outcome.idle / args.http_concurrency * args.instance_gb * args.flex_gb_second
        queue += polls / 1e6 * args.flex_per_million
        if outcome.policy.startswith("jobs"):
            queue += args.rules * DAY / args.polling_interval / 1e4 * args.queue_per_10k
        print(
            f"{outcome.policy:<20} {outcome.billed / 3600:>9.0f} {outcome.billed * per_second:>10.2f} "
            f"{outcome.busy / outcome.billed:>10.0%} {percentile(outcome.waits, 0.5):>8.0f}s "
            f"{percentile(outcome.waits, 0.95):>6.0f}s {max(outcome.waits):>6.0f}s {outcome.started:>8} "
            f"{outcome.peak:>5} {queue:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
