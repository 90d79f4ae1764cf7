"""Benchmark of the web inspector on a large task group: how long the group page takes to show every task, and
how often it refreshes.

    .venv/bin/python -m bench.inspector --tasks 2000     # embedded Azurite + local host, Debian's Chromium

Creates the tasks (pending, no worker) in one group from 8 threads, opens `#/groups/<id>` in headless Chromium,
and prints the time until every task is counted (first paint); what one refresh costs: the API calls the page
makes and the bytes they answer (over the refreshes of REFRESH_WINDOW seconds), and the time between two; what a
click on the next page costs (calls and time until its rows are shown); and what reading every page of
listTaskGroup costs through the official client.
"""

from __future__ import annotations

import argparse
import itertools
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

REFRESH_WINDOW = 120.0  # seconds of refreshes observed


class ApiTraffic:
    """The API calls a page makes and the bytes they answer (Content-Length), from Playwright's response events."""

    def __init__(self, page: Any) -> None:
        self.calls: list[tuple[float, int]] = []
        page.on("response", self.seen)

    def seen(self, response: Any) -> None:
        if "/api/" in response.url:
            self.calls.append((time.perf_counter(), int(response.headers.get("content-length") or 0)))

    def since(self, start: float) -> tuple[int, int]:
        after = [size for at, size in self.calls if at >= start]
        return len(after), sum(after)


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
            traffic = ApiTraffic(page)
            started = time.perf_counter()
            page.goto(f"{root_url}/inspector/#/groups/{group}")
            page.wait_for_selector(f"#count-pending[data-count='{total}']", timeout=300_000)
            shown = time.perf_counter() - started
            first_calls, first_bytes = traffic.since(started)
            print(f"first paint: every task shown {shown:.2f} s after opening ({first_calls} API calls, "
                  f"{first_bytes / 1e6:.2f} MB)", flush=True)
            # Refreshes: the text of #group-updated changes after each; the page says what it read (the whole
            # group, or the unresolved tasks' statuses), and each kind is reported apart.
            window_start = time.perf_counter()
            before, marks = page.inner_text("#group-updated"), [(window_start, "")]
            while time.perf_counter() - window_start < REFRESH_WINDOW:
                now_text = page.inner_text("#group-updated")
                if now_text != before:
                    before = now_text
                    marks.append((time.perf_counter(), "status" if "status of" in now_text else "whole"))
                time.sleep(0.05)
            kinds: dict[str, list[tuple[int, int]]] = {}
            for (start, _), (end, kind) in itertools.pairwise(marks):
                inside = [size for at, size in traffic.calls if start < at <= end]
                kinds.setdefault(kind, []).append((len(inside), sum(inside)))
            gaps = [b[0] - a[0] for a, b in itertools.pairwise(marks[1:])]
            every = sum(gaps) / len(gaps) if gaps else 0.0
            print(f"refreshes: {len(marks) - 1} in {REFRESH_WINDOW:.0f} s (every {every:.1f} s)", flush=True)
            for kind, seen in kinds.items():
                calls = sum(c for c, _ in seen) / len(seen)
                size = sum(b for _, b in seen) / len(seen)
                print(f"  reading {'the whole group' if kind == 'whole' else 'unresolved statuses'}: {len(seen)} "
                      f"refreshes, each {calls:.1f} API calls, {size / 1e3:.0f} kB", flush=True)
            first_row = page.get_attribute("#group-tasks tbody tr", "data-task-id")
            clicked = time.perf_counter()
            page.click("a[rel=next]")
            while page.get_attribute("#group-tasks tbody tr", "data-task-id") in (first_row, None):
                time.sleep(0.01)
            page.wait_for_selector("#group-tasks tbody tr")
            turned = time.perf_counter() - clicked
            click_calls, click_bytes = traffic.since(clicked)
            print(f"next page: rows shown {turned:.2f} s after the click; {click_calls} API calls, "
                  f"{click_bytes / 1e3:.0f} kB until then", flush=True)
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
        print(f"reading the group through the official client: {calls} listTaskGroup calls, {listing:.2f} s",
              flush=True)
    finally:
        stop_all(processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
