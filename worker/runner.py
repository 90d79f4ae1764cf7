"""The reference worker: claims tasks of one task queue and runs their commands, up to `capacity` at once (each a
TaskRun: worker/task_run.py).

For each claimed run: parse the payload (exception/malformed-payload when it cannot run), run the command in a
folder of its own with its output captured, reclaim ahead of `takenUntil`, stop it when the run is no longer ours
(its status, read every `cancel_check` seconds, says it was resolved: cancelled, or past its deadline; or reclaim
answers 409): nothing is reported then; enforce
`maxRunTime`, append its output to the live log (`public/logs/live.log`, worker/live_log.py) as it runs, upload
the artifacts straight to Blob Storage, and report:
completed on exit 0, failed otherwise, exception/internal-error when the worker itself failed, and
exception/worker-shutdown for runs still going when the worker is told to stop (SIGTERM / SIGINT).

Work is found by polling Azure Queue Storage with the signed URLs of pollTaskUrls (default), or by claimWork.
"""

from __future__ import annotations

import datetime as dt
import signal
import socket
import sys
import threading
import time
from typing import Any

import httpx
import taskcluster
from taskcluster.client import createApiClient
from taskcluster.exceptions import TaskclusterRestFailure

from shared import timeutil
from worker.task_run import Options, Output, TaskRun

URL_REFRESH = dt.timedelta(minutes=5)  # ask for fresh polling URLs this long before they expire


class Worker:
    def __init__(self, options: Options, out: Output | None = None) -> None:
        self.options = options
        self.out = out or Output()
        client_options = {"rootUrl": options.root_url, "credentials": options.credentials, "maxRetries": 5}
        self.queue = taskcluster.Queue(client_options)
        self.client_options = client_options
        self._served: Any = None
        self.http = httpx.Client(timeout=30)
        self.stopping = threading.Event()
        self.done_claiming = threading.Event()  # set once the claim loop has ended (no claim in flight)
        self.running: set[TaskRun] = set()
        self.changed = threading.Condition()
        self.started_runs = 0
        self.claim_seconds = 1200.0
        self._urls: dict[str, Any] | None = None

    def stop(self, *_: Any) -> None:
        if not self.stopping.is_set():
            self.out("stopping: running tasks are stopped and reported worker-shutdown")
        self.stopping.set()
        with self.changed:
            for run in self.running:
                run.shutdown.set()
            self.changed.notify_all()

    def finished(self, run: TaskRun) -> None:
        with self.changed:
            self.running.discard(run)
            self.changed.notify_all()

    def _free(self) -> int:
        with self.changed:
            return self.options.capacity - len(self.running)

    def run(self) -> int:
        """Claim and run tasks until stopped, `max_tasks` runs have ended, or (`idle_exit`) nothing ran and no work
        was found for that long; 0 on a clean stop. As a job's execution (one per unit of pending work, started by a
        scale rule), a worker with `idle_exit` ends when the work it was started for is done."""
        self.options.work_dir.mkdir(parents=True, exist_ok=True)
        o = self.options
        self.out(
            f"worker {o.worker_group}/{o.worker_id} on {o.task_queue_id}: up to {o.capacity} at once, "
            f"finding work by {'signed-URL polling' if o.mode == 'poll' else 'claimWork'}"
        )
        idle = 0.5
        idle_since = time.monotonic()
        while not self.stopping.is_set():
            if o.max_tasks is not None and self.started_runs >= o.max_tasks:
                break
            if self._free() < o.capacity:
                idle_since = time.monotonic()  # a task runs: not idle
            free = self._free()
            if o.max_tasks is not None:
                free = min(free, o.max_tasks - self.started_runs)
            if free <= 0:
                with self.changed:
                    self.changed.wait(1.0)
                continue
            try:
                claims = self._claim(free)
            except (TaskclusterRestFailure, httpx.HTTPError, taskcluster.exceptions.TaskclusterFailure) as exc:
                self.out(f"finding work failed: {exc}; retrying in {idle:.1f} s")
                claims = []
            if not claims:
                if self._idle_for(idle_since):
                    break
                self.stopping.wait(self._idle_wait(idle, idle_since))
                idle = min(idle * 2, o.max_poll_interval)
                continue
            idle = 0.5
            for claim in claims:
                self._start(claim)
        self.done_claiming.set()
        with self.changed:
            while self.running:
                self.changed.wait(1.0)
        self.http.close()
        self.out("stopped")
        return 0

    def _idle_for(self, idle_since: float) -> bool:
        """Whether the worker has been idle (no task running, no work found) for `idle_exit`: then it says so."""
        o = self.options
        if o.idle_exit is None or self._free() < o.capacity or time.monotonic() - idle_since < o.idle_exit:
            return False
        self.out(f"idle for {o.idle_exit:g} s: exiting ({self.started_runs} runs taken)")
        return True

    def _idle_wait(self, idle: float, idle_since: float) -> float:
        """How long to wait before looking for work again: the poll's back-off, cut short where an idle exit falls
        due sooner, so that an execution ends on time."""
        exit_in = self.options.idle_exit
        if exit_in is None:
            return idle
        return max(0.0, min(idle, idle_since + exit_in - time.monotonic()))

    def _start(self, claim: dict[str, Any]) -> None:
        run = TaskRun(self, claim)
        self.claim_seconds = max(1.0, (run.taken_until - timeutil.now()).total_seconds())
        self.started_runs += 1
        self.out(f"claimed ({claim['task']['metadata'].get('name', '')!s})", run.label)
        with self.changed:
            self.running.add(run)
            if self.stopping.is_set():
                run.shutdown.set()  # claimed while stopping: report it worker-shutdown at once
        run.start()

    def _claim(self, count: int) -> list[dict[str, Any]]:
        o = self.options
        body: dict[str, Any] = {"workerGroup": o.worker_group, "workerId": o.worker_id, "tasks": count}
        if o.mode == "claim-work":
            return list(self.queue.claimWork(o.task_queue_id, body)["tasks"])
        polled = self._poll(count)
        if polled is None:
            return []
        return list(self.queue.claimWork(o.task_queue_id, {**body, "xmlMessage": polled})["tasks"])

    @property
    def served_queue(self) -> Any:
        """pollTaskUrls is this queue's extension, not a method of the official client's Queue: the client class
        the official client's createApiClient makes from the API reference the queue serves, fetched once."""
        if self._served is None:
            response = self.http.get(f"{self.options.root_url.rstrip('/')}/references/queue/v1/api.json")
            response.raise_for_status()
            self._served = createApiClient("ServedQueue", {"reference": response.json()})(self.client_options)
        return self._served

    def _poll(self, count: int) -> str | None:
        """Poll the signed URLs, highest priority first; the first response that holds messages."""
        if self._urls is None or timeutil.parse(self._urls["expires"]) - timeutil.now() < URL_REFRESH:
            self._urls = self.served_queue.pollTaskUrls(self.options.task_queue_id)
        assert self._urls is not None
        for entry in self._urls["queues"]:
            response = self.http.get(f"{entry['signedPollUrl']}&numofmessages={min(count, 32)}")
            if response.status_code == 403:
                self._urls = None  # expired or revoked: ask again next time
                return None
            response.raise_for_status()
            if "<MessageId>" in response.text:
                return response.text
        return None


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install_signal_handlers(worker: Worker) -> None:
    """SIGTERM / SIGINT stop the worker from a thread of their own, never from the handler: a handler runs in the
    main thread between two of its steps, and taking a lock the main thread holds (its output's, an Event's)
    would hang the worker for good. Python writes each signal's number to the wakeup socket; the handler does
    nothing."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: None)

    def watch(keep: socket.socket = writer) -> None:  # the writer lives as long as the watcher
        while received := reader.recv(64):
            if any(number in STOP_SIGNALS for number in received):
                worker.stop()

    threading.Thread(target=watch, name="stop-signals", daemon=True).start()


def main_loop(options: Options) -> int:
    worker = Worker(options)
    install_signal_handlers(worker)
    try:
        return worker.run()
    finally:
        sys.stdout.flush()
