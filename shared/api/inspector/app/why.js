// Why a run failed, read from its log: the exit code the worker wrote and the lines that name the error, so that
// the task page says why beside what (issues #65, #74). The log is the convention every worker already follows:
//   - exit code: the reference worker's "exit code N after S s", generic-worker's "Exit Code: N", docker-worker's
//     "exit code: N" (the last such line counts: a task's own commands may print others before it);
//   - the prefixes harnesses put on every line are read past: run-task's "[task 2026-11-28T10:00:00.000Z] ",
//     the worker's "[taskcluster ...] ", mach's elapsed " 4:12.07 ", mozharness's "10:00:00     INFO - " (whose
//     level ERROR, CRITICAL or FATAL marks a line);
//   - marked lines first, as Treeherder's log parser reads them: TEST-UNEXPECTED-*, PROCESS-CRASH, a mozharness
//     ERROR/CRITICAL/FATAL line, rustc's `error[E0308]`, a compiler's `file:12:3: error:`, a line that starts
//     `error:` or `fatal error:`, `make: ***`, `##[error]` (GitHub Actions), `Assertion failure:`;
//   - only when nothing is marked, the first lines that say error, fatal, failed, exception or Traceback as a word;
//   - known noise never counts: a browser's `JavaScript error:`/`warning:` and `console.error` lines (green runs
//     print them too), configure's `checking ...` lines, summaries such as "0 failed".
// docs/inspector.md ("Why a run failed") states the convention for other workers.

const EXIT = /\bexit(?:ed with)? code:?\s*(-?\d+)\b/i;
const STAMP = /^\[[\w.-]+ \d{4}-\d\d-\d\d[T ][\d:.]+Z?\]\s?/; // run-task's and the worker's "[task <time>] "
const LEVEL = /^\d\d:\d\d:\d\d\s+(INFO|WARNING|ERROR|CRITICAL|FATAL|DEBUG)\s+-\s?/; // mozharness's
const ELAPSED = /^\d+:\d\d\.\d\d\s+/; // mach's minutes:seconds since the build began
const SERIOUS = new Set(["ERROR", "CRITICAL", "FATAL"]);
const MARKED = [
  /^##\[error\]/,
  /\bTEST-UNEXPECTED-[A-Z]+\b/,
  /\bPROCESS-CRASH\b/,
  /\berror\[E\d+\]/,
  /^\S+:\d+(?::\d+)?:\s+(?:fatal )?error:/,
  /^(?:fatal )?error(?:\[[\w-]+\])?:/i,
  /\bmake(?:\[\d+\])?: \*\*\*/,
  /\bAssertion failure:/,
];
const WORDY = /\b(?:error|errors|fatal|failed|failure|exception|traceback)\b/i;
const NONE = /\b(?:0|no) (?:errors?|failed|failures?)\b/i; // "0 failed", "no errors": a summary, not an error
const NOISE = [/\bJavaScript (?:error|warning):/, /\bconsole\.(?:error|warn)\b/, /^checking\b.*\.\.\./];
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;
export const ERROR_LINES = 3; // lines shown at most
export const READ_AT_MOST = 8 * 1024 * 1024; // bytes of log read for this (a larger log is said to be too long)

/**
 * @param {string} text a whole log
 * @returns {{exitCode: string | null, errors: Array<{n: number, line: string}>}}
 */
export function explain(text) {
  const lines = text.replace(ANSI, "").split(/\r?\n/);
  let exitCode = null;
  /** @type {Array<{n: number, line: string}>} */
  const marked = [];
  /** @type {Array<{n: number, line: string}>} */
  const wordy = [];
  lines.forEach((line, i) => {
    const exit = EXIT.exec(line);
    if (exit) {
      exitCode = exit[1];
      return; // the worker's own line, not an error of the task's
    }
    const kind = errorKind(line);
    const found = { n: i + 1, line: readable(line) };
    if (kind === "marked" && marked.length < ERROR_LINES) marked.push(found);
    else if (kind === "wordy" && wordy.length < ERROR_LINES) wordy.push(found);
  });
  return { exitCode, errors: marked.length ? marked : wordy };
}

/**
 * The line as its harness wrote it, without the prefixes put on every line.
 * @param {string} line
 */
export function readable(line) {
  return line.trim().replace(STAMP, "").trim().replace(ELAPSED, "").replace(LEVEL, "").trim();
}

/**
 * Whether a line (ANSI colours removed) names an error: "marked" (the harness or the task marks it so), "wordy"
 * (it says error, failed, ... as a word), or null; the worker's exit code line and known noise are not. The log
 * viewer marks the sections that hold such lines, and keeps them open.
 * @param {string} line
 * @returns {"marked" | "wordy" | null}
 */
export function errorKind(line) {
  const stamped = line.trim().replace(STAMP, "").trim().replace(ELAPSED, "");
  if (!stamped || EXIT.test(stamped)) return null;
  const level = LEVEL.exec(stamped);
  const text = level ? stamped.slice(level[0].length).trim() : stamped;
  if (NOISE.some((noise) => noise.test(text))) return null;
  if (MARKED.some((mark) => mark.test(text)) || (level && SERIOUS.has(level[1]))) return "marked";
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
const STORED_HERE = new Set(["s3", "object", "azure"]);

/**
 * The run's log among its artifacts: a text artifact (not an error artifact), public/logs/ first.
 * @param {Array<{name: string, contentType: string, storageType: string}>} artifacts
 * @returns {string | null}
 */
export function logOf(artifacts) {
  const logged = artifacts.filter((a) => LOG_TYPES.test(a.contentType) && a.storageType !== "error");
  const named = logged.find((a) => a.name.startsWith("public/logs/")) || logged[0];
  return named ? named.name : null;
}

/**
 * The log the page reads by itself to say why a run failed: the run's log, if its data is stored here.
 * @param {Array<{name: string, contentType: string, storageType: string}>} artifacts
 * @returns {string | null}
 */
export function storedLogOf(artifacts) {
  const name = logOf(artifacts);
  const found = artifacts.find((a) => a.name === name);
  return found && STORED_HERE.has(found.storageType) ? name : null;
}
