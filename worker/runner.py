"""The reference worker: claims tasks of one task queue and runs their commands, up to `capacity` at once.

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

import contextlib
import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import taskcluster
from taskcluster.client import createApiClient
from taskcluster.exceptions import TaskclusterRestFailure

from shared import timeutil
from worker import live_log
from worker.artifact_upload import upload
from worker.live_log import LiveLog
from worker.payload import MalformedPayload, Payload, parse

LOG_ARTIFACT = live_log.NAME
LOG_CONTENT_TYPE = live_log.CONTENT_TYPE
URL_REFRESH = dt.timedelta(minutes=5)  # ask for fresh polling URLs this long before they expire
STEP = 0.2  # seconds between checks of a running command
CLAIM_IN_FLIGHT = 30.0  # at most this long a shutdown report waits for a claim in flight (claimWork polls 20 s)


@dataclass
class Options:
    root_url: str
    credentials: dict[str, str]
    task_queue_id: str
    worker_group: str
    worker_id: str
    capacity: int = 1
    mode: str = "poll"  # or "claim-work"
    work_dir: Path = Path("worker-tasks")
    max_poll_interval: float = 5.0
    max_tasks: int | None = None  # stop after this many runs (tests, one-shot workers)
    cancel_check: float = 5.0  # seconds between looks at a running task's status (0: learn it at reclaim only)
    idle_exit: float | None = None  # stop once nothing ran and no work was found for this long (a job's execution)


class Output:
    """Progress lines a person can follow: time, task/run, what happened."""

    def __init__(self, write: Callable[[str], None] | None = None) -> None:
        self._write = write or (lambda line: print(line, flush=True))
        self._lock = threading.Lock()

    def __call__(self, message: str, task: str = "") -> None:
        stamp = time.strftime("%H:%M:%S")
        with self._lock:
            self._write(f"{stamp} {task + '  ' if task else ''}{message}")


class TaskRun(threading.Thread):
    def __init__(self, worker: Worker, claim: dict[str, Any]) -> None:
        self.task_id, self.run_id = claim["status"]["taskId"], int(claim["runId"])
        super().__init__(name=f"task-{self.task_id}-{self.run_id}", daemon=True)
        self.worker, self.claim = worker, claim
        self.label = f"{self.task_id}/{self.run_id}"
        self.queue = self._client(claim["credentials"])
        self.taken_until = timeutil.parse(claim["takenUntil"])
        self.folder = worker.options.work_dir / f"{self.task_id}-{self.run_id}"
        self.log_path = worker.options.work_dir / f"{self.task_id}-{self.run_id}.log"
        self.shutdown = threading.Event()
        self.outcome = ""
        self.live: LiveLog | None = None
        self.live_started = False
        self.next_status_check = time.monotonic() + worker.options.cancel_check

    def _client(self, credentials: dict[str, str]) -> taskcluster.Queue:
        return taskcluster.Queue({"rootUrl": self.worker.options.root_url, "credentials": credentials, "maxRetries": 5})

    def note(self, log: Any, message: str) -> None:
        log.write(f"[worker {timeutil.iso(timeutil.now())}] {message}\n".encode())
        log.flush()
        self.worker.out(message, self.label)

    def run(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as log:
                self.live = LiveLog(
                    lambda: self.queue,
                    self.task_id,
                    self.run_id,
                    self.log_path,
                    self.claim["task"]["expires"],
                    lambda line: self.worker.out(line, self.label),
                )
                self.live_started = self.live.start()
                self.outcome = self._run(log)
        except Exception as exc:  # the worker's own failure: the task is not to blame
            self.worker.out(f"worker error: {exc!r}; reporting exception/internal-error", self.label)
            self.outcome = self._report("exception", "internal-error")
        finally:
            if self.live is not None and self.live_started:
                self.live.close()  # a run abandoned (cancelled, claim lost) still gets its last lines
            shutil.rmtree(self.folder, ignore_errors=True)
            self.log_path.unlink(missing_ok=True)
            self.worker.finished(self)

    def _run(self, log: Any) -> str:
        task = self.claim["task"]
        try:
            payload = parse(task.get("payload"))
        except MalformedPayload as exc:
            self.note(log, f"malformed payload: {exc}")
            self._upload_log(log, task)
            return self._report("exception", "malformed-payload")
        self.note(log, f"running {payload.command!r} (maxRunTime {payload.max_run_time} s)")
        result = self._execute(payload, log)
        if result == "lost":
            return "abandoned"  # cancelled or expired: the run is not ours to report any more
        self._upload_artifacts(payload, task, log)
        self._upload_log(log, task)
        if result == "shutdown":
            # Not before this worker's last claim has returned: a claim still in flight would take the very
            # retry this report makes pending, and run and report it worker-shutdown in turn.
            self.worker.done_claiming.wait(CLAIM_IN_FLIGHT)
            return self._report("exception", "worker-shutdown")
        return self._report("completed" if result == "exit 0" else "failed", "")

    def _execute(self, payload: Payload, log: Any) -> str:
        env = {**os.environ, **payload.env, "TASK_ID": self.task_id, "RUN_ID": str(self.run_id)}
        for name in ("TASKCLUSTER_CLIENT_ID", "TASKCLUSTER_ACCESS_TOKEN", "TASKCLUSTER_CERTIFICATE"):
            env.pop(name, None)  # the worker's own credentials are not the task's
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                payload.command,
                cwd=self.folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            self.note(log, f"could not start the command: {exc}")
            return "exit 127"
        reason = ""
        while process.poll() is None:
            if self.shutdown.is_set():
                reason = "shutdown"
            elif time.monotonic() - started > payload.max_run_time:
                reason = "max-run-time"
            elif self._no_longer_ours(log):
                reason = "lost"
            if reason:
                self._kill(process)
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STEP)
        elapsed = time.monotonic() - started
        if reason == "max-run-time":
            self.note(log, f"killed: maxRunTime of {payload.max_run_time} s exceeded")
            return "exit max-run-time"
        if reason:
            self.note(
                log,
                {
                    "shutdown": "killed: the worker is shutting down",
                    "lost": "killed: the run was cancelled or its claim expired",
                }[reason],
            )
            return reason
        self.note(log, f"exit code {process.returncode} after {elapsed:.1f} s")
        return f"exit {process.returncode}"

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def _due_reclaim(self) -> bool:
        # Reclaim when a third of the claim is left (at least 1 s before it lapses).
        remaining = (self.taken_until - timeutil.now()).total_seconds()
        return remaining < max(1.0, self.worker.claim_seconds / 3)

    def _no_longer_ours(self, log: Any) -> bool:
        """The run was resolved elsewhere (seen in its status), or its claim is lost (reclaim refused)."""
        if self._due_reclaim() and not self._reclaim(log):
            return True
        return self._due_status_check() and self._resolved_elsewhere(log)

    def _due_status_check(self) -> bool:
        if not self.worker.options.cancel_check or time.monotonic() < self.next_status_check:
            return False
        self.next_status_check = time.monotonic() + self.worker.options.cancel_check
        return True

    def _resolved_elsewhere(self, log: Any) -> bool:
        """Whether the run was resolved by someone else (cancelTask, cancelTaskGroup, a deadline): one status
        read, so that a cancelled command stops within seconds rather than at the next reclaim."""
        try:
            runs = self.queue.status(self.task_id)["status"]["runs"]
        except TaskclusterRestFailure as exc:
            self.note(log, f"status check failed ({exc.status_code}); the reclaim will tell")
            return False
        return self.run_id < len(runs) and runs[self.run_id]["state"] != "running"

    def _reclaim(self, log: Any) -> bool:
        """Extend the claim; False when the queue says the run is no longer ours (409)."""
        try:
            answer = self.queue.reclaimTask(self.task_id, str(self.run_id))
        except TaskclusterRestFailure as exc:
            if exc.status_code == 409:
                return False
            if timeutil.now() >= self.taken_until:
                return False  # could not reclaim in time: the claim has lapsed
            self.note(log, f"reclaim failed ({exc.status_code}); trying again")
            return True
        self.taken_until = timeutil.parse(answer["takenUntil"])
        self.queue = self._client(answer["credentials"])
        return True

    def _expires(self, task: dict[str, Any], wanted: str | None) -> str:
        return str(min(wanted, task["expires"]) if wanted else task["expires"])

    def _upload_artifacts(self, payload: Payload, task: dict[str, Any], log: Any) -> None:
        for spec in payload.artifacts:
            path = self.folder / spec.path
            expires = self._expires(task, spec.expires)
            try:
                if not path.is_file():
                    self.queue.createArtifact(
                        self.task_id,
                        str(self.run_id),
                        spec.name,
                        {
                            "storageType": "error",
                            "expires": expires,
                            "reason": "file-missing-on-worker",
                            "message": f"{spec.path} does not exist (or is not a file) after the command ran",
                        },
                    )
                    self.note(log, f"artifact {spec.name}: {spec.path} is missing")
                    continue
                size = self._put(spec.name, path, spec.content_type, expires)
                self.note(log, f"artifact {spec.name}: {size} bytes uploaded")
            except TaskclusterRestFailure as exc:
                self.note(log, f"artifact {spec.name} not uploaded: {exc}")

    def _put(self, name: str, path: Path, content_type: str, expires: str) -> int:
        created = self.queue.createArtifact(
            self.task_id,
            str(self.run_id),
            name,
            {
                "storageType": "azure",
                "expires": expires,
                "contentType": content_type,
                "contentLength": path.stat().st_size,
            },
        )
        size = upload(created, path)
        self.queue.finishArtifact(self.task_id, str(self.run_id), name, {"uploadId": created["uploadId"]})
        return size

    def _upload_log(self, log: Any, task: dict[str, Any]) -> None:
        """The rest of the live log appended; or, when it could not be started, the whole log uploaded."""
        log.flush()
        if self.live is not None and self.live_started:
            self.live.close()
            return
        try:
            self._put(LOG_ARTIFACT, self.log_path, LOG_CONTENT_TYPE, task["expires"])
        except TaskclusterRestFailure as exc:
            self.worker.out(f"log not uploaded: {exc}", self.label)

    def _report(self, state: str, reason: str) -> str:
        try:
            if state == "completed":
                self.queue.reportCompleted(self.task_id, str(self.run_id))
            elif state == "failed":
                self.queue.reportFailed(self.task_id, str(self.run_id))
            else:
                self.queue.reportException(self.task_id, str(self.run_id), {"reason": reason})
        except TaskclusterRestFailure as exc:
            self.worker.out(f"could not report {state}: {exc.status_code} {exc}", self.label)
            return f"unreported {state}"
        outcome = f"{state}/{reason}" if reason else state
        self.worker.out(f"resolved {outcome}", self.label)
        return outcome


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
