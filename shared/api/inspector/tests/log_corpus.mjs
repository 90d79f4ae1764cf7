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
];
