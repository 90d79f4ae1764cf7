"""The scaled-job model (local_host/jobs.py): KEDA's default strategy for jobs, and the scaler's bookkeeping of its
executions, with stand-in processes."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from local_host.jobs import JobRule, JobScaler, executions_to_start, fullest_pending_queue
from shared.domain.messages import pending_queue
from shared.storage.memory import MemoryQueues


@given(
    pending=st.integers(0, 500),
    running=st.integers(0, 20),
    most=st.integers(1, 20),
    per_execution=st.integers(1, 10),
)
def test_executions_started_never_pass_the_most_at_once_nor_outnumber_the_work(pending, running, most, per_execution):
    rule = JobRule("p/t", max_executions=most, queue_length=per_execution)
    started = executions_to_start(pending, running, rule)
    assert started >= 0
    assert running + started <= max(running, most)  # never past the most at once (none stopped to get there)
    assert started <= math.ceil(pending / per_execution)  # never more than the work calls for
    if pending == 0:
        assert started == 0  # nothing pending: nothing starts (scale to zero)
    if running == 0 and pending:
        assert started == min(math.ceil(pending / per_execution), most)


class Execution:
    """A stand-in worker process: it ends when told (`returncode` set)."""

    def __init__(self) -> None:
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.returncode = -15

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


async def test_the_scaler_starts_what_is_pending_keeps_count_and_forgets_what_ended() -> None:
    pending = [7]
    made: list[Execution] = []

    async def count() -> int:
        return pending[0]

    def start() -> Any:
        made.append(Execution())
        return made[-1]

    scaler = JobScaler(JobRule("p/t", max_executions=3), count, start, say=lambda _: None)
    assert await scaler.tick() == 3 and scaler.peak == 3
    assert await scaler.tick() == 0  # three run: none more
    made[0].returncode = 0  # one took its task and left
    pending[0] = 0
    assert await scaler.tick() == 0 and scaler.exit_codes == {0: 1} and len(scaler.running) == 2
    scaler.stop_all()
    assert scaler.running == [] and scaler.exit_codes == {-15: 2, 0: 1}


async def test_the_signal_reads_every_priority_and_shard_and_follows_the_fullest_as_keda_does() -> None:
    queues = MemoryQueues()
    for priority, shard in (("highest", 0), ("lowest", 1), ("medium", 1), ("medium", 1)):
        await queues.put(pending_queue("p/t", priority, shard), b"{}")
    for _ in range(5):
        await queues.put(pending_queue("p/other", "medium", 0), b"{}")
    assert await fullest_pending_queue(queues, "p/t", shards=2) == 2  # medium's shard 1; the others' rules ask less
    await queues.put(pending_queue("p/t", "lowest", 1), b"{}")
    await queues.put(pending_queue("p/t", "lowest", 1), b"{}")
    assert await fullest_pending_queue(queues, "p/t", shards=2) == 3  # a rule of the lowest priority's shard 1 too
    assert await fullest_pending_queue(queues, "p/none") == 0  # never put to


async def test_the_model_runs_until_stopped_and_stops_its_executions() -> None:
    made: list[Execution] = []

    async def count() -> int:
        return 1

    first = asyncio.Event()

    def start() -> Any:
        made.append(Execution())
        first.set()
        return made[-1]

    scaler = JobScaler(JobRule("p/t", polling_interval=0.01), count, start, say=lambda _: None)
    stop = asyncio.Event()
    running = asyncio.create_task(scaler.run(stop))
    await first.wait()
    stop.set()
    await running
    assert len(made) == 1 and made[0].returncode == -15 and scaler.running == []
