"""The inspector's group view in Chromium: what failed and why (failures first, the reason, "blocked by" for a task
that can never run, a stuck group said to be stuck, a task queue nobody takes work from), a name search, filters
and pages answered from what the page holds (no request), refreshes that read only the unresolved tasks'
statuses, and rows updated in place (focus and a text selection survive a refresh)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from tests.acceptance.browsing import WAIT_MS, answer_dialog, claimed_task, needs_browser, shot, sign_in, wait_js
from tests.conftest import slugid, task_definition, task_queue_id, wait_for

pytestmark = needs_browser


def named(name: str, **more):
    return {
        "metadata": {
            "name": name,
            "description": "inspector test",
            "owner": "tests@example.com",
            "source": "https://example.com/tests",
        },
        **more,
    }


class Requests:
    """The API requests a page makes (method, path, JSON body)."""

    def __init__(self, page) -> None:
        self.seen: list[tuple[str, str, object]] = []
        page.on("request", self.record)

    def record(self, request) -> None:
        if "/api/queue/" in request.url:
            body = request.post_data
            self.seen.append(
                (request.method, request.url.split("/api/queue/v1", 1)[1], json.loads(body) if body else None)
            )


def test_a_group_says_what_failed_and_why_and_its_rows_keep_focus_and_selection(host, page):
    queue = host.client()
    group, tq = slugid(), task_queue_id()
    failed = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("test-3"))
    queue.reportFailed(failed, "0")
    done = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("build"))
    queue.reportCompleted(done, "0")
    sign, upload, idle = slugid(), slugid(), slugid()
    queue.createTask(sign, task_definition(taskQueueId=tq, taskGroupId=group, dependencies=[failed], **named("sign")))
    queue.createTask(upload, task_definition(taskQueueId=tq, taskGroupId=group, dependencies=[sign], **named("upload")))
    idle_queue = task_queue_id()
    queue.createTask(idle, task_definition(taskQueueId=idle_queue, taskGroupId=group, **named("lint")))
    # The page's clock a few minutes ahead: the pending task has waited long enough for the no-worker hint.
    page.clock.set_fixed_time(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    requests = Requests(page)
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    page.wait_for_selector("#count-failed[data-count='1']", timeout=WAIT_MS)
    order = page.evaluate("[...document.querySelectorAll('#group-tasks tbody tr')].map(r => r.dataset.taskId)")
    assert order == [failed, idle, sign, upload, done]  # failures first, then pending, unscheduled, completed
    assert "blocked by test-3" in page.inner_text(f"tr[data-task-id='{sign}']")
    # Blocked through sign: the failure to rerun is named, and the task it comes through (issue #85).
    assert "blocked by test-3 through sign" in page.inner_text(f"tr[data-task-id='{upload}']")
    assert page.get_attribute(f"tr[data-task-id='{sign}'] .blocked a", "href") == f"#/tasks/{failed}"
    assert "pending for" in page.inner_text(f"tr[data-task-id='{idle}']")
    page.wait_for_selector(f"#group-hints li[data-queue='{idle_queue}']", timeout=WAIT_MS)
    assert "No task of" in page.inner_text("#group-hints") and "1 pending here" in page.inner_text("#group-hints")
    assert page.get_attribute("#group-summary", "data-kind") == "running"
    shot(page, "group-why")

    # Focus on a row's link and a selected name survive refreshes.
    page.focus(f"tr[data-task-id='{sign}'] td:first-child a")
    page.evaluate(f"""(() => {{ const cell = document.querySelector("tr[data-task-id='{upload}'] td:first-child a");
        const range = document.createRange(); range.selectNodeContents(cell);
        getSelection().removeAllRanges(); getSelection().addRange(range); }})()""")
    refreshes = int(page.get_attribute("#group-updated", "data-refreshes"))
    wait_js(page, f"Number(document.querySelector('#group-updated').dataset.refreshes) >= {refreshes + 2}")
    assert page.evaluate("document.activeElement.closest('tr')?.dataset.taskId") == sign
    assert page.evaluate("getSelection().toString()") == "upload"

    # A refresh reads only the unresolved tasks' statuses.
    statuses = [body for method, path, body in requests.seen if path == "/tasks/status"]
    assert statuses and sorted(statuses[-1]["taskIds"]) == sorted([sign, upload, idle])

    # Filters, pages and the search are answered from what the page holds.
    count = len(requests.seen)
    page.click("#count-failed")
    wait_js(page, "document.querySelectorAll('#group-tasks tbody tr').length === 1")
    assert page.get_attribute("#group-tasks tbody tr", "data-task-id") == failed
    page.click("#count-all")
    page.fill("#group-search", "UPL")
    wait_js(page, "document.querySelectorAll('#group-tasks tbody tr').length === 1")
    assert page.get_attribute("#group-tasks tbody tr", "data-task-id") == upload
    assert "q=UPL" in page.evaluate("location.hash")
    listings = (f"/task-group/{group}/list", f"/task-group/{group}/brief")
    assert [r for r in requests.seen[count:] if r[1].startswith(listings)] == []

    # The dependency graph: three layers (test-3, build, lint; sign; upload), a task named on hover, opened by a click.
    page.click("#graph-details > summary")
    canvas = page.locator("#group-graph canvas")
    wait_js(page, "document.querySelector('#group-graph canvas').dataset.layers === '3'")
    assert canvas.get_attribute("data-tasks") == "5" and "3 layers" in canvas.get_attribute("aria-label")
    where = canvas.evaluate(f"c => c.positionOf('{sign}')")
    assert where["y"] > canvas.evaluate(f"c => c.positionOf('{failed}').y")  # below what it depends on
    shot(page, "group-graph")
    canvas.hover(position={"x": where["x"] + 4, "y": where["y"] + 4})
    page.wait_for_selector(".graph-tip:has-text('sign: unscheduled')", timeout=WAIT_MS)
    canvas.click(position={"x": where["x"] + 4, "y": where["y"] + 4})
    wait_js(page, f"location.hash === '#/tasks/{sign}'")


def test_a_row_that_moves_keeps_its_focus(host, page):
    """Issue #65: a live group's rows move when states change (failures first ... completed last); moving the
    focused row took the focus away. A completed task rerun moves above the unscheduled one, focus and all."""
    queue = host.client()
    group, tq = slugid(), task_queue_id()
    failed = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("test-1"))
    queue.reportFailed(failed, "0")
    done = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("build"))
    queue.reportCompleted(done, "0")
    blocked = slugid()
    queue.createTask(
        blocked, task_definition(taskQueueId=tq, taskGroupId=group, dependencies=[failed], **named("sign"))
    )
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    page.wait_for_selector(f"tr[data-task-id='{done}'][data-state='completed']", timeout=WAIT_MS)
    rows = "[...document.querySelectorAll('#group-tasks tbody tr')].map(r => r.dataset.taskId)"
    assert page.evaluate(rows) == [failed, blocked, done]
    page.focus(f"tr[data-task-id='{done}'] td:first-child a")
    queue.rerunTask(done)
    page.wait_for_selector(f"tr[data-task-id='{done}'][data-state='pending']", timeout=WAIT_MS)
    assert page.evaluate(rows) == [failed, done, blocked]  # it moved
    assert page.evaluate("document.activeElement.closest('tr')?.dataset.taskId") == done


def test_a_group_that_can_never_finish_says_it_is_stuck(host, page):
    queue = host.client()
    group, tq = slugid(), task_queue_id()
    failed = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("compile"))
    queue.reportFailed(failed, "0")
    queue.createTask(
        slugid(), task_definition(taskQueueId=tq, taskGroupId=group, dependencies=[failed], **named("package"))
    )
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    page.wait_for_selector("#group-summary[data-kind='stuck']", timeout=WAIT_MS)
    text = page.inner_text("#group-summary")
    assert "Stuck: 1 task can never run" in text and "deadline" in text
    finished = slugid()
    done = claimed_task(queue, taskQueueId=tq, taskGroupId=finished, **named("only"))
    queue.reportCompleted(done, "0")
    wait_for(lambda: queue.status(done)["status"]["state"] == "completed")
    page.goto(f"{host.root_url}/inspector/#/groups/{finished}")
    page.wait_for_selector("#group-summary[data-kind='finished']", timeout=WAIT_MS)
    assert page.inner_text("#group-summary").startswith("Finished")


def test_group_actions_seal_rerun_the_failed_tasks_and_cancel_asking_first(host, page):
    queue = host.client()
    group, tq = slugid(), task_queue_id()
    failed = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("flaky test"))
    queue.reportFailed(failed, "0")
    waiting = slugid()
    queue.createTask(waiting, task_definition(taskQueueId=tq, taskGroupId=group, **named("later")))
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    page.wait_for_selector("#rerun-failed", timeout=WAIT_MS)
    assert page.is_disabled("#rerun-failed") and page.is_disabled("#seal-group")  # anonymous
    sign_in(page)
    page.wait_for_selector("#rerun-failed:not([disabled])", timeout=WAIT_MS)
    assert page.inner_text("#rerun-failed") == "Rerun failed (1)"
    assert page.is_disabled("#cancel-group")  # the queue cancels only a sealed group
    answer_dialog(page, lambda: page.click("#rerun-failed"), accept=True)
    page.wait_for_selector(
        "#group-feedback .message-ok:has-text('Rerun now: flaky test. Once what they depend on has completed: none.')",
        timeout=WAIT_MS,
    )
    assert queue.status(failed)["status"]["state"] == "pending"
    page.click("#seal-group")
    page.wait_for_selector("#group-feedback .message-ok:has-text('Sealed')", timeout=WAIT_MS)
    page.wait_for_selector("#cancel-group:not([disabled])", timeout=WAIT_MS)
    asked = answer_dialog(page, lambda: page.click("#cancel-group"), accept=False)
    assert "Cancel the 2 unresolved tasks" in asked and queue.status(waiting)["status"]["state"] == "pending"
    answer_dialog(page, lambda: page.click("#cancel-group"), accept=True)
    page.wait_for_selector("#group-feedback .message-ok:has-text('Cancelled 2')", timeout=WAIT_MS)
    assert queue.status(waiting)["status"]["state"] == "exception"
    page.wait_for_selector("#count-exception[data-count='2']", timeout=WAIT_MS)


def test_rerun_failed_runs_nothing_ahead_of_what_it_depends_on(host, page):
    """A push whose build failed: its tests and summary (`all-resolved`, as a push's summary is) were cancelled with
    the group. "Rerun failed" reruns the build and the lint now, and the tests and summary only once what they depend
    on has completed: the queue waits, whatever the page does (it is closed here right after); the confirm box, the
    result and the pages say the same plan; the summary runs last."""
    queue = host.client()
    group, tq = slugid(), task_queue_id()
    build = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("build-linux"))
    queue.reportFailed(build, "0")
    lint = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("lint"))
    queue.reportFailed(lint, "0")
    tests = [slugid() for _ in range(3)]
    for i, test in enumerate(tests):
        queue.createTask(
            test, task_definition(taskQueueId=tq, taskGroupId=group, dependencies=[build], **named(f"test-{i}"))
        )
    summary = slugid()
    queue.createTask(
        summary,
        task_definition(
            taskQueueId=tq, taskGroupId=group, dependencies=tests, requires="all-resolved", **named("summary")
        ),
    )
    queue.sealTaskGroup(group)
    queue.cancelTaskGroup(group)
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    sign_in(page)
    page.wait_for_selector("#rerun-failed:not([disabled])", timeout=WAIT_MS)
    assert page.inner_text("#rerun-failed") == "Rerun failed (6)"
    asked = answer_dialog(page, lambda: page.click("#rerun-failed"), accept=True)
    said = "Rerun now: build-linux, lint. Once what they depend on has completed: summary, test-0, test-1, test-2."
    page.wait_for_selector(f"#group-feedback .message-ok:has-text('{said}')", timeout=WAIT_MS)
    assert "Now: build-linux, lint." in asked
    assert "none runs before): summary, test-0, test-1, test-2." in asked, asked  # the plan it carried out
    # The waiting tasks say what they wait for and are not failures to rerun again.
    page.wait_for_selector(
        f"tr[data-task-id='{tests[0]}'] .rerun-waits:has-text('reruns after build-linux')", timeout=WAIT_MS
    )
    assert "reruns after test-" in page.inner_text(f"tr[data-task-id='{summary}'] .rerun-waits")
    page.wait_for_selector("#rerun-failed:has-text('Rerun failed (0)')", timeout=WAIT_MS)
    assert "4 to rerun once what they depend on completes" in page.inner_text("#group-summary")
    shot(page, "group-rerun")
    page.goto(f"{host.root_url}/inspector/#/tasks/{tests[1]}")
    page.wait_for_selector("#task-blocked .message-info:has-text('Reruns after build-linux')", timeout=WAIT_MS)
    page.close()

    def state(task_id: str) -> str:
        return str(queue.status(task_id)["status"]["state"])

    assert [state(t) for t in (build, lint)] == ["pending", "pending"]
    assert [state(t) for t in [*tests, summary]] == ["exception"] * 4  # waiting, not running
    worker = {"tasks": 4, "workerGroup": "wg", "workerId": "w1"}
    claimed = {c["status"]["taskId"] for c in queue.claimWork(tq, worker)["tasks"]}
    assert claimed == {build, lint}  # nothing else to take
    queue.reportCompleted(lint, "1")
    queue.reportCompleted(build, "1")
    wait_for(lambda: all(state(t) == "pending" for t in tests), timeout=30)
    assert state(summary) == "exception"  # its tests have not completed
    completed_at = queue.status(build)["status"]["runs"][1]["resolved"]
    for test in tests:
        rerun = queue.status(test)["status"]["runs"][1]
        assert rerun["reasonCreated"] == "rerun" and rerun["scheduled"] >= completed_at
    got: set[str] = set()
    wait_for(
        lambda: got.update(c["status"]["taskId"] for c in queue.claimWork(tq, worker)["tasks"]) or got == set(tests),
        timeout=30,
    )
    for test in tests:
        queue.reportCompleted(test, "1")
    wait_for(lambda: state(summary) == "pending", timeout=30)


def test_a_task_that_passed_on_rerun_is_marked_not_hidden(host, page):
    """Issue #85: a rerun that passed hid the failure (the row read COMPLETED, 2 runs, and the group's counts lost it).
    Such a row says it passed on rerun, the group's sentence counts them, and that count filters the list to them."""
    queue = host.client()
    group, tq = slugid(), task_queue_id()
    flaky = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("test-flaky"))
    queue.reportFailed(flaky, "0")
    queue.rerunTask(flaky)
    wait_for(lambda: queue.claimWork(tq, {"tasks": 1, "workerGroup": "wg", "workerId": "w1"})["tasks"], timeout=15)
    queue.reportCompleted(flaky, "1")
    steady = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("test-steady"))
    queue.reportCompleted(steady, "0")
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    mark = page.locator(f"tr[data-task-id='{flaky}'] .passed-on-rerun")
    mark.wait_for(timeout=WAIT_MS)
    assert "passed on rerun (1 failed run before)" in mark.inner_text()
    assert page.locator(f"tr[data-task-id='{steady}'] .passed-on-rerun").count() == 0
    assert "1 passed only on rerun" in page.inner_text("#passed-on-rerun")
    page.click("#passed-on-rerun")
    page.wait_for_selector(f"tr[data-task-id='{steady}']", state="detached", timeout=WAIT_MS)
    assert page.locator("tbody tr").count() == 1


def test_a_task_blocked_through_blocked_tasks_names_the_failure_to_rerun(host, page):
    """Issue #85: a summary blocked through tests that a failed build blocks named a test as its blocker. The group
    row and the task page name the build, the failure to rerun, and the task it comes through."""
    queue = host.client()
    group, tq = slugid(), task_queue_id()
    build = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("build-linux"))
    queue.reportFailed(build, "0")
    test = slugid()
    queue.createTask(test, task_definition(taskQueueId=tq, taskGroupId=group, dependencies=[build], **named("test-1")))
    summary = slugid()
    queue.createTask(
        summary,
        task_definition(
            taskQueueId=tq, taskGroupId=group, dependencies=[test], requires="all-resolved", **named("summary")
        ),
    )
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    row = page.locator(f"tr[data-task-id='{summary}'] .blocked")
    row.wait_for(timeout=WAIT_MS)
    assert row.inner_text() == "blocked by build-linux through test-1"
    assert row.locator("a").first.get_attribute("href") == f"#/tasks/{build}"
    page.goto(f"{host.root_url}/inspector/#/tasks/{summary}")
    page.wait_for_selector("#root-blocker", timeout=WAIT_MS)
    said = page.inner_text("#task-blocked")
    assert "waits for test-1" in said and "build-linux (failed)" in said and "rerun what failed" in said, said
    assert page.get_attribute("#root-blocker", "href") == f"#/tasks/{build}"
    # Schedule, which would run it without what it waits for, asks first and says why: also when clicked before the
    # page, shown anew by signing in, has read what the task waits for (stop 91's CI clicked in that moment).
    held: list[Any] = []

    def hold(route: Any) -> None:
        if held and held[0] is None:
            route.continue_()  # let through
        else:
            held.append(route)

    page.route("**/api/queue/v1/tasks/status", hold)
    sign_in(page)
    page.wait_for_selector("#schedule-task:not([disabled])", timeout=WAIT_MS)
    assert page.evaluate("document.getElementById('task-blocked').dataset.key === undefined")
    page.evaluate("document.getElementById('schedule-task').click()")  # returns at once; the page asks later

    def let_the_reads_through() -> None:
        waiting = list(held)
        held[:] = [None]
        for route in waiting:
            route.continue_()

    asked = answer_dialog(page, let_the_reads_through, accept=False)
    assert "build-linux" in asked and "Schedule it anyway" in asked
    assert queue.status(summary)["status"]["state"] == "unscheduled"


def test_a_failure_says_how_its_retriggers_went(host, page):
    """Issue #85: a retrigger sat apart from its original. A failed row says how the other tasks of its name in the
    group went (retriggers: intermittent when they pass), a link that lists them together."""
    queue = host.client()
    group, tq = slugid(), task_queue_id()
    original = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("test-linux/opt-1"))
    queue.reportFailed(original, "0")
    passed = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("test-linux/opt-1"))
    queue.reportCompleted(passed, "0")
    failed = claimed_task(queue, taskQueueId=tq, taskGroupId=group, **named("test-linux/opt-1"))
    queue.reportFailed(failed, "0")
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    said = page.locator(f"tr[data-task-id='{original}'] .same-label")
    said.wait_for(timeout=WAIT_MS)
    assert said.inner_text() == "2 more with this name: 1 completed, 1 failed"
    said.locator("a").click()
    wait_js(page, "document.querySelectorAll('tbody tr').length === 3")
