"""Benchmark of the web inspector on a large task group and on a large log.

    .venv/bin/python -m bench.inspector --tasks 10000                  # embedded Azurite + local host, Chromium
    .venv/bin/python -m bench.inspector --tasks 0 --log-lines 100000   # the log viewer only

Creates the tasks (pending, no worker) in one group from 8 threads, opens `#/groups/<id>` in headless Chromium,
and prints the time until every task is counted (first paint); what one refresh costs: the API calls the page
makes and the bytes they answer (over the refreshes of REFRESH_WINDOW seconds), and the time between two; what a
click on the next page costs (calls and time until its rows are shown); and what reading every page of
listTaskGroup costs through the official client.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import shutil
import signal
import sys
import time
import uuid
from typing import Any

import httpx
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
    parser.add_argument("--tasks", type=int, default=2000, help="tasks in the group (0: no group benchmark)")
    parser.add_argument("--log-lines", type=int, default=0, help="lines of a finished log to open (0: none)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--gecko", action="store_true", help="definitions shaped as a Firefox push's test tasks")
    parser.add_argument("--window", type=float, default=REFRESH_WINDOW, help="seconds of refreshes observed")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    processes: list[Any] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        root_url, creds, _ = start_embedded(processes, in_memory=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            try:
                if args.log_lines:
                    log_bench(browser, root_url, creds, args.log_lines)
                if args.tasks:
                    group_bench(browser, root_url, creds, args)
            finally:
                browser.close()
    finally:
        stop_all(processes)
    return 0


def log_bench(browser: Any, root_url: str, creds: dict[str, str], lines: int) -> None:
    """A finished log of `lines` lines (timestamps, ANSI colours, a few errors): the time until the page has it
    whole, the lines in the page then, a search and the step to its first match, 30 wheel scrolls, and a reload
    at a line anchor in the middle."""
    queue = taskcluster.Queue({"rootUrl": root_url, "credentials": creds})
    tq, task_id = f"bench/log-{uuid.uuid4().hex[:8]}", timeutil.slugid()
    queue.createTask(task_id, definition(tq))
    while not queue.claimWork(tq, {"tasks": 1, "workerGroup": "bench", "workerId": "log"})["tasks"]:
        time.sleep(0.1)
    text = "".join(
        f"[task 2026-11-25T10:{i // 60 % 60:02}:{i % 60:02}.000Z] step {i} \x1b[32mok\x1b[0m "
        f"{'ERROR disk full' if i % 25000 == 7 else 'some output of the build'}\n"
        for i in range(lines)
    )
    created = queue.createArtifact(
        task_id,
        "0",
        "public/logs/live.log",
        {
            "storageType": "azure",
            "contentType": "text/plain; charset=utf-8",
            "expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)),
        },
    )
    httpx.put(created["putUrl"], content=text.encode(), headers={"x-ms-blob-type": "BlockBlob"}).raise_for_status()
    queue.reportCompleted(task_id, "0")
    address = f"{root_url}/inspector/#/tasks/{task_id}/runs/0/logs/public%2Flogs%2Flive.log"
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    started = time.perf_counter()
    page.goto(address)
    page.wait_for_selector("#log-status:has-text('the whole log')", timeout=300_000)
    opened = time.perf_counter() - started
    drawn = page.locator("#log .line").count()
    print(
        f"log of {lines:,} lines ({len(text) / 1e6:.1f} MB): whole on the page {opened:.2f} s after opening, "
        f"{drawn:,} lines drawn",
        flush=True,
    )
    page.evaluate("document.querySelector('#log').scrollTop = 0")
    started = time.perf_counter()
    page.fill("#log-search", "disk full")
    page.press("#log-search", "Enter")
    page.wait_for_selector("#log .hit.current", timeout=60_000)
    searched = time.perf_counter() - started
    print(
        f"search 'disk full': first match shown {searched:.2f} s after Enter ({page.inner_text('#log-search-count')})",
        flush=True,
    )
    page.hover("#log")
    started = time.perf_counter()
    for _ in range(30):
        page.mouse.wheel(0, 3000)
    page.evaluate("new Promise(requestAnimationFrame)")
    scrolled = time.perf_counter() - started
    print(
        f"30 wheel scrolls of 3,000 px: {scrolled:.2f} s; {page.locator('#log .line').count():,} lines drawn after",
        flush=True,
    )
    middle = lines // 2
    started = time.perf_counter()
    page.goto(f"{address}#L{middle}")
    page.reload()
    page.wait_for_selector(f"#log .line.sel[data-n='{middle}']", timeout=300_000)
    print(f"reload at #L{middle}: the line selected and shown {time.perf_counter() - started:.2f} s after", flush=True)
    page.close()


def gecko_shaped(n: int) -> dict[str, Any]:
    """What a Firefox push's test task carries beside its name (about 3.5 kB of JSON, as taskgraph writes them):
    docker-worker's payload with run-task's command and environment, artifacts and caches, Treeherder and Index
    routes, scopes, extra.treeherder and tags."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    env = {f"MOZ_VAR_{k}": f"value-{k}-{'x' * 40}" for k in range(20)}
    env.update(GECKO_HEAD_REV=rev, GECKO_HEAD_REPOSITORY="https://hg.mozilla.org/integration/autoland")
    return {
        "payload": {
            "image": {"type": "task-image", "taskId": "Bx1hYQ1RTbOVBnLQwxp4Qg", "path": "public/image.tar.zst"},
            "command": [
                "/builds/worker/bin/run-task",
                "--",
                "/builds/worker/bin/test-linux.sh",
                "--mochitest-suite=browser-chrome",
                f"--this-chunk={n % 16 + 1}",
                "--total-chunks=16",
            ],
            "env": env,
            "maxRunTime": 7200,
            "artifacts": {
                f"public/{k}": {"type": "directory", "path": f"/builds/worker/artifacts/{k}"}
                for k in ("logs", "test", "test_info")
            },
            "cache": {"gecko-level-3-checkouts-v3": "/builds/worker/checkouts"},
        },
        "routes": [
            f"tc-treeherder.v2.autoland.{rev}.176543",
            f"index.gecko.v2.autoland.revision.{rev}.test.linux64-mochitest-browser-chrome-{n % 16 + 1}",
        ],
        "scopes": [f"secrets:get:project/releng/gecko/build/level-3/{k}" for k in ("a", "b", "c")]
        + ["docker-worker:cache:gecko-level-3-checkouts-v3", "queue:route:index.gecko.v2.autoland.*"],
        "extra": {
            "treeherder": {
                "symbol": f"bc{n % 16 + 1}",
                "groupSymbol": "M",
                "tier": 1,
                "machine": {"platform": "linux1804-64-qr"},
                "collection": {"opt": True},
            }
        },
        "tags": {
            "kind": "mochitest",
            "label": f"test-linux1804-64-qr/opt-mochitest-browser-chrome-{n % 16 + 1}",
            "os": "linux",
            "worker-implementation": "docker-worker",
        },
    }


def group_bench(browser: Any, root_url: str, creds: dict[str, str], args: argparse.Namespace) -> None:
    """A group of `args.tasks` pending tasks: first paint, each kind of refresh, a click on the next page."""
    queue = taskcluster.Queue({"rootUrl": root_url, "credentials": creds})
    group, tq = timeutil.slugid(), f"bench/inspector-{uuid.uuid4().hex[:8]}"
    per_thread = args.tasks // args.threads

    def creator(i: int) -> None:
        client = taskcluster.Queue({"rootUrl": root_url, "credentials": creds})
        for n in range(per_thread):
            body = definition(tq)
            body.update(taskGroupId=group, metadata={**body["metadata"], "name": f"task {i}-{n:05}"})
            if args.gecko:
                body.update(gecko_shaped(i * per_thread + n))
            client.createTask(timeutil.slugid(), body)

    seconds = run_threads(args.threads, creator)
    total = per_thread * args.threads
    print(f"created {total} tasks in one group: {seconds:.1f} s", flush=True)
    page = browser.new_page()
    traffic = ApiTraffic(page)
    started = time.perf_counter()
    page.goto(f"{root_url}/inspector/#/groups/{group}")
    page.wait_for_selector(f"#count-pending[data-count='{total}']", timeout=300_000)
    shown = time.perf_counter() - started
    first_calls, first_bytes = traffic.since(started)
    print(
        f"first paint: every task shown {shown:.2f} s after opening ({first_calls} API calls, "
        f"{first_bytes / 1e6:.2f} MB)",
        flush=True,
    )
    # Refreshes: the text of #group-updated changes after each; the page says what it read (the whole
    # group, or the unresolved tasks' statuses), and each kind is reported apart.
    window_start = time.perf_counter()
    before, marks = page.inner_text("#group-updated"), [(window_start, "")]
    while time.perf_counter() - window_start < args.window:
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
    print(f"refreshes: {len(marks) - 1} in {args.window:.0f} s (every {every:.1f} s)", flush=True)
    for kind, seen in kinds.items():
        calls = sum(c for c, _ in seen) / len(seen)
        size = sum(b for _, b in seen) / len(seen)
        print(
            f"  reading {'the whole group' if kind == 'whole' else 'unresolved statuses'}: {len(seen)} "
            f"refreshes, each {calls:.1f} API calls, {size / 1e3:.0f} kB",
            flush=True,
        )
    first_row = page.get_attribute("#group-tasks tbody tr", "data-task-id")
    clicked = time.perf_counter()
    page.click("a[rel=next]")
    while page.get_attribute("#group-tasks tbody tr", "data-task-id") in (first_row, None):
        time.sleep(0.01)
    page.wait_for_selector("#group-tasks tbody tr")
    turned = time.perf_counter() - clicked
    click_calls, click_bytes = traffic.since(clicked)
    print(
        f"next page: rows shown {turned:.2f} s after the click; {click_calls} API calls, "
        f"{click_bytes / 1e3:.0f} kB until then",
        flush=True,
    )
    page.close()
    started = time.perf_counter()
    calls, token = 0, None
    while True:
        answer = queue.listTaskGroup(group, query={"limit": 1000, **({"continuationToken": token} if token else {})})
        calls += 1
        token = answer.get("continuationToken")
        if not token:
            break
    listing = time.perf_counter() - started
    print(f"reading the group through the official client: {calls} listTaskGroup calls, {listing:.2f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
