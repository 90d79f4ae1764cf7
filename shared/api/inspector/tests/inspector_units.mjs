// Unit tests of the inspector's logic that needs no page (node's own test runner; run by
// tests/habits/test_inspector_js.py): ANSI parsing, the log model's lines, sections and search, and addresses.
import assert from "node:assert/strict";
import test from "node:test";

import { parseLine, PLAIN } from "../app/ansi.js";
import { understand, routeOf } from "../app/addresses.js";
import { GroupModel, PASSED_ON_RERUN, passedOnRerun } from "../app/groupmodel.js";
import { layers } from "../app/graph.js";
import { LogModel, MAX_MATCHES } from "../app/logmodel.js";
import { commandLines, quote } from "../app/payload.js";
import { names, rerunPlan } from "../app/rerunplan.js";
import { byName, countsText, filterPushes, pushesOf, pushIndexPath, worstState }
  from "../app/pushes.js";
import { explain, Explainer, ERROR_LINES, errorKind, logCandidates, logOf, queueArtifactOf } from "../app/why.js";
import { CORPUS } from "./log_corpus.mjs";

const T = "fXT_wy4DQQK7ILZI-NzfJw";
const G = "Ed2CLmzBTXyhJDQhSkt7Cg";
const REV = "4f1c2a9d8e7b6c5a4f1c2a9d8e7b6c5a4f1c2a9d";
const texts = (line) => parseLine(line).segments.map((s) => [s.text, s.style]);

test("SGR colours and styles become styles; other escapes are removed", () => {
  assert.deepEqual(texts("\x1b[1;31merror\x1b[0m: x"), [["error", { bold: true, fg: 1 }], [": x", PLAIN]]);
  assert.deepEqual(texts("\x1b[38;5;208ma\x1b[48;2;1;2;3mb\x1b[39;49m c"),
    [["a", { fg: "rgb(255,135,0)" }], ["b", { fg: "rgb(255,135,0)", bg: "rgb(1,2,3)" }], [" c", PLAIN]]);
  assert.deepEqual(texts("a\x1b[2K\x1b[1Gb\x1b]0;title\x07c\x1b]8;;http://x\x1b\\d\x1b"), [["a", PLAIN], ["b", PLAIN],
    ["c", PLAIN], ["d", PLAIN]]);
  assert.deepEqual(texts("\x1b[92mbright\x1b[22;2mdim"), [["bright", { fg: 10 }], ["dim", { fg: 10, dim: true }]]);
});

test("a style carries to the next line, and a carriage return keeps the last frame", () => {
  const first = parseLine("\x1b[32mgreen starts");
  assert.deepEqual(first.style, { fg: 2 });
  assert.deepEqual(parseLine("still green", first.style).segments, [{ text: "still green", style: { fg: 2 } }]);
  assert.deepEqual(texts("10%\r50%\r100%"), [["100%", PLAIN]]);
  assert.deepEqual(texts("bell\x07 and nul\x00 removed\ttab kept"), [["bell and nul removed\ttab kept", PLAIN]]);
});

test("the log model holds complete lines, the growing one apart, and both kinds of sections", () => {
  const log = new LogModel();
  assert.equal(log.append("one\r\n::group::Build\nstep\n::endgroup::\nsection_start:1:tests\r\x1b[0KRun tests\n"), 0);
  assert.equal(log.append("in\nsection_end:2:tests\r\x1b[0K\npart"), 5);
  assert.deepEqual(log.plain, ["one", "Build", "step", "::endgroup::", "Run tests", "in", ""]);
  assert.equal(log.length, 8);
  assert.equal(log.pendingLine().plain, "part");
  assert.deepEqual(log.sections.map((s) => [s.title, s.start, s.end]), [["Build", 1, 3], ["Run tests", 4, 6]]);
  assert.equal(log.headerOf(1), 0);
  assert.equal(log.headerOf(2), null);
  assert.ok(log.hidden(2, new Set([0])) && !log.hidden(1, new Set([0])) && !log.hidden(5, new Set([0])));
  log.append("ial\n");
  assert.deepEqual(log.plain.at(-1), "partial");
});

test("a section that holds an error line, at any depth, is flagged once, its header to redraw", () => {
  const log = new LogModel();
  log.append("::group::Outer\n::group::Inner\nall 12 passed, 0 failed\n::endgroup::\n::endgroup::\n");
  assert.deepEqual(log.sections.map((s) => s.hasError), [false, false]); // "0 failed" is a summary
  log.append("::group::Build\n::group::Compile\nok\nerror: linker failed\nerror: again\n::endgroup::\n::endgroup::\n");
  assert.deepEqual(log.sections.map((s) => [s.title, s.hasError]),
    [["Outer", false], ["Inner", false], ["Build", true], ["Compile", true]]);
  assert.deepEqual(log.flagged, [3, 2]); // the innermost first, each once
  log.append("::group::Notes\nexit code 1 after 3 s\n::endgroup::\n"); // the worker's exit line is not an error
  assert.equal(log.sections[4].hasError, false);
});

test("search finds every match case-insensitively, at most MAX_MATCHES", () => {
  const log = new LogModel();
  log.append("Error here\nno\nerror and ERROR\n");
  assert.deepEqual(log.search("error"), [{ line: 0, start: 0, end: 5 }, { line: 2, start: 0, end: 5 },
    { line: 2, start: 10, end: 15 }]);
  const big = new LogModel();
  big.append("x\n".repeat(MAX_MATCHES + 50));
  assert.equal(big.search("x").length, MAX_MATCHES);
});

test("Taskcluster's UI addresses and pasted URLs become the inspector's routes", () => {
  assert.equal(routeOf(`/tasks/${T}`), `/tasks/${T}`);
  assert.equal(routeOf(`/tasks/groups/${G}`), `/groups/${G}`);
  assert.equal(routeOf(`/tasks/${T}/runs/2/logs/live/public/logs/live.log`), `/tasks/${T}/runs/2/logs/public%2Flogs%2Flive.log`);
  assert.equal(routeOf(`/tasks/${T}/runs/0/logs/${encodeURIComponent(`https://tc/api/queue/v1/task/${T}/runs/0/artifacts/public/x.log`)}`),
    `/tasks/${T}/runs/0/logs/public%2Fx.log`);
  assert.deepEqual(routeOf(`/tasks/${T}/runs/0/public/build/a.zip`), { artifact: { taskId: T, runId: "0", name: "public/build/a.zip" } });
  assert.equal(routeOf("/provisioners/p/worker-types/t/workers/wg/w"), "/workers/p/t/wg/w");
  assert.equal(routeOf("/worker-manager/p%2Ft"), "/queues/p/t");
  assert.equal(routeOf("/task-group-inspector/", `#/${G}/${T}`), `/tasks/${T}`);
  assert.equal(routeOf("/tasks/not-a-slug"), "/");
  assert.deepEqual(understand(T), { slug: T });
  assert.deepEqual(understand(" p/t "), { queueOrLabel: "p/t" }); // or a label: `build-linux64/opt`
  assert.deepEqual(understand("a.b.c"), { indexPath: "a.b.c" });
  assert.deepEqual(understand(`https://tc.example.com/prefix/tasks/${T}/runs/0`), { route: `/tasks/${T}` });
  assert.deepEqual(understand(`https://treeherder.mozilla.org/jobs?selectedTaskRun=${T}-1`), { route: `/tasks/${T}` });
  assert.deepEqual(understand(`https://treeherder.mozilla.org/jobs?repo=try&selectedTaskRun=${T}.0`), { route: `/tasks/${T}` });
  assert.deepEqual(understand("index.gecko.v2.try.latest.build"), { indexPath: "gecko.v2.try.latest.build" });
  assert.deepEqual(understand("index."), { label: "index." });
  assert.ok(understand("https://example.com/").error.includes("not an address"));
  assert.deepEqual(understand("test-linux1804-64-qr/opt-mochitest-browser-chrome-1"),
    { queueOrLabel: "test-linux1804-64-qr/opt-mochitest-browser-chrome-1" });
  assert.deepEqual(understand("Gecko Decision Task"), { label: "Gecko Decision Task" });
  assert.deepEqual(understand(REV), { revision: REV });
  assert.deepEqual(understand(REV.slice(0, 12)), { revision: REV.slice(0, 12) });
  assert.deepEqual(understand(`https://treeherder.mozilla.org/jobs?repo=autoland&revision=${REV}`),
    { push: { project: "autoland", revision: REV } });
  assert.deepEqual(understand(`https://treeherder.mozilla.org/#/jobs?repo=try&revision=${REV}`),
    { push: { project: "try", revision: REV } });
  assert.deepEqual(understand(`https://treeherder.mozilla.org/push-health/push?repo=try&revision=${REV}`),
    { push: { project: "try", revision: REV } });
  // A pasted log URL keeps its line.
  assert.deepEqual(understand(`https://tc.example.com/tasks/${T}/runs/0/logs/public/logs/live.log#L12`),
    { route: `/tasks/${T}/runs/0/logs/public%2Flogs%2Flive.log#L12` });
  assert.deepEqual(understand(`https://tc.example.com/tasks/${T}/runs/0/logs/public/logs/live.log#L3-L9`),
    { route: `/tasks/${T}/runs/0/logs/public%2Flogs%2Flive.log#L3-L9` });
});

function entry(id, state, { deps = [], requires = "all-completed", name = id, queue = "p/t", scheduled, resolved } = {}) {
  const runs = state === "unscheduled" ? [] : [{ runId: 0, state, scheduled: scheduled || "2026-01-01T00:00:00.000Z",
    started: state === "pending" ? undefined : "2026-01-01T00:01:00.000Z", resolved,
    reasonResolved: state === "exception" ? "deadline-exceeded" : state === "failed" ? "failed" : undefined }];
  return { task: { metadata: { name }, dependencies: deps, requires },
    status: { taskId: id, state, runs, taskQueueId: queue, deadline: "2026-01-02T00:00:00.000Z" } };
}

test("the group model sorts failures first and says why a task waits", () => {
  const g = new GroupModel();
  g.put([entry("a", "completed", { name: "build" }), entry("b", "failed", { name: "test-3" }),
    entry("c", "unscheduled", { deps: ["b"], name: "sign" }), entry("d", "unscheduled", { deps: ["c"], name: "upload" }),
    entry("e", "running", { name: "lint" }), entry("f", "unscheduled", { deps: ["e", "x"], name: "report" }),
    entry("g", "unscheduled", { deps: ["b"], requires: "all-resolved", name: "notify" })]);
  assert.deepEqual(g.sorted().map((t) => t.status.taskId), ["b", "e", "g", "f", "c", "d", "a"]);
  assert.deepEqual(g.sorted("unscheduled", "SIG").map((t) => t.status.taskId), ["c"]);
  assert.deepEqual(g.why(g.tasks.get("c")).failed.map((t) => t.status.taskId), ["b"]);
  assert.deepEqual(g.why(g.tasks.get("d")).failed.map((t) => t.status.taskId), ["c"]); // blocked through c
  const f = g.why(g.tasks.get("f"));
  assert.deepEqual([f.failed.length, f.waiting.map((t) => t.status.taskId), f.outside], [0, ["e"], 1]);
  assert.ok(!g.blocked(g.tasks.get("g"))); // all-resolved: a failure does not block it
  assert.equal(g.summary().kind, "running");
  assert.deepEqual(g.setStatuses([{ taskId: "e", status: entry("e", "completed").status },
    { taskId: "a", status: entry("a", "completed").status }]), ["e"]);
});

test("a group is stuck when every unresolved task is blocked by a failure, finished when all are resolved", () => {
  const g = new GroupModel();
  g.put([entry("b", "failed"), entry("c", "unscheduled", { deps: ["b"] }), entry("d", "unscheduled", { deps: ["c"] })]);
  const stuck = g.summary();
  assert.equal(stuck.kind, "stuck");
  assert.equal(stuck.blocked, 2);
  const w = new GroupModel();
  w.put([entry("c", "unscheduled", { deps: ["outside"] })]);
  assert.equal(w.summary().kind, "waiting");
  const done = new GroupModel();
  done.put([entry("a", "completed", { resolved: "2026-01-01T00:05:00.000Z" }),
    entry("b", "exception", { resolved: "2026-01-01T00:06:00.000Z" })]);
  assert.deepEqual([done.summary().kind, done.summary().at], ["finished", "2026-01-01T00:06:00.000Z"]);
  const idle = new GroupModel();
  idle.put([entry("p1", "pending", { queue: "p/idle", scheduled: "2026-01-01T00:00:05.000Z" }),
    entry("p2", "pending", { queue: "p/idle" }), entry("p3", "pending", { queue: "p/busy" }),
    entry("r1", "running", { queue: "p/busy" })]);
  assert.deepEqual(idle.idleQueues(), [{ taskQueueId: "p/idle", pending: 2, since: "2026-01-01T00:00:00.000Z" }]);
});

test("the graph puts each task one layer below the deepest of its dependencies in the group", () => {
  const g = new GroupModel();
  g.put([entry("a", "completed"), entry("b", "completed", { deps: ["a"] }), entry("c", "pending", { deps: ["a", "b"] }),
    entry("d", "pending", { deps: ["outside"] }), entry("e", "unscheduled", { deps: ["e", "c"] })]);
  const { layerOf, layers: bands } = layers(g.tasks);
  assert.deepEqual(Object.fromEntries(layerOf), { a: 0, b: 1, c: 2, d: 0, e: 3 });
  assert.deepEqual(bands.map((band) => band.map((t) => t.status.taskId).sort()), [["a", "d"], ["b"], ["c"], ["e"]]);
});

test("a failed run's log explains itself: the worker's exit code and the first error lines", () => {
  const log = ["[taskcluster] starting", "compiling 12 files", "\x1b[31merror: cannot find symbol Foo\x1b[0m",
    "  at Bar.java:3", "Ran 10 tests, 0 failed", "FAILED (errors=1)", "exit code 2 after 3.1 s"].join("\n");
  // A line that starts "error:" is marked: it comes alone, before lines that only say "failed".
  assert.deepEqual(explain(log), { exitCode: "2", errors: [{ n: 3, line: "error: cannot find symbol Foo" }] });
  assert.deepEqual(explain("compiling\nFAILED (errors=1)\nexit code 1").errors, [{ n: 2, line: "FAILED (errors=1)" }]);
  // generic-worker's and docker-worker's own lines; the last exit code counts.
  assert.equal(explain("exit code: 1\n[taskcluster 2026-01-01] Exit Code: 137").exitCode, "137");
  // Lines a task marks as errors come first, whatever else says "error" before them.
  const marked = explain("error handling is on\nTEST-UNEXPECTED-FAIL | test_a.py | boom\n##[error]lint: 3 problems");
  assert.deepEqual(marked.errors.map((e) => e.n), [2, 3]);
  const many = explain(Array.from({ length: 10 }, (_, i) => `error ${i}`).join("\n"));
  assert.equal(many.errors.length, ERROR_LINES);
  assert.deepEqual(explain("all good\nexited with code 0"), { exitCode: "0", errors: [] });
});


test("a payload's command reads as shell lines: one argv, or generic-worker's list of them", () => {
  assert.deepEqual(commandLines(["/bin/bash", "-c", "echo 'hi' && make -j4"]),
    ["/bin/bash -c 'echo '\\''hi'\\'' && make -j4'"]);
  assert.deepEqual(commandLines([["./mach", "build"], ["ls", "-l", "dist dir"]]), ["./mach build", "ls -l 'dist dir'"]);
  assert.deepEqual(commandLines(undefined), []);
  assert.equal(quote("a=b,c/d:e"), "a=b,c/d:e");
});

test("the page reads a log by itself only when it is stored here, or a reference names this queue's artifact", () => {
  const log = (storageType, name = "public/logs/live.log") => ({ name, contentType: "text/plain", storageType });
  for (const stored of ["s3", "object", "azure", "reference"]) {
    assert.deepEqual(logCandidates([log(stored)]), { first: { name: "public/logs/live.log", storageType: stored }, stored: [] });
  }
  // Firefox CI's layout: live.log a reference, live_backing.log stored (gzip-encoded), mozharness's logs beside.
  const firefox = [log("s3", "public/logs/log_error.log"), log("reference"), log("s3", "public/logs/live_backing.log"),
    { name: "public/logs/localconfig.json", contentType: "application/json", storageType: "s3" },
    log("s3", "public/build/out.txt")];
  assert.equal(logOf(firefox), "public/logs/live.log"); // what View log opens, as Taskcluster's UI does
  assert.deepEqual(logCandidates(firefox).stored, ["public/logs/log_error.log", "public/logs/live_backing.log"]);
  assert.equal(logOf(firefox.filter((a) => a.name !== "public/logs/live.log")), "public/logs/live_backing.log");
  // A reference is followed only to this queue's own getArtifact address: never another host, port or path.
  const root = "https://tc.example.com";
  const here = `${root}/api/queue/v1/task/abcdefghijklmnopqrstuv/runs/2/artifacts/public%2Flogs%2Flive_backing.log`;
  assert.deepEqual(queueArtifactOf(here, root),
    { taskId: "abcdefghijklmnopqrstuv", runId: 2, name: "public/logs/live_backing.log" });
  assert.deepEqual(queueArtifactOf(here.replace("%2F", "/").replace("%2F", "/"), root)?.name,
    "public/logs/live_backing.log");
  for (const elsewhere of [here.replace("tc.example.com", "tc.example.com.evil.net"), here.replace("https:", "http:"),
    here.replace(".com/", ".com:8443/"), here.replace("/api/queue/", "/api/other/"), `${here}?x=1`,
    "https://worker.example.com:60023/log/abc", "not a url", `${root}/api/queue/v1/task/short/runs/0/artifacts/x`]) {
    assert.equal(queueArtifactOf(elsewhere, root), null, elsewhere);
  }
  assert.equal(queueArtifactOf(here, `${root}/`)?.runId, 2);
});

test("why it failed picks the line a CI engineer would, in real-shaped logs of tens of thousands of lines", () => {
  for (const { kind, lines, picks } of CORPUS) {
    const found = explain(lines.join("\n"));
    assert.equal(found.errors[0]?.line, picks, kind);
    assert.equal(found.errors[0].n, lines.findIndex((line) => line.includes(picks)) + 1, kind);
  }
  // The prefixes are read past, the noise green runs print never counts, and a mozharness ERROR line is marked.
  assert.equal(errorKind("[task 2026-11-28T10:41:07.512Z] 10:41:07     INFO - GECKO(1) | JavaScript error: x"), null);
  assert.equal(errorKind("checking whether the C compiler supports -Wno-error=foo... yes"), null);
  assert.equal(errorKind("10:41:07    ERROR - Return code: 1"), "marked");
  assert.equal(errorKind("src/main.c:12:3: error: expected ';'"), "marked");
  // Words, not pieces of flags or names; a harness's green lines never count.
  for (const quiet of ["python3 -m sphinx --fatal-warnings -b html", "gcc -Werror -Wno-error=foo x.c", "error_log=/x",
    "run with errors=0", "TEST-PASS | test_a.js | no exception thrown", "TEST-OK | test_b.js | took 12ms",
    "ran 12 tests without errors"]) {
    assert.equal(errorKind(quiet), null, quiet);
  }
  assert.equal(errorKind("[taskcluster:error] Aborting task - max run time exceeded!"), "marked");
  assert.equal(errorKind("the build failed."), "wordy");
});

test("a log read a piece at a time is explained as the whole, and holds only what it found", () => {
  let seed = 7;
  const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  for (const { kind, lines } of CORPUS) {
    const text = `${lines.join("\r\n")}\r\n`;
    const explainer = new Explainer();
    for (let at = 0; at < text.length;) {
      const piece = 1 + Math.floor(random() * 5000);
      explainer.feed(text.slice(at, at + piece));
      at += piece;
      assert.ok(explainer.rest.length < 5000 + 400, kind); // a piece and the line it cuts, never the log
    }
    assert.deepEqual(explainer.end(), explain(text), kind);
  }
  // From the middle of a log: no line numbers; a traceback cut off at the end still says where it began.
  const tail = new Explainer(false);
  tail.feed("x\nTraceback (most recent call last):\n  File \"a.py\", line 1\n");
  assert.deepEqual(tail.end().errors, [{ n: null, line: "Traceback (most recent call last):" }]);
});

test("a push's row: its worst state, its counts in words, the filter, a revision found", () => {
  const counts = (c) => ({ unresolved: 0, failed: 0, exception: 0, rerunWaiting: 0, atLeast: false, ...c });
  const red = { taskGroupId: G, unresolved: true, project: "autoland", revision: REV,
    decisionTask: { taskId: G, name: "Gecko Decision Task", owner: "dev@example.com", source: "" },
    counts: counts({ unresolved: 12, failed: 4, exception: 1 }) };
  const green = { taskGroupId: T, unresolved: false, project: "try", revision: "aa".repeat(20), counts: counts({}) };
  assert.equal(worstState(red), "failed");
  assert.equal(worstState({ ...red, counts: counts({ exception: 2, unresolved: 1 }) }), "exception");
  assert.equal(worstState({ ...red, counts: counts({ unresolved: 1 }) }), "running");
  assert.equal(worstState(green), "completed");
  assert.equal(countsText(red), "running · 12 unfinished · 4 failed · 1 exception");
  assert.equal(countsText(green), "finished · all completed");
  assert.equal(countsText({ ...green, counts: counts({ exception: 1000, atLeast: true }) }), "finished · 1,000+ exception");
  assert.deepEqual(filterPushes([red, green], "AUTOLAND dev@"), [red]);
  assert.deepEqual(filterPushes([red, green], "  "), [red, green]);
  assert.deepEqual(pushesOf([red, green], REV.slice(0, 12)), [red]);
  assert.deepEqual(pushesOf([red, green], REV, "try"), []);
  assert.equal(pushIndexPath("gecko.v2.{project}.revision.{revision}.taskgraph.decision", "try", REV),
    `gecko.v2.try.revision.${REV}.taskgraph.decision`);
  assert.equal(pushIndexPath("gecko.v2.{project}.revision.{revision}.taskgraph.decision", "", REV), null);
  assert.equal(pushIndexPath("", "try", REV), null);
});

test("names sort as people read them", () => {
  assert.deepEqual(["test-10", "test-2", "test-1", "test-11"].sort(byName), ["test-1", "test-2", "test-10", "test-11"]);
});

test("Rerun failed's plan: a dependency rerun in the batch is unmet, for all-resolved too; dependencies first", () => {
  const task = (id, state, dependencies = [], requires = "all-completed") => ({
    task: { metadata: { name: id }, dependencies, requires }, status: { taskId: id, state } });
  const build = task("build", "failed");
  const tests = [1, 2].map((i) => task(`test-${i}`, "exception", ["build"]));
  const summary = task("summary", "exception", ["test-1", "test-2"], "all-resolved");
  const lint = task("lint", "failed", ["decision"]);
  const known = new Map([build, ...tests, summary, lint, task("decision", "completed")]
    .map((e) => [e.status.taskId, e]));
  const plan = rerunPlan([summary, ...tests, lint, build], known, new Map());
  assert.deepEqual(plan.now.map((t) => t.status.taskId), ["lint", "build"]);
  assert.deepEqual(plan.later.map((t) => t.status.taskId), ["test-1", "test-2", "summary"]); // its tests first
  // The summary alone, its tests resolved (all-resolved): now; one of them already waiting to rerun: later.
  assert.deepEqual(rerunPlan([summary], known, new Map()).now, [summary]);
  assert.deepEqual(rerunPlan([summary], known, new Map([["test-1", ["build"]]])).later, [summary]);
  assert.equal(names([...tests, summary]), "summary, test-1, test-2");
});

test("a task that completed after a failed run is marked, and filtered, as passed on rerun", () => {
  const make = (id, state, runs) => ({ task: { metadata: { name: id }, dependencies: [] },
    status: { taskId: id, state, runs: runs.map((r, runId) => ({ runId, state: r })) } });
  const flaky = make("flaky", "completed", ["failed", "completed"]);
  const retried = make("retried", "completed", ["exception", "completed"]); // the queue's own retry
  const green = make("green", "completed", ["completed"]);
  const red = make("red", "failed", ["failed", "failed"]);
  assert.deepEqual([flaky, retried, green, red].map(passedOnRerun), [true, false, false, false]);
  const model = new GroupModel();
  model.put([flaky, retried, green, red]);
  assert.deepEqual(model.passedOnRerun().map((e) => e.status.taskId), ["flaky"]);
  assert.deepEqual(model.sorted(PASSED_ON_RERUN).map((e) => e.status.taskId), ["flaky"]);
  assert.equal(model.counts().completed, 3); // still completed: the mark is beside its state, not instead
});


test("a task blocked through blocked tasks names the failure at the root, each once", () => {
  const make = (id, state, dependencies = [], requires = "all-completed") => ({
    task: { metadata: { name: id }, dependencies, requires }, status: { taskId: id, state, runs: [] } });
  const build = make("build", "failed");
  const lint = make("lint", "completed");
  const tests = [0, 1, 2].map((i) => make(`test-${i}`, "unscheduled", ["build", "lint"]));
  const summary = make("summary", "unscheduled", tests.map((t) => t.status.taskId), "all-resolved");
  const model = new GroupModel();
  model.put([build, lint, ...tests, summary]);
  assert.deepEqual(model.why(summary).failed.map((e) => e.status.taskId), ["test-0", "test-1", "test-2"]);
  assert.deepEqual(model.roots(summary).map((e) => e.status.taskId), ["build"]);
  assert.deepEqual(model.roots(tests[0]).map((e) => e.status.taskId), ["build"]);
  // all-resolved: a failed dependency is resolved, it blocks nothing.
  const after = make("after", "unscheduled", ["build"], "all-resolved");
  model.put([after]);
  assert.deepEqual(model.roots(after), []);
});

test("tasks of the same name in a group are found beside each other (retriggers)", () => {
  const make = (id, name, state) => ({ task: { metadata: { name }, dependencies: [] },
    status: { taskId: id, state, runs: [] } });
  const model = new GroupModel();
  const first = make("a", "test-linux/opt-1", "failed");
  model.put([first, make("b", "test-linux/opt-1", "completed"), make("c", "test-linux/opt-10", "failed")]);
  assert.deepEqual(model.sameName(first).map((e) => e.status.taskId), ["b"]);
  model.put([make("d", "test-linux/opt-1", "running")]); // a retrigger joins: found at once
  assert.deepEqual(model.sameName(first).map((e) => e.status.taskId), ["b", "d"]);
  assert.deepEqual(model.sameName(make("e", "", "failed")), []);
});
