"""A local model of a worker pool run as an event-driven Container Apps job (issue #87): nothing runs while nothing
is pending, and pending work starts the workers that take it.

On Azure, KEDA's azure-queue scale rule reads the pool's pending queues every `pollingInterval` (30 s by default)
and, with the default scaling strategy of a job, starts min(ceil(messages / queueLength), maxExecutions) minus the
executions still running; each execution takes the work there is and exits when it has been idle (the reference
worker's `--idle-exit`, generic-worker's `numberOfTasksToRun`/`idleTimeoutSecs`: docs/worker.md). Here the same
signal is read from Azurite (the approximate message count of each of the task queue's pending queues, every
priority and shard, the largest followed) on the same rule, and the executions are worker processes started beside
the queue. A pending hint that no claim will consume (a task cancelled or claimed by another execution first) counts
until a worker reads it: what a stale hint costs is one execution that finds nothing and exits after its idle time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from shared.domain.messages import pending_queues
from shared.storage.base import QueueStore

STOP_WAIT = 60.0  # seconds an execution is given to report its running tasks worker-shutdown when the model stops


@dataclass(frozen=True)
class JobRule:
    """A pool's job and its scale rule, as infra/ declares one (the names of KEDA's and Container Apps' settings)."""

    task_queue_id: str
    max_executions: int = 10  # maxExecutions: the most executions at once
    polling_interval: float = 30.0  # pollingInterval: how often the rule reads the queues
    queue_length: int = 1  # queueLength: pending messages an execution is started for
    idle_exit: float = 30.0  # the execution's own idle time before it exits


def executions_to_start(pending: int, running: int, rule: JobRule) -> int:
    """KEDA's default scaling strategy for jobs: the executions the pending messages call for, up to the most at
    once, less those still running."""
    wanted = min(math.ceil(pending / rule.queue_length), rule.max_executions)
    return max(0, wanted - running)


async def fullest_pending_queue(queues: QueueStore, task_queue_id: str, shards: int = 1) -> int:
    """The signal: a rule per pending queue of the task queue (every priority and shard, as `tc-queue-admin pools
    entry` declares them), each reading its queue's approximate message count (a queue never put to counts 0), and
    of several rules a job follows the one that asks most (KEDA's multipleScalersCalculation, `max` by default and
    not settable on Container Apps). Work spread over priorities starts fewer executions at once than tasks; each
    execution takes from every priority until it is idle, so the work is still all taken."""
    counts = await asyncio.gather(*(queues.approximate_count(q) for q in pending_queues(task_queue_id, shards)))
    return max(counts)


@dataclass
class JobScaler:
    """Polls the signal on the rule and starts executions (`start`: one worker process, which exits by itself)."""

    rule: JobRule
    count_pending: Callable[[], Awaitable[int]]
    start: Callable[[], subprocess.Popen[bytes]]
    say: Callable[[str], None] = print
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)
    readings: int = 0
    started: int = 0
    peak: int = 0
    exit_codes: collections.Counter[int] = field(default_factory=collections.Counter)  # executions per exit code

    def reap(self) -> None:
        """Forget the executions that ended, keeping their exit codes."""
        for process in [p for p in self.running if p.poll() is not None]:
            self.running.remove(process)
            self.exit_codes[process.returncode] += 1

    async def tick(self) -> int:
        """One reading of the rule: the executions started."""
        self.reap()
        pending = await self.count_pending()
        self.readings += 1
        count = executions_to_start(pending, len(self.running), self.rule)
        for _ in range(count):
            self.running.append(self.start())
        self.started += count
        self.peak = max(self.peak, len(self.running))
        if count:
            self.say(f"{pending} pending on {self.rule.task_queue_id}: started {count}, {len(self.running)} running")
        return count

    async def run(self, stop: asyncio.Event) -> None:
        """Tick every polling interval until `stop` is set, then stop what runs."""
        try:
            while not stop.is_set():
                began = time.monotonic()
                await self.tick()
                wait = max(0.0, self.rule.polling_interval - (time.monotonic() - began))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
        finally:
            await asyncio.to_thread(self.stop_all)

    def stop_all(self) -> None:
        """SIGTERM every running execution (its running tasks end worker-shutdown), SIGKILL after STOP_WAIT."""
        for process in self.running:
            if process.poll() is None:
                process.terminate()
        for process in self.running:
            try:
                process.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.reap()


class JobsBeside:
    """The model run beside `make run`'s host, in a thread of its own with its own event loop; `stop()` ends it
    and stops its executions."""

    def __init__(self, scaler: JobScaler, queues: QueueStore) -> None:
        self.scaler, self.queues = scaler, queues
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="jobs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.scaler.run(self._stop))
        finally:
            self._loop.run_until_complete(self.queues.close())
            self._loop.close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join()
