"""The task's log as it grows: `public/logs/live.log` is an append blob that the worker appends to while the task
runs, so a reader (the web inspector, or anyone fetching the artifact) sees the log of a running task.

The artifact is created at the start in the `azure` form without `contentLength`: present at once, its data
written through the `putUrl` (an Append Blob create, then an Append Block for each piece of new output, about
once a second). While the run is running the queue redirects reads to the growing blob; the queue snapshots it
when the run resolves, and that final log is the artifact from then on (so the last append comes before the
report).

Appending never fails the task: a failed append is retried at the next tick with the same bytes.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azure.core.exceptions import AzureError, HttpResponseError
from azure.storage.blob import BlobClient, ContentSettings
from taskcluster.exceptions import TaskclusterRestFailure

from shared import timeutil

NAME = "public/logs/live.log"
CONTENT_TYPE = "text/plain; charset=utf-8"
INTERVAL = 1.0  # seconds between appends while the task runs
MAX_APPEND = 4 * 1024 * 1024  # Blob Storage's largest Append Block
BLOCK_BUDGET = 45_000  # an append blob holds at most 50,000 blocks: past this, append only at the end
URL_REFRESH = dt.timedelta(minutes=5)  # ask for a fresh putUrl this long before it expires


class LiveLog:
    """Appends what the file at `path` gains to the run's `public/logs/live.log`, from a thread of its own."""

    def __init__(
        self,
        queue: Callable[[], Any],
        task_id: str,
        run_id: int,
        path: Path,
        expires: str,
        report: Callable[[str], None],
        *,
        interval: float = INTERVAL,
    ) -> None:
        self._queue, self.task_id, self.run_id = queue, task_id, run_id
        self.path, self.expires, self.report, self.interval = path, expires, report, interval
        self.offset = 0  # bytes of the file already in the blob
        self.blocks = 0
        self._unconfirmed = 0  # bytes of an append whose answer was lost
        self._blob: BlobClient | None = None
        self._url_expires = timeutil.now()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Create the artifact and its (empty) append blob; False when that failed (the log is then uploaded at
        the end instead)."""
        try:
            self._connect()
            assert self._blob is not None
            self._blob.create_append_blob(content_settings=ContentSettings(content_type=CONTENT_TYPE))
        except (TaskclusterRestFailure, AzureError) as exc:
            self.report(f"live log not started: {exc}")
            return False
        self._thread = threading.Thread(target=self._loop, name=f"live-log-{self.task_id}-{self.run_id}", daemon=True)
        self._thread.start()
        return True

    def close(self) -> bool:
        """Stop the thread and append the rest of the file (once); whether all of it is in the blob."""
        if self._stop.is_set():
            return True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self._append(final=True)

    def _connect(self) -> None:
        created = self._queue().createArtifact(
            self.task_id,
            str(self.run_id),
            NAME,
            {"storageType": "azure", "expires": self.expires, "contentType": CONTENT_TYPE},
        )
        if self._blob is not None:
            self._blob.close()
        self._blob = BlobClient.from_blob_url(created["putUrl"])
        self._url_expires = timeutil.parse(created["expires"])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if self.blocks < BLOCK_BUDGET:
                self._append(final=False)

    def _append(self, *, final: bool) -> bool:
        """Append what the file gained (all of it when `final`, else up to one block)."""
        with self._lock:
            try:
                if self._url_expires - timeutil.now() < URL_REFRESH:
                    self._connect()
                with open(self.path, "rb") as log:
                    while True:
                        log.seek(self.offset)
                        chunk = log.read(MAX_APPEND)
                        if not chunk:
                            return True
                        self._send(chunk)
                        if not final:
                            return True
            except (TaskclusterRestFailure, AzureError, OSError) as exc:
                if final:
                    self.report(f"live log incomplete: {exc}")
                return False

    def _send(self, chunk: bytes) -> None:
        """One Append Block at our offset. An append whose answer was lost may have been applied: its retry is
        then refused (412, the blob is longer than our offset), and the lost one's bytes are counted as in."""
        assert self._blob is not None
        try:
            self._blob.append_block(chunk, appendpos_condition=self.offset)
        except HttpResponseError as exc:
            if exc.status_code != 412:
                self._unconfirmed = len(chunk)
                raise
            self.offset += self._unconfirmed or len(chunk)
            self._unconfirmed = 0
            self.blocks += 1
            return
        except AzureError:
            self._unconfirmed = len(chunk)
            raise
        self.offset += len(chunk)
        self._unconfirmed = 0
        self.blocks += 1
