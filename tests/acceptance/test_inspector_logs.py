"""The inspector's log viewer in Chromium, on logs written through the API as workers write them: ANSI colours and
styles shown (never their escape codes), line numbers linking to a line or a range that a reload keeps, search
stepping through matches, folding sections, timestamps, following the end (stopped by scrolling up, resumed at
the bottom), and each state a log can be in said plainly: not started, no such log, no such run, private (with
the sign-in offered), an error artifact."""

from __future__ import annotations

import httpx

from tests.acceptance.browsing import (
    LOG,
    WAIT_MS,
    append_log,
    claimed_task,
    finished_task_with_log,
    in_days,
    log_address,
    needs_browser,
    shot,
    sign_in,
    start_live_log,
    wait_js,
)
from tests.conftest import slugid, task_definition, task_queue_id

pytestmark = needs_browser

ANSI_LOG = (
    "\n".join(
        [
            "[taskcluster 2026-11-25T10:00:00.000Z] Worker Type (proj/test) settings:",
            "\x1b[1mBold\x1b[0m \x1b[31mred\x1b[0m \x1b[38;5;208morange\x1b[0m \x1b[38;2;10;200;30mgreen\x1b[0m\x1b[K",
            "::group::Install dependencies",
            "Collecting foo",
            "Collecting bar",
            "::endgroup::",
            "section_start:1700000000:tests\r\x1b[0K\x1b[36mRunning tests\x1b[0m",
            "test_a PASSED",
            "test_b \x1b[31mFAILED\x1b[0m",
            "section_end:1700000001:tests\r\x1b[0K",
            "progress 10%\rprogress 50%\rprogress 100%",
            "\x1b[1;31merror: the build failed\x1b[0m",
        ]
    )
    + "\n"
)


def lines_text(page) -> str:
    return page.evaluate("[...document.querySelectorAll('#log .line')].map(l => l.innerText).join('\\n')")


def test_ansi_colours_sections_timestamps_and_line_links_that_survive_a_reload(host, page):
    queue = host.client()
    task_id = finished_task_with_log(queue, ANSI_LOG)
    page.goto(log_address(host, task_id))
    page.wait_for_selector("#log-status:has-text('the whole log')", timeout=WAIT_MS)
    text = lines_text(page)
    assert "\x1b" not in text and "[0m" not in text and "[K" not in text  # escapes interpreted, never shown
    assert page.inner_text("#log .a-bold") == "Bold"
    assert page.inner_text("#log .a-f1") == "red"
    colours = page.evaluate(
        "[...document.querySelectorAll('#log .line[data-n=\"2\"] .lt span')]"
        ".map(s => [s.innerText, getComputedStyle(s).color])"
    )
    assert ["orange", "rgb(255, 135, 0)"] in colours and ["green", "rgb(10, 200, 30)"] in colours
    assert page.inner_text(".line[data-n='11'] .lt") == "progress 100%"  # the carriage returns' last frame
    timestamp = page.locator(".line[data-n='1'] .ts")
    assert timestamp.inner_text() == "2026-11-25T10:00:00.000Z" and "2026" in timestamp.get_attribute("title")
    # Sections (GitHub's ::group:: and GitLab's section_start) are folded once the log is whole, but one that holds
    # an error (test_b FAILED): it stays open, and its header says so.
    folds = page.locator("#log button.fold")
    assert folds.count() == 2 and "Install dependencies" in folds.nth(0).inner_text()
    assert "Running tests" in folds.nth(1).inner_text() and "::group::" not in text
    assert page.is_hidden(".line[data-n='4']") and folds.nth(0).get_attribute("aria-expanded") == "false"
    assert "error inside" not in folds.nth(0).inner_text()
    assert folds.nth(1).get_attribute("aria-expanded") == "true" and "error inside" in folds.nth(1).inner_text()
    assert page.is_visible(".line[data-n='9']") and "FAILED" in page.inner_text(".line[data-n='9']")
    folds.nth(1).click()  # the reader may still fold it
    assert folds.nth(1).get_attribute("aria-expanded") == "false" and page.is_hidden(".line[data-n='9']")
    folds.nth(1).click()
    assert page.is_visible(".line[data-n='9']") and page.is_hidden(".line[data-n='4']")
    shot(page, "log-ansi")
    # A line, then a range by shift-click: the address says so, and a reload shows the same lines selected.
    page.click(".line[data-n='9'] a.ln")
    page.click(".line[data-n='12'] a.ln", modifiers=["Shift"])
    assert page.evaluate("location.hash").endswith("#L9-L12")
    page.reload()
    page.wait_for_selector("#log .line.sel", timeout=WAIT_MS)
    assert page.evaluate("[...document.querySelectorAll('#log .line.sel')].map(l => l.dataset.n)") == [
        "9",
        "10",
        "11",
        "12",
    ]
    assert page.is_visible(".line[data-n='9']")  # its section unfolded for the link
    page.evaluate("location.hash = location.hash.replace(/#L.*$/, '#L2')")  # an edited anchor: no reload needed
    wait_js(page, "document.querySelectorAll('#log .line.sel').length === 1")
    assert page.get_attribute("#log .line.sel", "data-n") == "2"


def test_search_steps_through_the_matches_of_a_large_log(host, page):
    queue = host.client()
    lines = [f"[task 2026-11-25T10:00:00.000Z] step {i} ok" for i in range(20000)]
    for at in (150, 9000, 19990):
        lines[at] = f"\x1b[31mERROR\x1b[0m in step {at}: Disk full"
    task_id = finished_task_with_log(queue, "\n".join(lines) + "\n")
    page.goto(log_address(host, task_id))
    page.wait_for_selector("#log-status:has-text('20,000 lines')", timeout=WAIT_MS)
    assert page.locator("#log .line").count() < 2000  # only what is near the screen is drawn
    page.evaluate("document.querySelector('#log').scrollTop = 0")  # it opened at the end; search from the top
    page.fill("#log-search", "disk FULL")
    page.press("#log-search", "Enter")
    wait_js(page, "document.querySelector('#log-search-count').textContent === '1 of 3 matches'")
    assert page.get_attribute("#log .hit.current", "data-match") == "0"
    assert page.evaluate("document.querySelector('#log .hit.current').closest('.line').dataset.n") == "151"
    page.click("#search-next")
    wait_js(page, "document.querySelector('#log-search-count').textContent === '2 of 3 matches'")
    current = page.locator("#log .hit.current")
    assert current.evaluate("m => m.closest('.line').dataset.n") == "9001" and current.is_visible()
    box = current.bounding_box()
    scroller = page.locator("#log").bounding_box()
    assert scroller["y"] <= box["y"] <= scroller["y"] + scroller["height"]  # scrolled to it
    page.press("#log-search", "Shift+Enter")
    wait_js(page, "document.querySelector('#log-search-count').textContent === '1 of 3 matches'")
    page.press("#log-search", "Shift+Enter")
    wait_js(page, "document.querySelector('#log-search-count').textContent === '3 of 3 matches'")  # wraps around
    page.fill("#log-search", "no such text")
    wait_js(page, "document.querySelector('#log-search-count').textContent === 'no match'")
    assert page.locator("#log .hit").count() == 0


def test_following_the_end_stops_when_the_reader_scrolls_up_and_resumes_at_the_bottom(host, page):
    queue = host.client()
    task_id = claimed_task(queue)
    blob = start_live_log(queue, task_id)
    append_log(blob, "".join(f"line {i}\n" for i in range(1, 301)))
    page.goto(log_address(host, task_id))
    page.wait_for_selector("#log .line[data-n='300']", timeout=WAIT_MS)
    at_bottom = "(l => l.scrollHeight - l.scrollTop - l.clientHeight < 4)(document.querySelector('#log'))"
    wait_js(page, at_bottom)
    assert page.is_checked("#follow")
    page.hover("#log")
    page.mouse.wheel(0, -2000)  # the reader scrolls up to read
    wait_js(page, "!document.querySelector('#follow').checked")
    top = page.evaluate("document.querySelector('#log').scrollTop")
    append_log(blob, "".join(f"line {i}\n" for i in range(301, 401)))
    page.wait_for_selector("#log .line[data-n='400']", state="attached", timeout=WAIT_MS)
    assert page.evaluate("document.querySelector('#log').scrollTop") == top  # left where the reader is
    page.evaluate("(l => { l.scrollTop = l.scrollHeight; })(document.querySelector('#log'))")
    wait_js(page, "document.querySelector('#follow').checked")  # back at the bottom: following again
    append_log(blob, "".join(f"line {i}\n" for i in range(401, 501)))
    page.wait_for_selector("#log .line[data-n='500']", timeout=WAIT_MS)
    wait_js(page, at_bottom)
    queue.reportCompleted(task_id, "0")
    page.wait_for_selector("#log-status:has-text('the whole log')", timeout=WAIT_MS)


def test_the_task_page_offers_the_newest_runs_log_first(host, page):
    """Issue #65: "view log" was a small link in the artifact list; it is the first thing under the title."""
    queue = host.client()
    done = finished_task_with_log(queue, "line one\nline two\n")
    page.goto(f"{host.root_url}/inspector/#/tasks/{done}")
    page.wait_for_selector("#view-log-link", timeout=WAIT_MS)
    assert page.inner_text("#view-log-link") == "View log"
    first = "document.querySelector('#view-log').compareDocumentPosition(document.querySelector('#task-actions'))"
    assert page.evaluate(f"({first} & Node.DOCUMENT_POSITION_FOLLOWING) !== 0")  # before the actions and facts
    page.click("#view-log-link")
    page.wait_for_selector("#log .line:has-text('line two')", timeout=WAIT_MS)
    assert page.evaluate("location.hash").endswith(f"/runs/0/logs/{LOG.replace('/', '%2F')}")
    pending = claimed_task(queue)  # a run with no log yet: nothing offered
    page.goto(f"{host.root_url}/inspector/#/tasks/{pending}")
    page.wait_for_selector("article.run[data-state='running']", timeout=WAIT_MS)
    assert page.locator("#view-log-link").count() == 0


def test_a_failed_run_says_why_on_the_task_page_and_its_log_opens_at_the_error(host, page):
    """Issue #65: the exit code and the first error lines beside "failed", from the log (why.js), and "View log"
    opening the log at the first error; in the group's failure list, the exit code and first error line too."""
    queue = host.client()
    group = slugid()
    task_id = claimed_task(queue, taskGroupId=group)
    text = (
        "compiling\nlinking\nerror: undefined reference to `main'\ncollect2: ld returned 1\nexit code 2 after 0.4 s\n"
    )
    created = queue.createArtifact(
        task_id, "0", LOG, {"storageType": "azure", "expires": in_days(), "contentType": "text/plain; charset=utf-8"}
    )
    assert (
        httpx.put(created["putUrl"], content=text.encode(), headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    )
    queue.reportFailed(task_id, "0")
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    page.wait_for_selector("#exit-code", timeout=WAIT_MS)
    assert page.inner_text("#exit-code") == "2"
    assert "Why run 0 failed" in page.inner_text("#run-why")
    shot(page, "task-why")
    first = page.locator("#run-why .error-lines li").first
    assert "error: undefined reference" in first.inner_text() and "line 3" in first.inner_text()
    page.wait_for_selector("#view-log-link[href$='#L3']", timeout=WAIT_MS)
    page.click("#view-log-link")
    page.wait_for_selector("#log .line.sel[data-n='3']", timeout=WAIT_MS)  # opened at the error, selected
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    why = page.locator(f"tr[data-task-id='{task_id}'] .why-line")
    why.wait_for(timeout=WAIT_MS)
    assert "exit code 2" in why.inner_text() and "error: undefined reference" in why.inner_text()
    assert why.locator("a").get_attribute("href").endswith("#L3")
    shot(page, "group-why-lines")


def test_a_log_over_the_reading_cap_is_explained_from_its_tail(host, page):
    """Issue #74: a 21 MB browser-chrome log got no why and no word of why not. A log past the 8 MiB the page reads
    whole is explained from its last 2 MiB (a Range request), its size said, the lines without line numbers."""
    queue = host.client()
    group = slugid()
    task_id = claimed_task(queue, taskGroupId=group)
    filler = "[task 2026-11-28T10:41:07.512Z] 10:41:07     INFO - TEST-PASS | browser_ok.js | fine\n"
    text = (
        filler * (9 * 1024 * 1024 // len(filler))
        + "[task 2026-11-28T10:52:00.000Z] 10:52:00     INFO - TEST-UNEXPECTED-FAIL | browser_tabs.js | "
        + "Test timed out\n"
        + filler * 100
        + "exit code 1 after 800 s\n"
    )
    created = queue.createArtifact(
        task_id, "0", LOG, {"storageType": "azure", "expires": in_days(), "contentType": "text/plain; charset=utf-8"}
    )
    put = httpx.put(created["putUrl"], content=text.encode(), headers={"x-ms-blob-type": "BlockBlob"}, timeout=60)
    assert put.status_code == 201
    queue.reportFailed(task_id, "0")
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    page.wait_for_selector("#log-too-long", timeout=WAIT_MS)
    said = page.inner_text("#log-too-long")
    assert f"{len(text) / 1024 / 1024:.1f} MiB" in said and "last 2 MiB" in said, said
    assert page.inner_text("#exit-code") == "1"
    first = page.locator("#run-why .error-lines li").first.inner_text()
    assert "TEST-UNEXPECTED-FAIL | browser_tabs.js | Test timed out" in first and "near its end" in first
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    why = page.locator(f"tr[data-task-id='{task_id}'] .why-line")
    why.wait_for(timeout=WAIT_MS)
    assert "exit code 1" in why.inner_text() and "browser_tabs.js" in why.inner_text()


def test_an_exception_says_the_reason_it_was_resolved_with_even_without_a_log(host, page):
    """Issue #74: a `malformed-payload` exception got no why at all; the reason and what it means are shown."""
    queue = host.client()
    task_id = claimed_task(queue)
    queue.reportException(task_id, "0", {"reason": "malformed-payload"})
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    page.wait_for_selector("#run-reason", timeout=WAIT_MS)
    assert "Why run 0 ended" in page.inner_text("#run-why")
    reason = page.inner_text("#run-reason")
    assert "malformed-payload" in reason and "could not run the task's payload" in reason


def test_viewing_a_failed_task_never_fetches_a_log_that_points_elsewhere(host, page):
    """Issue #72 (W5): a `reference` log points anywhere (an internal address, say); the page that explains a
    failure reads only logs stored here, so merely viewing the task or its group sends nothing there."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from local_host.azurite import free_port

    asked: list[str] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("access-control-allow-origin", "*")
            self.end_headers()
            self.wfile.write(b"error: read from elsewhere\n")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Elsewhere)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        queue = host.client()
        group = slugid()
        task_id = claimed_task(queue, taskGroupId=group)
        target = f"http://127.0.0.1:{server.server_address[1]}/internal/secret-log"
        queue.createArtifact(
            task_id,
            "0",
            LOG,
            {"storageType": "reference", "expires": in_days(), "url": target, "contentType": "text/plain"},
        )
        queue.reportFailed(task_id, "0")
        page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
        page.wait_for_selector(f"li[data-artifact='{LOG}']", timeout=WAIT_MS)
        page.goto(f"{host.root_url}/inspector/#/groups/{group}")
        page.wait_for_selector(f"tr[data-task-id='{task_id}']", timeout=WAIT_MS)
        page.wait_for_timeout(1500)  # what the pages would read by themselves has had time to go
        assert asked == []
    finally:
        server.shutdown()
        server.server_close()


def test_each_state_of_a_log_is_said_plainly(host, page):
    queue = host.client()
    # Not started: the run is pending.
    pending = slugid()
    queue.createTask(pending, task_definition(taskQueueId=task_queue_id()))
    page.goto(log_address(host, pending))
    page.wait_for_selector("#log-state:has-text('Not started')", timeout=WAIT_MS)
    assert page.is_hidden("#log")
    # No log of that name in a finished run: said, with the logs it has.
    done = finished_task_with_log(queue, "all good\n")
    page.goto(log_address(host, done, "public/logs/live_backing.log"))
    page.wait_for_selector("#log-state:has-text('There is no log named')", timeout=WAIT_MS)
    assert page.locator(f"#log-state a[href$='{LOG.replace('/', '%2F')}']").count() == 1
    # A run that does not exist: said once, not polled for ever.
    page.goto(log_address(host, done, run_id=4))
    page.wait_for_selector("#log-state:has-text('has no run 4')", timeout=WAIT_MS)
    assert "runs are 0 to 0" in page.inner_text("#log-state")
    # A private log: the sign-in is offered, and signing in shows it.
    private = finished_task_with_log(queue, "secret build output\n", name="private/logs/build.log")
    # On the task page, signed out, the private artifact is no link to a 403 answer: what it takes is said.
    page.goto(f"{host.root_url}/inspector/#/tasks/{private}")
    item = "li[data-artifact='private/logs/build.log']"
    page.wait_for_selector(f"{item}.artifact-private", timeout=WAIT_MS)
    assert page.locator(f"{item} a").count() == 0
    assert "queue:get-artifact:private/logs/build.log" in page.inner_text(item)
    page.goto(log_address(host, private, "private/logs/build.log"))
    page.wait_for_selector("#log-state:has-text('This log is private')", timeout=WAIT_MS)
    assert "queue:get-artifact:private/logs/build.log" in page.inner_text("#log-state")
    page.click("#log-sign-in")
    assert page.evaluate("document.activeElement.id") == "client-id"
    sign_in(page)
    page.wait_for_selector("#log .line:has-text('secret build output')", timeout=WAIT_MS)
    page.goto(f"{host.root_url}/inspector/#/tasks/{private}")  # signed in: a signed link now
    page.wait_for_selector(f"{item} a.download", timeout=WAIT_MS)
    assert "bewit=" in page.get_attribute(f"{item} a.download", "href")
    # An error artifact: the worker's reason.
    failed = claimed_task(queue)
    queue.createArtifact(
        failed,
        "0",
        LOG,
        {
            "storageType": "error",
            "expires": in_days(),
            "reason": "file-missing-on-worker",
            "message": "the log file was never written",
        },
    )
    queue.reportFailed(failed, "0")
    page.goto(log_address(host, failed))
    page.wait_for_selector("#log-state:has-text('the log file was never written')", timeout=WAIT_MS)
    assert page.title().startswith("live.log")
