"""Benchmark of the web inspector on a large task group: how long the group page takes to show every task, and
how often it refreshes.

    .venv/bin/python -m bench.inspector --tasks 2000     # embedded Azurite + local host, Debian's Chromium

Creates the tasks (pending, no worker) in one group from 8 threads, opens `#/groups/<id>` in headless Chromium,
and prints the time until every task is counted, the time between two refreshes (the page re-reads every page of
listTaskGroup), and what reading every page costs through the official client.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
import uuid
from typing import Any

import taskcluster
from playwright.sync_api import sync_playwright

from bench.lifecycle import definition, run_threads, start_embedded, stop_all
from shared import timeutil


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    processes: list[Any] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        root_url, creds, _ = start_embedded(processes, in_memory=True)
        queue = taskcluster.Queue({"rootUrl": root_url, "credentials": creds})
        group, tq = timeutil.slugid(), f"bench/inspector-{uuid.uuid4().hex[:8]}"
        per_thread = args.tasks // args.threads

        def creator(i: int) -> None:
            client = taskcluster.Queue({"rootUrl": root_url, "credentials": creds})
            for n in range(per_thread):
                body = definition(tq)
                body.update(taskGroupId=group, metadata={**body["metadata"], "name": f"task {i}-{n:05}"})
                client.createTask(timeutil.slugid(), body)

        seconds = run_threads(args.threads, creator)
        total = per_thread * args.threads
        print(f"created {total} tasks in one group: {seconds:.1f} s", flush=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page()
            started = time.perf_counter()
            page.goto(f"{root_url}/inspector/#/groups/{group}")
            page.wait_for_selector(f"#count-pending[data-count='{total}']", timeout=120_000)
            shown = time.perf_counter() - started
            before = page.inner_text("#group-updated")
            started = time.perf_counter()
            while page.inner_text("#group-updated") == before:
                time.sleep(0.05)
            refresh = time.perf_counter() - started
            browser.close()
        started = time.perf_counter()
        calls, token = 0, None
        while True:
            answer = queue.listTaskGroup(group, query={"limit": 1000, **({"continuationToken": token} if token
                                                                          else {})})
            calls += 1
            token = answer.get("continuationToken")
            if not token:
                break
        listing = time.perf_counter() - started
        print(f"group page: every task shown {shown:.2f} s after opening; next refresh {refresh:.2f} s later; "
              f"reading the group: {calls} listTaskGroup calls, {listing:.2f} s", flush=True)
    finally:
        stop_all(processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
