"""One claimed run of the reference worker, in a thread of its own: the payload parsed, the command run in a folder
of its own with its output in the live log, reclaimed ahead of `takenUntil`, stopped when the run is no longer ours
(resolved elsewhere: cancelled, or past its deadline; or reclaim answers 409), its artifacts uploaded straight to
Blob Storage, and reported (worker/runner.py's docstring tells which resolution when)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import taskcluster
from taskcluster.exceptions import TaskclusterRestFailure

from shared import timeutil
from worker import live_log
from worker.artifact_upload import upload
from worker.live_log import LiveLog
from worker.payload import MalformedPayload, Payload, parse

LOG_ARTIFACT = live_log.NAME
LOG_CONTENT_TYPE = live_log.CONTENT_TYPE
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


class WorkerOfRuns(Protocol):
    """What a run asks of the worker that claimed it (runner.Worker; a Protocol so that the two modules do not
    import each other)."""

    options: Options
    out: Output
    done_claiming: threading.Event
    claim_seconds: float

    def finished(self, run: TaskRun) -> None: ...


class TaskRun(threading.Thread):
    def __init__(self, worker: WorkerOfRuns, claim: dict[str, Any]) -> None:
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
