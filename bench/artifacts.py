"""Benchmark of artifacts: how many small artifacts a second go through createArtifact → PUT → finishArtifact,
how fast one large file goes up in blocks and comes back down through the redirect, and what an `s3` upload
(one PUT through the queue, shared/operations/s3_uploads.py) costs the host per 100 MiB.

    .venv/bin/python -m bench.artifacts                         # 400 small artifacts, one 256 MiB file each way
    .venv/bin/python -m bench.artifacts --small 0 --size 3G     # several GB (Azurite keeps blobs on disk)
    .venv/bin/python -m bench.artifacts --small 0 --size 0 --s3-size 1G --s3-rounds 3

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

from bench.lifecycle import Timer, cpu_seconds, definition, percentile, run_threads, start_embedded, stop_all
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
        claims = queue.claimWork(body["taskQueueId"], {"tasks": 1, "workerGroup": "bench", "workerId": f"w{index}"})[
            "tasks"
        ]
    worker = taskcluster.Queue(
        {"rootUrl": queue.options["rootUrl"], "credentials": claims[0]["credentials"], "maxRetries": 0}
    )
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
                created = timer.call(
                    "createArtifact",
                    worker.createArtifact,
                    task_id,
                    "0",
                    name,
                    {
                        "storageType": "azure",
                        "expires": expires,
                        "contentType": "text/plain",
                        "contentLength": len(data),
                    },
                )
                put = functools.partial(http.put, content=data, headers=created["headers"])
                timer.call("PUT to Blob", put, created["putUrl"]).raise_for_status()
                timer.call(
                    "finishArtifact", worker.finishArtifact, task_id, "0", name, {"uploadId": created["uploadId"]}
                )

    elapsed = run_threads(THREADS, work)
    total = per_thread * THREADS
    print(
        f"\nsmall artifacts: {total} of 4 KiB from {THREADS} threads in {elapsed:.1f} s = "
        f"{total / elapsed:.0f} artifacts/s (create + PUT + finish)"
    )
    for name, samples in timer.samples.items():
        print(f"  {name:<16} p50 {percentile(samples, 0.5):6.1f} ms   p95 {percentile(samples, 0.95):6.1f} ms")


def large_artifact(queue: taskcluster.Queue, root_url: str, size: int, folder: Path) -> None:
    path = folder / "large.bin"
    chunk = os.urandom(MiB)
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        for offset in range(0, size, MiB):
            piece = chunk[: min(MiB, size - offset)]
            out.write(piece)
            digest.update(piece)
    task_id, worker = claimed(queue, 99)
    expires = timeutil.iso(timeutil.now() + dt.timedelta(days=1))
    created = worker.createArtifact(
        task_id,
        "0",
        "public/large.bin",
        {"storageType": "azure", "expires": expires, "contentType": "application/octet-stream", "contentLength": size},
    )
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
    print(
        f"\nlarge artifact: {size / MiB:.0f} MiB up in {up:.1f} s ({size / MiB / up:.0f} MiB/s, blocks of 8 MiB, "
        f"4 at a time), down through the redirect in {down:.1f} s ({size / MiB / down:.0f} MiB/s); "
        f"SHA-256 {'matches' if same else 'DIFFERS'}"
    )
    if not same:
        raise SystemExit("the downloaded data differs from the uploaded data")


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (Linux VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def s3_artifact(queue: taskcluster.Queue, root_url: str, size: int, watched: dict[str, list[int]], rounds: int) -> None:
    """`rounds` PUTs of `size` bytes to an `s3` putUrl, streamed from memory in 1 MiB pieces (the body is never
    whole anywhere); the host's CPU and peak memory, Azurite's blob CPU, and the data read back by SHA-256."""
    chunk = os.urandom(MiB)
    for round_ in range(1, rounds + 1):
        task_id, worker = claimed(queue, 100 + round_)
        name = f"public/s3-{round_}.bin"
        created = worker.createArtifact(
            task_id,
            "0",
            name,
            {
                "storageType": "s3",
                "expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)),
                "contentType": "application/octet-stream",
            },
        )
        digest = hashlib.sha256()

        def body(digest: Any = digest) -> Any:
            for offset in range(0, size, MiB):
                piece = chunk[: min(MiB, size - offset)]
                digest.update(piece)
                yield piece

        before = cpu_seconds(watched)
        rss_before = peak_rss_mib(watched["host"][0])
        started = time.perf_counter()
        put = httpx.put(created["putUrl"], content=body(), headers={"Content-Length": str(size)}, timeout=600)
        elapsed = time.perf_counter() - started
        after = cpu_seconds(watched)
        put.raise_for_status()
        rss_after = peak_rss_mib(watched["host"][0])
        url = taskcluster.Queue({"rootUrl": root_url}).buildUrl("getArtifact", task_id, "0", name)
        back = hashlib.sha256()
        with httpx.stream("GET", url, follow_redirects=True, timeout=600) as response:
            for piece in response.iter_bytes(MiB):
                back.update(piece)
        per_100 = 100 * MiB / size
        host_cpu = (after["host"] - before["host"]) * per_100
        blob_cpu = (after["azurite-blob"] - before["azurite-blob"]) * per_100
        print(
            f"\ns3 upload {round_}: {size / MiB:.0f} MiB in {elapsed:.1f} s ({size / MiB / elapsed:.0f} MiB/s, "
            f"{put.status_code}); per 100 MiB: host CPU {host_cpu:.2f} s, Azurite blob CPU {blob_cpu:.2f} s; "
            f"host peak memory {rss_before:.0f} -> {rss_after:.0f} MiB; SHA-256 "
            f"{'matches' if back.hexdigest() == digest.hexdigest() else 'DIFFERS'}",
            flush=True,
        )
        if back.hexdigest() != digest.hexdigest():
            raise SystemExit("the downloaded data differs from the uploaded data")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=400, help="small artifacts to create (0: none)")
    parser.add_argument(
        "--size", type=parse_size, default=256 * MiB, help="size of the large file (0: none), e.g. 256M, 3G"
    )
    parser.add_argument("--s3-size", type=parse_size, default=256 * MiB, help="size of each s3 upload (0: none)")
    parser.add_argument("--s3-rounds", type=int, default=1, help="s3 uploads, one after another")
    args = parser.parse_args()
    processes: list[Any] = []
    watched: dict[str, list[int]] = {}
    folder = Path(tempfile.mkdtemp(prefix="bench-artifacts-"))
    try:
        root_url, credentials, _ = start_embedded(processes, watched, in_memory=False)
        queue = taskcluster.Queue({"rootUrl": root_url, "credentials": credentials, "maxRetries": 0})
        if args.small:
            small_artifacts(queue, args.small)
        if args.size:
            large_artifact(queue, root_url, args.size, folder)
        if args.s3_size:
            s3_artifact(queue, root_url, args.s3_size, watched, args.s3_rounds)
    finally:
        stop_all(processes)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
