"""Benchmark of artifacts: how many small artifacts a second go through createArtifact → PUT → finishArtifact,
and how fast one large file goes up in blocks and comes back down through the redirect.

    .venv/bin/python -m bench.artifacts                         # 400 small artifacts, one 256 MiB file
    .venv/bin/python -m bench.artifacts --small 0 --size 3G     # several GB (Azurite keeps blobs on disk)

Starts its own Azurite (blobs on disk, under a temporary folder it deletes) and local host. Small artifacts come
from 8 threads, each working as a worker of its own claimed task. The large file is streamed from disk to its
putUrl in 8 MiB blocks, 4 at a time (worker/artifact_upload.py), then read back through getArtifact's redirect
and compared by SHA-256. Prints rates and latencies; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import taskcluster

from bench.lifecycle import Timer, definition, percentile, run_threads, start_embedded, stop_all
from shared import timeutil
from worker.artifact_upload import upload

THREADS = 8
MiB = 1024 * 1024


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": MiB, "G": 1024 * MiB}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def claimed(queue: taskcluster.Queue, index: int) -> tuple[str, taskcluster.Queue]:
    """A task claimed by worker `index`, and a client with the claim's credentials."""
    body = definition(f"bench-prov/artifacts-{index}-{os.getpid()}")
    task_id = taskcluster.slugId()
    queue.createTask(task_id, body)
    claims: list[dict[str, Any]] = []
    while not claims:
        claims = queue.claimWork(body["taskQueueId"], {"tasks": 1, "workerGroup": "bench",
                                                       "workerId": f"w{index}"})["tasks"]
    worker = taskcluster.Queue({"rootUrl": queue.options["rootUrl"], "credentials": claims[0]["credentials"],
                                "maxRetries": 0})
    return task_id, worker


def small_artifacts(queue: taskcluster.Queue, count: int) -> None:
    timer = Timer()
    expires = timeutil.iso(timeutil.now() + dt.timedelta(days=1))
    data = b"x" * 4096
    per_thread = count // THREADS

    def work(index: int) -> None:
        task_id, worker = claimed(queue, index)
        with httpx.Client() as http:
            for i in range(per_thread):
                name = f"public/small/{i}.txt"
                created = timer.call("createArtifact", worker.createArtifact, task_id, "0", name, {
                    "storageType": "azure", "expires": expires, "contentType": "text/plain",
                    "contentLength": len(data)})
                put = functools.partial(http.put, content=data, headers=created["headers"])
                timer.call("PUT to Blob", put, created["putUrl"]).raise_for_status()
                timer.call("finishArtifact", worker.finishArtifact, task_id, "0", name,
                           {"uploadId": created["uploadId"]})

    elapsed = run_threads(THREADS, work)
    total = per_thread * THREADS
    print(f"\nsmall artifacts: {total} of 4 KiB from {THREADS} threads in {elapsed:.1f} s = "
          f"{total / elapsed:.0f} artifacts/s (create + PUT + finish)")
    for name, samples in timer.samples.items():
        print(f"  {name:<16} p50 {percentile(samples, 0.5):6.1f} ms   p95 {percentile(samples, 0.95):6.1f} ms")


def large_artifact(queue: taskcluster.Queue, root_url: str, size: int, folder: Path) -> None:
    path = folder / "large.bin"
    chunk = os.urandom(MiB)
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        for offset in range(0, size, MiB):
            piece = chunk[:min(MiB, size - offset)]
            out.write(piece)
            digest.update(piece)
    task_id, worker = claimed(queue, 99)
    expires = timeutil.iso(timeutil.now() + dt.timedelta(days=1))
    created = worker.createArtifact(task_id, "0", "public/large.bin", {
        "storageType": "azure", "expires": expires, "contentType": "application/octet-stream",
        "contentLength": size})
    started = time.perf_counter()
    upload(created, path)
    up = time.perf_counter() - started
    worker.finishArtifact(task_id, "0", "public/large.bin", {"uploadId": created["uploadId"]})
    url = taskcluster.Queue({"rootUrl": root_url}).buildUrl("getArtifact", task_id, "0", "public/large.bin")
    back = hashlib.sha256()
    started = time.perf_counter()
    received = 0
    with httpx.stream("GET", url, follow_redirects=True, timeout=600) as response:
        response.raise_for_status()
        for piece in response.iter_bytes(MiB):
            back.update(piece)
            received += len(piece)
    down = time.perf_counter() - started
    same = back.hexdigest() == digest.hexdigest() and received == size
    print(f"\nlarge artifact: {size / MiB:.0f} MiB up in {up:.1f} s ({size / MiB / up:.0f} MiB/s, blocks of 8 MiB, "
          f"4 at a time), down through the redirect in {down:.1f} s ({size / MiB / down:.0f} MiB/s); "
          f"SHA-256 {'matches' if same else 'DIFFERS'}")
    if not same:
        raise SystemExit("the downloaded data differs from the uploaded data")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=400, help="small artifacts to create (0: none)")
    parser.add_argument("--size", type=parse_size, default=256 * MiB, help="size of the large file (0: none), "
                        "e.g. 256M, 3G")
    args = parser.parse_args()
    processes: list[Any] = []
    folder = Path(tempfile.mkdtemp(prefix="bench-artifacts-"))
    try:
        root_url, credentials, _ = start_embedded(processes, in_memory=False)
        queue = taskcluster.Queue({"rootUrl": root_url, "credentials": credentials, "maxRetries": 0})
        if args.small:
            small_artifacts(queue, args.small)
        if args.size:
            large_artifact(queue, root_url, args.size, folder)
    finally:
        stop_all(processes)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
