"""Benchmark of the task lifecycle through the official taskcluster client, against any rootUrl.

    .venv/bin/python -m bench.lifecycle --tasks 500            # starts its own Azurite + local host
    .venv/bin/python -m bench.lifecycle --root-url URL ...     # or uses TASKCLUSTER_* credentials

Scenarios (one line of figures each): `create` (8 threads creating tasks), `lifecycle` (8 threads creating,
8 workers each calling claimWork for up to 4 tasks then reportCompleted for each), `indexed` (the lifecycle of
tasks each with an `index.` route, indexed as it completes: docs/index-service.md), `fanout<N>` (N dependents of
one task: how long after the root resolved they were pending, by the server's timestamps), `graph<N>` (a layered
graph run to completion), `push<N>` (a CI push submitted by taskgraph's own create_tasks and drained by worker
pools per kind: bench/push.py), `expiry<N>` (N claims left to expire: how long after takenUntil each retry was
pending; use `--claim-timeout 5` with the embedded host). Prints rates, latencies and, for what it started, CPU seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import queue as threadqueue
import secrets
import signal
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import taskcluster

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from local_host import azurite  # noqa: E402
from shared import timeutil  # noqa: E402


def definition(task_queue: str) -> dict[str, Any]:
    now = timeutil.now()
    return {
        "taskQueueId": task_queue,
        "created": timeutil.iso(now),
        "deadline": timeutil.iso(now + dt.timedelta(hours=1)),
        "payload": {},
        "metadata": {
            "name": "bench",
            "description": "benchmark task",
            "owner": "bench@example.com",
            "source": "https://example.com/bench",
        },
    }


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Timer:
    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def call(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        started = time.perf_counter()
        result = fn(*args)
        with self.lock:
            self.samples.setdefault(name, []).append((time.perf_counter() - started) * 1000)
        return result

    def p50(self, name: str) -> float:
        return statistics.median(self.samples.get(name) or [float("nan")])


def run_threads(count: int, target: Callable[[int], None]) -> float:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


class Workers:
    """`threads` workers claiming from `tq` (up to `per_claim` tasks a call) and completing every claim, until
    `target` tasks are completed (`done`); calls are timed when a `timer` is given."""

    def __init__(
        self,
        client: Callable[..., taskcluster.Queue],
        tq: str,
        threads: int,
        target: int,
        per_claim: int,
        timer: Timer | None = None,
    ) -> None:
        self.client, self.tq, self.target, self.per_claim, self.timer = client, tq, target, per_claim, timer
        self.completed = 0
        self.claims: list[int] = []  # tasks each claimWork returned until the target was reached
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(i,)) for i in range(threads)]
        for thread in self.threads:
            thread.start()

    def _call(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        return self.timer.call(name, fn, *args) if self.timer else fn(*args)

    def _work(self, i: int) -> None:
        queue = self.client()
        while not self.done.is_set():
            claims = self._call(
                "claimWork",
                queue.claimWork,
                self.tq,
                {"workerGroup": "bench", "workerId": f"w{i}", "tasks": self.per_claim},
            )["tasks"]
            with self.lock:
                if not self.done.is_set():
                    self.claims.append(len(claims))
            for claim in claims:
                self._call(
                    "reportCompleted",
                    self.client(claim["credentials"]).reportCompleted,
                    claim["status"]["taskId"],
                    str(claim["runId"]),
                )
                with self.lock:
                    self.completed += 1
                    if self.completed >= self.target:
                        self.done.set()

    def join(self) -> None:
        for thread in self.threads:
            thread.join()


class DelayProxy:
    """local_host.fault_proxy in a thread of this process, between the host and Azurite, adding a fixed delay to
    every storage call of the host while `delay(seconds)` says so: what a far storage service does to latency."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.proxy: Any = None

    def start(self, storage: str) -> str:
        from local_host.fault_proxy import FaultProxy, Faults

        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.proxy = asyncio.run_coroutine_threadsafe(
            FaultProxy(storage, Faults(kinds=("delay",))).start(), self.loop
        ).result(10)
        return str(self.proxy.connection_string)

    def delay(self, seconds: float) -> None:
        def apply() -> None:
            self.proxy.faults.rate, self.proxy.faults.delay = (1.0 if seconds else 0.0), seconds

        self.loop.call_soon_threadsafe(apply)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def scenario_roundtrips(
    client: Callable[..., taskcluster.Queue], tasks: int, proxy: DelayProxy, delay: float, threads: int
) -> str:
    """Rounds with no added delay and with `delay` seconds added to every storage call, alternated: the growth of
    each call's latency (p50 and p95), in delays, is the number of storage round trips one after another on its
    path (what latency to a far storage service multiplies), measured as it runs, not counted by the host. Each
    round: `tasks` lone lifecycles one at a time (create, claimWork for 1, reportCompleted); `tasks` creates one at
    a time with 1, 10 and 100 dependencies; and a graph created by `threads` threads at once, each task depending
    on two earlier ones (group commits shared with other creators: their waits are in the figure)."""
    import random

    rng = random.Random(11)
    tq = f"bench/rt-{uuid.uuid4().hex[:8]}"
    unclaimed = f"bench/rt-deps-{uuid.uuid4().hex[:8]}"  # dependencies nobody claims: their dependents stay waiting
    group = timeutil.slugid()
    queue = client()
    pool = [timeutil.slugid() for _ in range(100)]
    for task_id in pool:
        queue.createTask(task_id, {**definition(unclaimed), "taskGroupId": group})
    names = [
        "createTask",
        "claimWork",
        "reportCompleted",
        "createTask, 1 dependency",
        "createTask, 10 dependencies",
        "createTask, 100 dependencies",
        f"createTask in a graph, {threads} threads",
    ]
    rounds: dict[float, list[dict[str, list[float]]]] = {}
    for added in (0.0, delay, 0.0, delay):  # alternated: the machine drifts
        proxy.delay(added)
        time.sleep(0.5)
        timer = Timer()
        for _ in range(tasks):
            task_id = timeutil.slugid()
            timer.call("createTask", queue.createTask, task_id, definition(tq))
            claims: list[Any] = []
            while not claims:
                claims = timer.call(
                    "claimWork", queue.claimWork, tq, {"workerGroup": "bench", "workerId": "rt", "tasks": 1}
                )["tasks"]
            [claim] = claims
            timer.call("reportCompleted", client(claim["credentials"]).reportCompleted, task_id, str(claim["runId"]))
        for count, name in ((1, names[3]), (10, names[4]), (100, names[5])):
            for _ in range(tasks):
                timer.call(
                    name,
                    queue.createTask,
                    timeutil.slugid(),
                    {**definition(unclaimed), "taskGroupId": group, "dependencies": rng.sample(pool, count)},
                )
        earlier = list(pool)
        lock = threading.Lock()

        def creator(i: int, timer: Timer = timer, earlier: list[str] = earlier, lock: threading.Lock = lock) -> None:
            q = client()
            for _ in range(tasks):
                task_id = timeutil.slugid()
                with lock:
                    deps = rng.sample(earlier[-200:], 2)
                timer.call(
                    names[6],
                    q.createTask,
                    task_id,
                    {**definition(unclaimed), "taskGroupId": group, "dependencies": deps},
                )
                with lock:
                    earlier.append(task_id)

        run_threads(threads, creator)
        rounds.setdefault(added, []).append(timer.samples)
    proxy.delay(0)

    def mean(added: float, name: str, q: float) -> float:
        return statistics.fmean(percentile(samples[name], q) for samples in rounds[added])

    parts = []
    for name in names:
        p50, p95 = ((mean(delay, name, q) - mean(0.0, name, q)) / (delay * 1000) for q in (0.5, 0.95))
        parts.append(
            f"{name} {p50:.1f} / {p95:.1f} (p50 {mean(0.0, name, 0.5):.0f} -> {mean(delay, name, 0.5):.0f} "
            f"ms, p95 {mean(0.0, name, 0.95):.0f} -> {mean(delay, name, 0.95):.0f} ms)"
        )
    return (
        f"roundtrips: storage round trips one after another per call, p50 / p95, with {delay * 1000:.0f} ms added "
        f"to each storage call (latency growth / delay, {tasks} calls of each kind per round, two rounds each "
        "way): " + "; ".join(parts)
    )


def scenario_create(client: Callable[[], taskcluster.Queue], tasks: int, threads: int) -> str:
    timer = Timer()
    tq = f"bench/create-{uuid.uuid4().hex[:8]}"

    def creator(i: int) -> None:
        queue = client()
        for _ in range(i, tasks, threads):
            timer.call("createTask", queue.createTask, timeutil.slugid(), definition(tq))

    elapsed = run_threads(threads, creator)
    return (
        f"create: {tasks} tasks in {elapsed:.1f} s = {tasks / elapsed:.0f} tasks/s; createTask p50 "
        f"{timer.p50('createTask'):.0f} ms, p95 {percentile(timer.samples['createTask'], 0.95):.0f} ms"
    )


def scenario_lifecycle(
    client: Callable[[], taskcluster.Queue],
    tasks: int,
    threads: int,
    mark: Callable[[], None] = lambda: None,
    *,
    indexed: bool = False,
) -> str:
    """`indexed`: each task has an `index.` route of its own path (as a push's revision routes: a new entry,
    in namespaces the tasks share), indexed when it completes. Each task is alone in its group, as in
    `lifecycle` (a lone task with an index route takes the resolution message path: docs/index-service.md)."""
    timer = Timer()
    run = uuid.uuid4().hex[:8]
    tq = f"bench/life-{run}"

    def task(n: int) -> dict[str, Any]:
        if not indexed:
            return definition(tq)
        return {
            **definition(tq),
            "routes": [f"index.bench.v2.run-{run}.revision.0123abcd.firefox.t{n}"],
            "extra": {"index": {"rank": n}},
        }

    def creator(i: int) -> None:
        queue = client()
        for n in range(i, tasks, threads):
            timer.call("createTask", queue.createTask, timeutil.slugid(), task(n))

    started = time.perf_counter()
    workers = Workers(client, tq, threads, tasks, per_claim=4, timer=timer)
    run_threads(threads, creator)
    workers.done.wait()
    elapsed = time.perf_counter() - started
    mark()  # the calls and CPU of the lifecycles, not of the workers' idle long-polls until they stop
    workers.join()
    return (
        f"lifecycle{' (each task indexed at a route)' if indexed else ''}: {tasks} tasks created, claimed "
        f"and completed in {elapsed:.1f} s = "
        f"{tasks / elapsed:.0f} tasks/s; p50 createTask {timer.p50('createTask'):.0f} ms, claimWork "
        f"{timer.p50('claimWork'):.0f} ms, reportCompleted {timer.p50('reportCompleted'):.0f} ms; "
        f"{claimed_line(workers.claims, workers.per_claim)}"
    )


def claimed_line(claims: list[int], per_claim: int) -> str:
    """How full the workers' claimWork answers were: a claimWork that waited for tasks to be created (its
    long-poll) returns fewer, so its latency is the creators' pace as much as the queue's."""
    empty = sum(1 for count in claims if count == 0)
    return (
        f"claimWork returned {sum(claims) / max(len(claims), 1):.1f} tasks on average of {per_claim}, "
        f"{empty} of {len(claims)} none"
    )


def scenario_fanout(
    client: Callable[[], taskcluster.Queue], dependents: int, threads: int, cpu: Callable[[], dict[str, float]] = dict
) -> str:
    """`dependents` tasks that depend on one root: how long after the root's reportCompleted all are pending.

    Measured by the server's timestamps, as Taskcluster records them: each dependent's run 0 `scheduled` minus
    the root's `resolved` (p50 and last). Watched lightly, so that watching does not slow what it measures:
    `pendingTasks` (eight storage calls, seven of them queue counts that Azurite answers by scanning every message
    it holds) every 250 ms until it counts them all, then `statuses` until every dependent is pending; when that
    confirmation came is printed too (an earlier version read every waiting dependent's status every 50 ms: a
    thousand point reads a round, competing with the resolution for Azurite's single thread)."""
    queue = client()
    tq = f"bench/fan-{uuid.uuid4().hex[:8]}"
    root = timeutil.slugid()
    queue.createTask(root, definition(tq))
    ids = [timeutil.slugid() for _ in range(dependents)]

    def creator(i: int) -> None:
        q = client()
        for task_id in ids[i::threads]:
            q.createTask(task_id, {**definition(tq), "dependencies": [root]})

    run_threads(threads, creator)
    queue.claimTask(root, "0", {"workerGroup": "bench", "workerId": "root"})
    started, cpu_before = time.perf_counter(), cpu()
    resolved = timeutil.parse(queue.reportCompleted(root, "0")["status"]["runs"][0]["resolved"])
    counted = 0
    while counted < dependents + 1 and time.perf_counter() - started < 120:  # +1: the root's own hint, if unclaimed
        counted = queue.pendingTasks(tq)["pendingTasks"]
        if counted >= dependents:
            break
        time.sleep(0.25)
    waiting, scheduled = set(ids), []
    while waiting and time.perf_counter() - started < 120:
        for chunk in [sorted(waiting)[i : i + 500] for i in range(0, len(waiting), 500)]:
            for status in queue.statuses({"taskIds": chunk})["statuses"]:
                runs = status["status"]["runs"]
                if runs and runs[0]["state"] == "pending":
                    waiting.discard(status["taskId"])
                    scheduled.append((timeutil.parse(runs[0]["scheduled"]) - resolved).total_seconds())
        if waiting:
            time.sleep(0.05)
    seen = time.perf_counter() - started
    cpu_used = {name: seconds - cpu_before[name] for name, seconds in cpu().items()}
    if waiting:
        return f"fanout {dependents}: {len(waiting)} dependents still not pending after 120 s"
    return (
        f"fanout {dependents}: dependents pending after the root resolved (the server's timestamps): p50 "
        f"{percentile(scheduled, 0.5):.2f} s, last {max(scheduled):.2f} s; all confirmed by this client "
        f"{seen:.2f} s after its reportCompleted call"
        + (
            "; CPU s from then to the confirmation: "
            + ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu_used.items())
            if cpu_used
            else ""
        )
    )


def scenario_expiry(client: Callable[[], taskcluster.Queue], tasks: int, threads: int) -> str:
    """Claims left to expire: `tasks` tasks claimed and never reclaimed; for each, how long after its claim's
    `takenUntil` the retry run was pending (the server's own timestamps: run 1's `scheduled` minus run 0's
    `takenUntil`). Needs a short claim timeout (`--claim-timeout`, for the embedded host)."""
    queue = client()
    tq = f"bench/expiry-{uuid.uuid4().hex[:8]}"
    ids = [timeutil.slugid() for _ in range(tasks)]

    def creator(i: int) -> None:
        q = client()
        for task_id in ids[i::threads]:
            q.createTask(task_id, definition(tq))

    run_threads(threads, creator)
    claimed = 0
    while claimed < tasks:
        claimed += len(
            queue.claimWork(tq, {"workerGroup": "bench", "workerId": "expiry", "tasks": min(32, tasks - claimed)})[
                "tasks"
            ]
        )
    started = time.perf_counter()
    delays: dict[str, float] = {}
    while len(delays) < tasks and time.perf_counter() - started < 1800:
        waiting = [t for t in ids if t not in delays]
        for chunk in [waiting[i : i + 500] for i in range(0, len(waiting), 500)]:
            for status in queue.statuses({"taskIds": chunk})["statuses"]:
                runs = status["status"]["runs"]
                if len(runs) > 1:
                    delays[status["taskId"]] = (
                        timeutil.parse(runs[1]["scheduled"]) - timeutil.parse(runs[0]["takenUntil"])
                    ).total_seconds()
        time.sleep(0.2)
    if len(delays) < tasks:
        return f"expiry {tasks}: {tasks - len(delays)} claims not retried after 30 min"
    values = list(delays.values())
    return (
        f"expiry {tasks}: retry run pending after takenUntil: p50 {percentile(values, 0.5):.2f} s, "
        f"p95 {percentile(values, 0.95):.2f} s, max {max(values):.2f} s"
    )


def scenario_graph(
    client: Callable[[], taskcluster.Queue],
    size: int,
    threads: int,
    mark: Callable[[], None] = lambda: None,
    created_mark: Callable[[], None] = lambda: None,
) -> str:
    """A graph of `size` tasks in layers: each layer fans out from the one before, and each task waits for two
    tasks of the layer before it (fan-in). Workers run everything; then every task must have exactly one run,
    completed (a read of every task, which `mark` leaves out of the calls and CPU counted)."""
    import random

    rng = random.Random(7)
    tq = f"bench/graph-{uuid.uuid4().hex[:8]}"
    group = timeutil.slugid()
    widths, total = [1], 1
    while total < size:
        widths.append(min(size - total, widths[-1] * 4))
        total += widths[-1]
    layers: list[list[str]] = [[timeutil.slugid() for _ in range(w)] for w in widths]
    created = time.perf_counter()
    made = [0]

    def progress(what: str, count: Callable[[], int], stop: threading.Event) -> None:
        """A line on stderr every 15 s: this scenario can run for minutes."""
        while not stop.wait(15):
            print(
                f"  graph {size}: {what} {count()}/{size} after {time.perf_counter() - created:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    creating = threading.Event()
    threading.Thread(target=progress, args=("created", lambda: made[0], creating), daemon=True).start()
    for depth, layer in enumerate(layers):

        def creator(i: int, depth: int = depth, layer: list[str] = layer) -> None:
            q = client()
            for task_id in layer[i::threads]:
                deps = sorted(set(rng.sample(layers[depth - 1], min(2, len(layers[depth - 1]))))) if depth else []
                q.createTask(task_id, {**definition(tq), "taskGroupId": group, "dependencies": deps})
                made[0] += 1

        run_threads(threads, creator)
    creating.set()
    create_seconds = time.perf_counter() - created
    created_mark()
    started = time.perf_counter()
    workers = Workers(client, tq, threads, size, per_claim=8)
    threading.Thread(target=progress, args=("completed", lambda: workers.completed, workers.done), daemon=True).start()
    workers.done.wait(timeout=1800)
    run_seconds = time.perf_counter() - started  # before joining: idle workers wait out a claimWork long-poll
    mark()  # the graph's calls and CPU, not the workers' idle long-polls nor the check below
    workers.join()
    ids = [t for layer in layers for t in layer]
    bad = []
    q = client()
    for i in range(0, len(ids), 500):
        for status in q.statuses({"taskIds": ids[i : i + 500]})["statuses"]:
            runs = status["status"]["runs"]
            if len(runs) != 1 or runs[0]["state"] != "completed":
                bad.append(status["taskId"])
    return (
        f"graph {size}: {len(layers)} layers, created in {create_seconds:.0f} s, run by {threads} workers in "
        f"{run_seconds:.0f} s ({size / run_seconds:.0f} tasks/s); completed exactly once: "
        f"{size - len(bad)}, other: {len(bad)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root-url", default=os.environ.get("TASKCLUSTER_ROOT_URL"))
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--scenarios",
        default="create,lifecycle,fanout300,fanout1000",
        help="comma-separated: create, lifecycle, indexed, fanout<N>, graph<N>, push<N>, expiry<N>, roundtrips<N>",
    )
    parser.add_argument(
        "--storage-delay",
        type=float,
        default=20.0,
        help="milliseconds the roundtrips scenario adds to each storage call",
    )
    parser.add_argument(
        "--claim-timeout",
        type=float,
        default=None,
        help="QUEUE_CLAIM_TIMEOUT of the embedded host (the expiry scenario waits this long)",
    )
    parser.add_argument(
        "--events",
        action="store_true",
        help="the embedded host publishes every event to the RabbitMQ on 127.0.0.1:5672 (namespace "
        "`bench-lifecycle`: its exchanges are reused by the next run), as a deployment with a bus does",
    )
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="the embedded Azurite keeps its data in memory (`make run --in-memory`); by default on "
        "disk in a temporary folder, as `make run` does. In memory, Azurite's queue service stops "
        "for seconds about once a minute under load (its extent garbage collection)",
    )
    args = parser.parse_args()

    processes: list[Any] = []
    proxy: DelayProxy | None = None
    watched: dict[str, list[int]] = {}  # CPU use of the processes this started, per scenario
    # SIGTERM (timeout, kill) unwinds like Ctrl-C, so the `finally` below stops what this started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if args.root_url:
            creds = {
                "clientId": os.environ["TASKCLUSTER_CLIENT_ID"],
                "accessToken": os.environ["TASKCLUSTER_ACCESS_TOKEN"],
            }
            root_url = args.root_url
            storage_calls: Callable[[], dict[str, int]] = dict
        else:
            if args.claim_timeout is not None:
                os.environ["QUEUE_CLAIM_TIMEOUT"] = str(args.claim_timeout)
            if args.events:
                os.environ.update({"QUEUE_EVENT_BUS": "amqp", "QUEUE_PULSE_NAMESPACE": "bench-lifecycle"})
            if "roundtrips" in args.scenarios:
                if args.scenarios.count(",") > 0:
                    parser.error(
                        "run the roundtrips scenario alone: its proxy carries every storage call of the "
                        "host, which costs the benchmark's process CPU and adds latency to the others"
                    )
                proxy = DelayProxy()
            root_url, creds, storage_calls = start_embedded(processes, watched, in_memory=args.in_memory, proxy=proxy)

        def client(credentials: dict[str, str] | None = None) -> taskcluster.Queue:
            return taskcluster.Queue({"rootUrl": root_url, "credentials": credentials or creds})

        print(f"benchmark against {root_url}: {args.tasks} tasks, {args.threads} threads", flush=True)
        for scenario in args.scenarios.split(","):
            before, calls_before = cpu_seconds(watched), storage_calls()
            tasks = args.tasks
            marked: list[tuple[dict[str, int], dict[str, float]]] = []

            def mark(
                marked: list[tuple[dict[str, int], dict[str, float]]] = marked,
                calls_before: dict[str, int] = calls_before,
            ) -> None:
                """The scenario's own work is done (its calls are counted, and CPU read, once triggers settle)."""
                marked.append((settled_calls(storage_calls, calls_before), cpu_seconds(watched)))

            creation: list[tuple[dict[str, int], dict[str, float]]] = []

            def created_mark(
                creation: list[tuple[dict[str, int], dict[str, float]]] = creation,
                calls_before: dict[str, int] = calls_before,
            ) -> None:
                """The scenario's tasks are created (its workers not started): the calls and CPU so far, as they
                are (the creations' follow-up still under way counts in the run's figures)."""
                now = storage_calls()
                creation.append(
                    (
                        {
                            k: n - calls_before.get(k, 0)
                            for k, n in now.items()
                            if not k.startswith(ROUND_TRIPS) and n - calls_before.get(k, 0) > 0
                        },
                        cpu_seconds(watched),
                    )
                )

            if scenario == "create":
                line = scenario_create(client, args.tasks, args.threads)
            elif scenario in ("lifecycle", "indexed"):
                line = scenario_lifecycle(client, args.tasks, args.threads, mark, indexed=scenario == "indexed")
            elif scenario.startswith("graph"):
                tasks = int(scenario[5:] or 10000)
                line = scenario_graph(client, tasks, args.threads, mark, created_mark)
            elif scenario.startswith("push"):
                from bench.push import scenario_push, shape

                tasks = sum(shape(int(scenario[4:] or 2000)).values())
                line = scenario_push(client, int(scenario[4:] or 2000), root_url, creds, mark, created_mark)
            elif scenario.startswith("fanout"):
                tasks = int(scenario[6:] or 300) + 1
                line = scenario_fanout(client, tasks - 1, args.threads, lambda: cpu_seconds(watched))
            elif scenario.startswith("expiry"):
                tasks = int(scenario[6:] or 100)
                line = scenario_expiry(client, tasks, args.threads)
            elif scenario.startswith("roundtrips"):
                if proxy is None:
                    parser.error("the roundtrips scenario needs the embedded host (no --root-url)")
                tasks = int(scenario[10:] or 20)
                line = scenario_roundtrips(client, tasks, proxy, args.storage_delay / 1000, args.threads)
                tasks = 4 * (tasks * 4 + tasks * args.threads) + 100  # each way twice
            else:
                parser.error(f"unknown scenario {scenario}")
            if not marked:
                mark()
            calls, after = marked[0]
            used = {name: after[name] - before[name] for name in watched}
            if used:
                line += "; CPU s: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in used.items())
                line += "; CPU ms per task: " + ", ".join(
                    f"{name} {seconds * 1000 / tasks:.1f}" for name, seconds in used.items()
                )
                peak = peak_memory(watched.get("host", []))
                if peak:
                    line += f"; host peak memory {peak / 1024:.0f} MiB"
            if creation and used:
                made, at = creation[0]
                line += (
                    "; creation alone: CPU ms per task "
                    + ", ".join(f"{name} {(at[name] - before[name]) * 1000 / tasks:.1f}" for name in watched)
                    + f", storage calls per task {sum(made.values()) / tasks:.1f}"
                    + " ("
                    + ", ".join(f"{op} {n / tasks:.2f}" for op, n in sorted(made.items()))
                    + ")"
                )
            trips = {k: n for k, n in calls.items() if k.startswith(ROUND_TRIPS)}
            calls = {k: n for k, n in calls.items() if k not in trips}
            if calls:
                line += (
                    f"; storage calls per task {sum(calls.values()) / tasks:.1f} ("
                    + ", ".join(f"{op} {n / tasks:.2f}" for op, n in sorted(calls.items()))
                    + ")"
                )
            if trips:
                line += "; " + round_trips_line(trips)
            print(line, flush=True)
    finally:
        stop_all(processes)
    return 0


ROUND_TRIPS = "roundtrips:"  # the keys of storage_calls() that count API requests by their storage round trips
SHOWN_METHODS = ("queue.createTask", "queue.claimWork", "queue.reportCompleted")


def round_trips_line(trips: dict[str, int]) -> str:
    """The storage round trips one after another that the host counted per request (shared/roundtrips.py), for
    createTask, claimWork and reportCompleted: p50, p95 and the most, and how many requests."""
    by_method: dict[str, list[int]] = {}
    for key, count in trips.items():
        method, n = key[len(ROUND_TRIPS) :].rsplit(":", 1)
        by_method.setdefault(method, []).extend([int(n)] * count)
    parts = [
        f"{method.split('.')[-1]} {percentile(values, 0.5):.0f} / {percentile(values, 0.95):.0f} / "
        f"{max(values)} ({len(values)})"
        for method in SHOWN_METHODS
        if (values := by_method.get(method))
    ]
    return "storage round trips one after another, counted by the host, p50 / p95 / most (requests): " + ", ".join(
        parts
    )


def settled_calls(storage_calls: Callable[[], dict[str, int]], before: dict[str, int]) -> dict[str, int]:
    """The storage calls made since `before`, once the triggers' work that a scenario set off has ended (no new
    call for half a second, at most 15 s): resolutions and event dispatches that follow the last API call."""
    after = storage_calls()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = storage_calls()
        # The triggers' idle polling (receives that find nothing) goes on: settled when nothing else changed.
        if {k: v for k, v in again.items() if k != "queue.receive" and not k.startswith(ROUND_TRIPS)} == {
            k: v for k, v in after.items() if k != "queue.receive" and not k.startswith(ROUND_TRIPS)
        }:
            break
        after = again
    return {op: n - before.get(op, 0) for op, n in after.items() if n - before.get(op, 0) > 0}


def stop_all(stops: list[Callable[[], Any]]) -> None:
    """Run every stop, last started first, even when one fails, and deaf to a second Ctrl-C or SIGTERM meanwhile
    (`timeout` and a terminal both forward one): an interrupted cleanup left Azurite running."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for stop in reversed(stops):
            try:
                stop()
            except Exception as exc:  # the others must still be stopped
                print(f"cleanup: {exc}", file=sys.stderr)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def cpu_seconds(watched: dict[str, list[int]]) -> dict[str, float]:
    """User + system CPU seconds used so far by each named group of processes (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for name, pids in watched.items():
        total = 0.0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks
        used[name] = total
    return used


def peak_memory(pids: list[int]) -> int:
    """The largest resident set so far (VmHWM, KiB) of the given processes, summed (Linux /proc); 0 if unknown."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return total


def start_embedded(
    processes: list[Any],
    watched: dict[str, list[int]] | None = None,
    *,
    in_memory: bool = False,
    proxy: DelayProxy | None = None,
    connection: list[str] | None = None,
) -> tuple[str, dict[str, str], Callable[[], dict[str, int]]]:
    """Azurite (data in memory, or on disk in a temporary folder deleted afterwards) and a local host (its
    storage through `proxy` when given); the rootUrl, the root credentials, and a function that reads the host's
    storage calls so far (by operation). `connection`: the host's storage connection string is appended to it (for
    a bench that reads the queues itself)."""
    import shutil
    import subprocess
    import tempfile

    data_dir = Path(tempfile.mkdtemp(prefix="bench-azurite-"))
    processes.append(lambda: shutil.rmtree(data_dir, ignore_errors=True))
    store = azurite.start(data_dir, in_memory=in_memory)
    processes.append(store.stop)
    port = azurite.free_port()
    token = secrets.token_urlsafe(33)
    storage = store.connection_string
    if proxy is not None:
        storage = proxy.start(storage)
        processes.append(proxy.stop)
    if connection is not None:
        connection.append(storage)
    env = {
        **os.environ,
        "QUEUE_STORAGE": storage,
        "QUEUE_PORT": str(port),
        "QUEUE_ROOT_ACCESS_TOKEN": token,
        "QUEUE_TOKEN_SECRET": secrets.token_urlsafe(33),
        "QUEUE_LOG_LEVEL": "WARNING",
    }
    host = subprocess.Popen(
        [sys.executable, "-m", "local_host", "serve"],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def stop_host() -> None:
        host.terminate()
        try:
            host.wait(15)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait(5)

    processes.append(stop_host)
    assert host.stdout is not None
    for line in host.stdout:
        if "local host ready" in line:
            break
    counts: threadqueue.Queue[dict[str, Any]] = threadqueue.Queue()

    def read_host() -> None:
        for line in host.stdout:  # type: ignore[union-attr]
            if line.startswith("storage-calls "):
                counts.put(json.loads(line.split(" ", 1)[1]))

    threading.Thread(target=read_host, daemon=True).start()

    def storage_calls() -> dict[str, int]:
        """The host's storage calls so far by operation, and (as `roundtrips:<method>:<n>`) how many requests of each
        API method waited through n storage round trips one after another."""
        host.send_signal(signal.SIGUSR1)
        dump = counts.get(timeout=10)
        trips = {
            f"{ROUND_TRIPS}{method}:{n}": count
            for method, tally in dump["roundTrips"].items()
            for n, count in tally.items()
        }
        return {**dump["calls"], **trips}

    print(f"embedded Azurite (pids {store.pids}) and local host (pid {host.pid}) on port {port}", flush=True)
    if watched is not None:
        watched.update({f"azurite-{name}": [process.pid] for name, process in store.processes.items()})
        watched.update({"host": [host.pid], "bench": [os.getpid()]})
    return f"http://127.0.0.1:{port}", {"clientId": "root", "accessToken": token}, storage_calls


if __name__ == "__main__":
    sys.exit(main())
