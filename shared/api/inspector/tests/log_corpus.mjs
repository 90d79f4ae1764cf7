// Real-shaped failed logs of a Firefox-style CI (run-task's and mozharness's prefixes on every line, the noise green
// runs print too), each with the line "Why it failed" must pick first (issue #74). `noise(n, kind)` pads a log to
// the tens of thousands of lines real ones have.

const STAMP = "[task 2026-11-28T10:41:07.512Z] ";
const at = (level, text) => `${STAMP}10:41:07     ${level.padEnd(5)} - ${text}`;

/** @param {number} n @param {string} kind */
export function noise(n, kind) {
  const lines = [];
  for (let i = 0; i < n; i++) {
    if (kind === "build") {
      lines.push(i % 97 === 0
        ? `${STAMP}checking whether the C++ compiler supports -Wno-error=array-bounds... yes`
        : `${STAMP} 0:${String(i % 60).padStart(2, "0")}.${i % 100} Compiling gkrust-shared v0.1.0 (unit ${i})`);
    } else {
      lines.push(i % 53 === 0
        ? at("INFO", `GECKO(1234) | JavaScript error: resource://gre/modules/X.sys.mjs, line ${i}: TypeError: a is null`)
        : i % 71 === 0
          ? at("INFO", "GECKO(1234) | console.error: \"Failed to load resource\"")
          : at("INFO", `TEST-PASS | dom/tests/test_${i}.html | passed check ${i}`));
    }
  }
  return lines;
}

export const CORPUS = [
  {
    kind: "build (cargo)",
    lines: [
      `${STAMP}executing ['/builds/worker/checkouts/gecko/mach', 'build']`,
      ...noise(15400, "build"),
      `${STAMP} 4:12.07 error[E0308]: mismatched types`,
      `${STAMP} 4:12.07   --> servo/components/style/values/mod.rs:212:9`,
      `${STAMP} 4:12.07 make[4]: *** [backend.mk:12: gkrust] Error 101`,
      `${STAMP} 4:12.30 make: *** [client.mk:60: build] Error 2`,
      "[taskcluster 2026-11-28T10:45:19.823Z] === Task Finished ===",
      "[taskcluster 2026-11-28T10:45:19.823Z] Exit Code: 2",
    ],
    picks: "error[E0308]: mismatched types",
  },
  {
    kind: "mochitest",
    lines: [
      ...noise(20000, "test"),
      at("INFO", "TEST-START | dom/base/test/test_bug123.html"),
      at("INFO", "TEST-UNEXPECTED-FAIL | dom/base/test/test_bug123.html | the node is attached - got false, expected true"),
      at("INFO", "    SimpleTest.is@SimpleTest/SimpleTest.js:512:14"),
      ...noise(400, "test"),
      at("ERROR", "Return code: 1"),
      "[taskcluster 2026-11-28T11:02:44.101Z] Exit Code: 1",
    ],
    picks: "TEST-UNEXPECTED-FAIL | dom/base/test/test_bug123.html | the node is attached - got false, expected true",
  },
  {
    kind: "xpcshell",
    lines: [
      ...noise(3000, "test"),
      at("INFO", "TEST-START | netwerk/test/unit/test_http3.js"),
      at("WARNING", "TEST-UNEXPECTED-TIMEOUT | netwerk/test/unit/test_http3.js | Test timed out"),
      ...noise(200, "test"),
    ],
    picks: "TEST-UNEXPECTED-TIMEOUT | netwerk/test/unit/test_http3.js | Test timed out",
  },
  {
    kind: "wpt",
    lines: [
      ...noise(12000, "test"),
      at("INFO", "TEST-UNEXPECTED-FAIL | /css/css-grid/grid-auto-fill.html | subgrid rows - assert_equals: expected 3 but got 2"),
      ...noise(50, "test"),
    ],
    picks: "TEST-UNEXPECTED-FAIL | /css/css-grid/grid-auto-fill.html | subgrid rows - assert_equals: expected 3 but got 2",
  },
  {
    kind: "lint",
    lines: [
      `${STAMP}Running: ./mach lint -l eslint -f treeherder`,
      `${STAMP}TEST-UNEXPECTED-ERROR | browser/base/content/browser.js:1200:5 | 'gFoo' is not defined. (no-undef)`,
      `${STAMP}✖ 1 problem (1 error, 0 warnings)`,
    ],
    picks: "TEST-UNEXPECTED-ERROR | browser/base/content/browser.js:1200:5 | 'gFoo' is not defined. (no-undef)",
  },
  {
    kind: "a crash",
    lines: [
      ...noise(8000, "test"),
      at("INFO", "GECKO(1234) | Hit MOZ_CRASH(assertion) at dom/base/Element.cpp:88"),
      at("INFO", "PROCESS-CRASH | dom/base/test/test_crash.html | application crashed [@ mozilla::dom::Element::Foo]"),
      at("ERROR", "Return code: 245"),
    ],
    picks: "PROCESS-CRASH | dom/base/test/test_crash.html | application crashed [@ mozilla::dom::Element::Foo]",
  },
  {
    kind: "a mozharness error, nothing else marked",
    lines: [
      ...noise(500, "test"),
      at("ERROR", "Automation Error: mozprocess timed out after 1000 seconds running ['python', 'runtests.py']"),
    ],
    picks: "Automation Error: mozprocess timed out after 1000 seconds running ['python', 'runtests.py']",
  },
  // Firefox CI's shapes that the why got wrong or weak (issue #85): the worker's own markers, Python tracebacks.
  {
    kind: "maxRunTime exceeded (generic-worker)",
    lines: [
      ...noise(6000, "test"),
      at("INFO", "TEST-START | browser/components/foo/browser_bar.js"),
      at("INFO", "TEST-PASS | browser/components/foo/browser_bar.js | no exception thrown - "),
      "[taskcluster:error] Aborting task - max run time exceeded!",
      "[taskcluster 2026-11-28T11:41:07.000Z] === Task Finished ===",
      "[taskcluster 2026-11-28T11:41:07.000Z] Task Duration: 1h0m0.012s",
    ],
    picks: "[taskcluster:error] Aborting task - max run time exceeded!",
  },
  {
    kind: "task timeout (docker-worker)",
    lines: [
      ...noise(900, "build"),
      `${STAMP} 59:59.10 Compiling style v0.0.1 (servo/components/style), failed attempts: 0`,
      "[taskcluster:error] Task timeout after 3600 seconds. Force killing container.",
      "[taskcluster 2026-11-28T11:41:07.000Z] Unsuccessful task run with exit code: -1 completed in 3601.2 seconds",
    ],
    picks: "[taskcluster:error] Task timeout after 3600 seconds. Force killing container.",
  },
  {
    kind: "a Python traceback, a flag that says fatal before it",
    lines: [
      `${STAMP}executing ['/usr/bin/python3', '-m', 'sphinx', '--fatal-warnings', '-b', 'html', 'docs', 'out']`,
      `${STAMP}Running Sphinx v7.2.6`,
      ...Array.from({ length: 300 }, (_, i) => `${STAMP}reading sources... [${Math.floor(i / 3)}%] page_${i}`),
      `${STAMP}Traceback (most recent call last):`,
      `${STAMP}  File "/usr/lib/python3/dist-packages/sphinx/cmd/build.py", line 298, in build_main`,
      `${STAMP}    app = Sphinx(args.sourcedir, args.confdir, args.outputdir, warningiserror=True)`,
      `${STAMP}  File "/builds/worker/checkouts/gecko/tools/moztreedocs/__init__.py", line 52, in load_config`,
      `${STAMP}    with open(path) as fh:`,
      `${STAMP}         ^^^^^^^^^^`,
      `${STAMP}FileNotFoundError: [Errno 2] No such file or directory: 'sources/config.yml'`,
      "[taskcluster 2026-11-28T11:02:44.101Z] Exit Code: 1",
    ],
    picks: "FileNotFoundError: [Errno 2] No such file or directory: 'sources/config.yml'",
  },
  {
    kind: "a mozharness crash",
    lines: [
      ...noise(700, "test"),
      at("FATAL", "Uncaught exception: Traceback (most recent call last):"),
      at("FATAL", "  File \"/builds/worker/checkouts/gecko/testing/mozharness/mozharness/base/script.py\", line 2201, in run"),
      at("FATAL", "    self.run_action(action)"),
      at("FATAL", "  File \"/builds/worker/checkouts/gecko/testing/mozharness/mozharness/base/script.py\", line 2140, in run_action"),
      at("FATAL", "    self._possibly_run_method(method_name, error_if_missing=True)"),
      at("FATAL", "KeyError: 'MOZ_FETCHES_DIR'"),
      at("FATAL", "Running post_fatal callback..."),
      at("FATAL", "Exiting -1"),
    ],
    picks: "KeyError: 'MOZ_FETCHES_DIR'",
  },
  {
    kind: "a fetch that failed (fetch-content)",
    lines: [
      "[fetches 2026-11-28T10:41:07.512Z] fetching artifacts",
      "[fetches 2026-11-28T10:41:07.600Z] Downloading https://firefox-ci-tc.services.mozilla.com/api/queue/v1/task/X/artifacts/public/build/target.tar.zst",
      "Traceback (most recent call last):",
      "  File \"/builds/worker/bin/fetch-content\", line 944, in <module>",
      "    sys.exit(main())",
      "  File \"/usr/lib/python3.11/urllib/request.py\", line 643, in http_error_default",
      "    raise HTTPError(req.full_url, code, msg, hdrs, fp)",
      "urllib.error.HTTPError: HTTP Error 404: Not Found",
      "[task 2026-11-28T10:41:08.000Z] error: fetch-content failed",
      "[taskcluster 2026-11-28T10:41:08.101Z] Exit Code: 1",
    ],
    picks: "urllib.error.HTTPError: HTTP Error 404: Not Found",
  },
  {
    kind: "a Windows build (clang-cl)",
    lines: [
      ...noise(4000, "build"),
      `${STAMP} 31:02.11 z:/task_1/build/src/dom/base/Element.cpp(88,3): error: use of undeclared identifier 'foo'`,
      `${STAMP} 31:02.40 make[4]: *** [backend.mk:12: Unified_cpp_dom_base0.obj] Error 1`,
      `${STAMP} 31:02.90 make: *** [client.mk:60: build] Error 2`,
      "[taskcluster 2026-11-28T11:41:07.000Z] Exit Code: 2",
    ],
    picks: "z:/task_1/build/src/dom/base/Element.cpp(88,3): error: use of undeclared identifier 'foo'",
  },
];
