// Why a run failed, read from its log: the exit code the worker wrote and the lines that name the error, so that
// the task page says why beside what (issues #65, #74). The log is the convention every worker already follows:
//   - exit code: the reference worker's "exit code N after S s", generic-worker's "Exit Code: N", docker-worker's
//     "exit code: N" (the last such line counts: a task's own commands may print others before it);
//   - the prefixes harnesses put on every line are read past: run-task's "[task 2026-11-28T10:00:00.000Z] ",
//     the worker's "[taskcluster ...] ", mach's elapsed " 4:12.07 ", mozharness's "10:00:00     INFO - " (whose
//     level ERROR, CRITICAL or FATAL marks a line);
//   - marked lines first, as Treeherder's log parser reads them: TEST-UNEXPECTED-*, PROCESS-CRASH, a mozharness
//     ERROR/CRITICAL/FATAL line, rustc's `error[E0308]`, a compiler's `file:12:3: error:`, a line that starts
//     `error:` or `fatal error:`, `make: ***`, `##[error]` (GitHub Actions), `Assertion failure:`, the worker's
//     `[taskcluster:error]`, and the line a Python traceback ends with (`KeyError: 'x'`), its frames passed over;
//   - only when nothing is marked, the first lines that say error, fatal, failed, exception or Traceback as a word
//     (a word: not `--fatal-warnings`, `-Werror` or `error_log`);
//   - known noise never counts: a browser's `JavaScript error:`/`warning:` and `console.error` lines (green runs
//     print them too), configure's `checking ...` lines, a harness's TEST-PASS/TEST-OK/TEST-START lines,
//     summaries such as "0 failed" or "no exception".
// docs/inspector.md ("Why a run failed") states the convention for other workers.

const EXIT = /\bexit(?:ed with)? code:?\s*(-?\d+)\b/i;
const STAMP = /^\[[\w.-]+ \d{4}-\d\d-\d\d[T ][\d:.]+Z?\] ?/; // run-task's and the worker's "[task <time>] "
const LEVEL = /^\d\d:\d\d:\d\d\s+(INFO|WARNING|ERROR|CRITICAL|FATAL|DEBUG)\s+- ?/; // mozharness's
const ELAPSED = /^ *\d+:\d\d\.\d\d /; // mach's minutes:seconds since the build began
const SERIOUS = new Set(["ERROR", "CRITICAL", "FATAL"]);
const MARKED = [
  /^##\[error\]/,
  /^\[taskcluster:error\]/, // the worker's own: maxRunTime exceeded, a task that could not start, ...
  /\bTEST-UNEXPECTED-[A-Z]+\b/,
  /\bPROCESS-CRASH\b/,
  /\berror\[E\d+\]/,
  /^\S+:\d+(?::\d+)?:\s+(?:fatal )?error:/,
  /^\S+\(\d+(?:,\d+)?\):\s+(?:fatal )?error\b/, // MSVC's and clang-cl's `file.cpp(88,3): error`
  /^(?:fatal )?error(?:\[[\w-]+\])?:/i,
  /\bmake(?:\[\d+\])?: \*\*\*/,
  /\bAssertion failure:/,
];
// A word, not a piece of a flag or a name: `--fatal-warnings`, `-Werror`, `error_log`, `errors=0` say nothing.
const WORDY = /(?<![\w/=-])(?:error|errors|fatal|failed|failure|exception|traceback)(?![\w/=-])/i;
const NONE = /\b(?:0|no|without) (?:errors?|failed|failures?|exceptions?)\b/i; // "0 failed": a summary, not an error
const NOISE = [
  /\bJavaScript (?:error|warning):/,
  /\bconsole\.(?:error|warn)\b/,
  /^checking\b.*\.\.\./,
  /\bTEST-(?:PASS|OK|START|INFO|END|SKIP|KNOWN-FAIL|EXPECTED-FAIL|TODO)\b/, // a harness's green lines
];
const TRACEBACK = /\bTraceback \(most recent call last\):/; // Python's; the exception is its first unindented line
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;
export const ERROR_LINES = 3; // lines shown at most
export const READ_AT_MOST = 8 * 1024 * 1024; // bytes of log read whole for this (a longer one: its end only)

/** @typedef {{n: number | null, line: string}} Found */

/**
 * Reads a log as it arrives, a piece at a time, holding only what it found (a log of any length costs the same
 * memory): the last exit code, the first marked lines, the first wordy ones, and the line a Python traceback ends
 * with (marked: the frames above it are not errors of their own).
 */
export class Explainer {
  /**
   * @param {boolean} numbered whether line numbers are known (not when reading from the middle of a log)
   */
  constructor(numbered = true) {
    this.numbered = numbered;
    this.n = 0;
    this.rest = "";
    /** @type {string | null} */
    this.exitCode = null;
    /** @type {Found[]} */
    this.marked = [];
    /** @type {Found[]} */
    this.wordy = [];
    /** @type {Found | null} */
    this.traceback = null; // the header of a traceback whose exception line is still to come
  }

  /**
   * @param {string} text the next piece of the log
   */
  feed(text) {
    const lines = (this.rest + text).split("\n");
    this.rest = /** @type {string} */ (lines.pop());
    for (const line of lines) this.line(line);
  }

  /**
   * @returns {{exitCode: string | null, errors: Found[]}}
   */
  end() {
    if (this.rest) this.line(this.rest);
    this.rest = "";
    if (this.traceback) this.keep("marked", this.traceback); // a traceback cut off before its exception line
    this.traceback = null;
    return { exitCode: this.exitCode, errors: this.marked.length ? this.marked : this.wordy };
  }

  /**
   * @param {string} raw
   */
  line(raw) {
    this.n += 1;
    const line = raw.replace(/\r$/, "").replace(ANSI, "");
    const exit = EXIT.exec(line);
    if (exit) {
      this.exitCode = exit[1];
      return; // the worker's own line, not an error of the task's
    }
    const found = { n: this.numbered ? this.n : null, line: readable(line) };
    if (this.traceback) {
      const { text } = unprefixed(line);
      if (!text.trim() || /^\s/.test(text)) return; // its frames and their source lines
      this.traceback = null;
      if (!TRACEBACK.test(text)) {
        this.keep("marked", found); // `KeyError: 'MOZ_FETCHES_DIR'`: what the traceback says went wrong
        return;
      }
    }
    if (TRACEBACK.test(line)) {
      this.traceback = found;
      return;
    }
    const kind = errorKind(line);
    if (kind) this.keep(kind, found);
  }

  /**
   * @param {"marked" | "wordy"} kind
   * @param {Found} found
   */
  keep(kind, found) {
    const kept = kind === "marked" ? this.marked : this.wordy;
    if (kept.length < ERROR_LINES) kept.push(found);
  }
}

/**
 * @param {string} text a whole log
 * @returns {{exitCode: string | null, errors: Found[]}}
 */
export function explain(text) {
  const explainer = new Explainer();
  explainer.feed(text);
  return explainer.end();
}

/**
 * The line without the prefixes harnesses put on every line, its own indentation kept, and mozharness's level.
 * @param {string} line
 */
function unprefixed(line) {
  const text = line.replace(STAMP, "").replace(ELAPSED, "");
  const level = LEVEL.exec(text);
  return level ? { text: text.slice(level[0].length), level: level[1] } : { text, level: null };
}

/**
 * The line as its harness wrote it, without the prefixes put on every line.
 * @param {string} line
 */
export function readable(line) {
  return unprefixed(line.trim()).text.trim();
}

/**
 * Whether a line (ANSI colours removed) names an error: "marked" (the harness or the task marks it so), "wordy"
 * (it says error, failed, ... as a word), or null; the worker's exit code line and known noise are not. The log
 * viewer marks the sections that hold such lines, and keeps them open.
 * @param {string} line
 * @returns {"marked" | "wordy" | null}
 */
export function errorKind(line) {
  const { text: unmarked, level } = unprefixed(line.trim());
  const text = unmarked.trim();
  if (!text || EXIT.test(text)) return null;
  if (NOISE.some((noise) => noise.test(text))) return null;
  if (MARKED.some((mark) => mark.test(text)) || (level && SERIOUS.has(level))) return "marked";
  return WORDY.test(text) && !NONE.test(text) ? "wordy" : null;
}

// What an exception's reason means, for the task page's "why" (Taskcluster's reasons).
/** @type {Record<string, string>} */
export const REASONS = {
  "malformed-payload": "the worker could not run the task's payload as written",
  "deadline-exceeded": "the task's deadline passed before it was resolved",
  "claim-expired": "its worker stopped reclaiming it (gone, or cut off)",
  "worker-shutdown": "its worker shut down while running it",
  "resource-unavailable": "the worker lacked something the task needed",
  "internal-error": "the worker failed on its own",
  canceled: "it was cancelled",
  superseded: "a later task made it unneeded",
  "intermittent-task": "the task reported itself as intermittent",
};

export const LOG_TYPES = /^text\//;
// Artifacts whose data is in the deployment's own storage. A `reference` (or a `link` to one) points anywhere: a
// page that read it by itself would make every viewer's browser send a request there (internal addresses too).
export const STORED_HERE = new Set(["s3", "object", "azure"]);

/**
 * The run's log among its artifacts: a text artifact (not an error artifact): Taskcluster's workers'
 * `public/logs/live.log`, then `live_backing.log`, then another under public/logs/, then any.
 * @param {Array<{name: string, contentType: string, storageType: string}>} artifacts
 * @returns {string | null}
 */
export function logOf(artifacts) {
  const logged = artifacts.filter((a) => LOG_TYPES.test(a.contentType) && a.storageType !== "error");
  const named = logged.find((a) => a.name === "public/logs/live.log")
    || logged.find((a) => a.name === "public/logs/live_backing.log")
    || logged.find((a) => a.name.startsWith("public/logs/")) || logged[0];
  return named ? named.name : null;
}

/**
 * The run artifact of this queue a `reference` names, when its URL is this deployment's getArtifact address
 * (Firefox CI's workers make `public/logs/live.log` such a reference to `live_backing.log` once a run ends);
 * null for any other URL, which the page never reads by itself.
 * @param {string} url
 * @param {string} rootUrl
 * @returns {{taskId: string, runId: number, name: string} | null}
 */
export function queueArtifactOf(url, rootUrl) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  const root = new URL(rootUrl);
  const prefix = `${root.pathname.replace(/\/$/, "")}/api/queue/v1/task/`;
  if (parsed.origin !== root.origin || !parsed.pathname.startsWith(prefix) || parsed.search || parsed.hash) return null;
  const found = /^([A-Za-z0-9_-]{22})\/runs\/(\d{1,3})\/artifacts\/(.+)$/.exec(parsed.pathname.slice(prefix.length));
  if (!found) return null;
  try {
    return { taskId: found[1], runId: Number(found[2]), name: decodeURIComponent(found[3]) };
  } catch {
    return null;
  }
}

/**
 * The logs of a run the page may read by itself to say why it failed, in the order it tries them: the run's log
 * (logOf), then the other text logs stored here under `public/logs/` (Firefox CI's `live_backing.log` beside a
 * `live.log` reference), their names.
 * @param {Array<{name: string, contentType: string, storageType: string}>} artifacts
 * @returns {{first: {name: string, storageType: string} | null, stored: string[]}}
 */
export function logCandidates(artifacts) {
  const name = logOf(artifacts);
  const first = artifacts.find((a) => a.name === name) || null;
  const stored = artifacts.filter((a) => LOG_TYPES.test(a.contentType) && STORED_HERE.has(a.storageType)
    && a.name.startsWith("public/logs/") && a.name !== name).map((a) => a.name);
  return { first: first && { name: first.name, storageType: first.storageType }, stored };
}

