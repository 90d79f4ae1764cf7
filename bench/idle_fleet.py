"""What an idle fleet draws on Azure: workers waiting for work through claimWork, as generic-worker calls it (a call,
then 5 s before the next: its main loop's timer), on a local host, with the requests in flight sampled as Flex
Consumption's HTTP scaling counts them (local_host/scaler.py, `http_instances`).

    .venv/bin/python -m bench.idle_fleet [--workers 100 1000] [--waiters 16 none] [--seconds 60]

For each number of workers and each `QUEUE_CLAIM_WORK_WAITERS` (`none`: unbounded, every claimWork waits its
20 s, as before the bound) it starts its own Azurite (in memory) and local host, lets the fleet settle for 30 s,
then samples for `--seconds` and prints: the requests in flight (mean, most), the instances Flex would run for
them at `--per-instance` (infra's `httpConcurrency`, 32), instance-seconds per hour, what that costs a month at
Flex's published on-demand prices (execution time per GB-s of `--instance-gb`, and executions), the claimWork
calls a second, and the host's CPU and memory: per call, per waiting request. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import taskcluster.aio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.hostile import rss_mb
from bench.lifecycle import cpu_seconds, start_embedded, stop_all
from local_host.scaler import http_instances

# Flex Consumption, on demand (Azure Functions pricing page, East US, pay as you go): execution time while an
# instance executes at least one function, per GB-s of its memory, and executions. Free grants left out.
PRICE_GB_S = 0.000026
PRICE_PER_EXECUTION = 0.40 / 1_000_000
MONTH = 30 * 24 * 3600
SETTLE = 30.0


class Fleet:
    """`workers` simulated generic-workers on one HTTP session: each calls claimWork, then waits `gap` seconds."""

    def __init__(self, root_url: str, credentials: dict[str, str], workers: int, gap: float) -> None:
        self.root_url, self.credentials, self.workers, self.gap = root_url, credentials, workers, gap
        self.in_flight = 0
        self.calls = 0
        self.claimed = 0
        self.errors: Counter[str] = Counter()
        self.waits: list[float] = []

    async def run(self, stop: asyncio.Event) -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            queue = taskcluster.aio.Queue({"rootUrl": self.root_url, "credentials": self.credentials}, session=session)
            tasks = [asyncio.create_task(self._worker(queue, i, stop)) for i in range(self.workers)]
            await stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _worker(self, queue: Any, number: int, stop: asyncio.Event) -> None:
        await asyncio.sleep(random.uniform(0, self.gap))  # workers started over a few seconds, not at once
        while not stop.is_set():
            self.in_flight += 1
            started = time.monotonic()
            try:
                answer = await queue.claimWork(
                    "bench-prov/idle-fleet", {"workerGroup": "bench", "workerId": f"w{number}", "tasks": 1}
                )
                self.claimed += len(answer["tasks"])
            except Exception as exc:
                self.errors[getattr(exc, "status_code", None) or type(exc).__name__] += 1
            finally:
                self.in_flight -= 1
                self.calls += 1
                self.waits.append(time.monotonic() - started)
            await asyncio.sleep(self.gap)


async def measure(
    root_url: str, credentials: dict[str, str], host_pid: int, args: argparse.Namespace, workers: int
) -> dict[str, Any]:
    fleet = Fleet(root_url, credentials, workers, args.gap)
    stop = asyncio.Event()
    rss_idle = rss_mb(host_pid)
    running = asyncio.create_task(fleet.run(stop))
    await asyncio.sleep(SETTLE)
    watched = {"host": [host_pid]}
    cpu_before, calls_before, started = cpu_seconds(watched)["host"], fleet.calls, time.monotonic()
    fleet.waits.clear()
    samples: list[int] = []
    while time.monotonic() - started < args.seconds:
        samples.append(fleet.in_flight)
        await asyncio.sleep(0.25)
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(watched)["host"] - cpu_before
    calls = fleet.calls - calls_before
    rss = rss_mb(host_pid)
    waits = list(fleet.waits)  # before the calls still in flight are cancelled
    stop.set()
    await running
    instances = [http_instances(n, args.per_instance) for n in samples]
    mean_instances = statistics.fmean(instances)
    mean_in_flight = statistics.fmean(samples)
    per_second = calls / elapsed
    return {
        "in_flight": mean_in_flight,
        "in_flight_most": max(samples),
        "in_flight_p95": statistics.quantiles(samples, n=20)[-1],
        "instances": mean_instances,
        "instances_most": max(instances),
        "instances_p95": http_instances(int(statistics.quantiles(samples, n=20)[-1]), args.per_instance),
        "instance_hours": mean_instances * 3600,
        "month": mean_instances * args.instance_gb * MONTH * PRICE_GB_S + per_second * MONTH * PRICE_PER_EXECUTION,
        "calls": per_second,
        "wait": statistics.median(waits) if waits else 0.0,
        "cpu_per_call_ms": 1000 * cpu / max(calls, 1),
        "cpu_share": cpu / elapsed,
        "rss_per_waiting_kb": 1024 * (rss - rss_idle) / max(mean_in_flight, 1),
        "errors": dict(fleet.errors),
        "claimed": fleet.claimed,
    }


def run_one(args: argparse.Namespace, workers: int, waiters: str) -> None:
    os.environ.update(
        {
            "QUEUE_CLAIM_WORK_WAITERS": "1000000" if waiters == "none" else waiters,
            "QUEUE_HTTP_MAX_CONNECTIONS": str(4 * workers + 100),  # the local host's own bound, out of the way
            "QUEUE_HTTP_PER_PEER_SHARE": "1",
        }
    )
    stops: list[Any] = []
    watched: dict[str, list[int]] = {}
    try:
        root_url, credentials, _ = start_embedded(stops, watched, in_memory=True)
        figures = asyncio.run(measure(root_url, credentials, watched["host"][0], args, workers))
    finally:
        stop_all(stops)
    print(
        f"{workers} workers, waiters {waiters}: in flight {figures['in_flight']:.0f} (p95 "
        f"{figures['in_flight_p95']:.0f}, most {figures['in_flight_most']}); instances at {args.per_instance} a piece "
        f"{figures['instances']:.2f} (p95 {figures['instances_p95']}, most {figures['instances_most']}), "
        f"{figures['instance_hours']:.0f} instance-seconds an hour, "
        f"${figures['month']:.0f} a month at {args.instance_gb} GB; {figures['calls']:.0f} claimWork/s, each "
        f"answered in {figures['wait']:.2f} s (median); host CPU {figures['cpu_per_call_ms']:.2f} ms a call, "
        f"{100 * figures['cpu_share']:.0f} % of a core; host memory {figures['rss_per_waiting_kb']:.0f} KiB per "
        f"request in flight; errors {figures['errors'] or 'none'}, {figures['claimed']} claimed",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--waiters", nargs="+", default=["16", "none"], help="QUEUE_CLAIM_WORK_WAITERS values")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--gap", type=float, default=5.0, help="a worker's pause after each claimWork")
    parser.add_argument("--per-instance", type=int, default=32, help="Flex's perInstanceConcurrency")
    parser.add_argument("--instance-gb", type=float, default=2.0)
    args = parser.parse_args()
    for workers in args.workers:
        for waiters in args.waiters:
            run_one(args, workers, waiters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
