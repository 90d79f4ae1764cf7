// Why a run failed, read from its log: the exit code the worker wrote and the first lines that name an error, so
// that the task page says why beside what (issue #65). The log is the convention every worker already follows:
//   - exit code: the reference worker's "exit code N after S s", generic-worker's "Exit Code: N", docker-worker's
//     "exit code: N" (the last such line counts: a task's own commands may print others before it);
//   - error lines: a line a task marks as one (`##[error]...`, as GitHub Actions reads it, or
//     `TEST-UNEXPECTED-...`, as Mozilla's harnesses write) first; otherwise the first lines that say error, fatal,
//     failed, exception or Traceback as a word, ANSI colours removed.
// docs/inspector.md ("Why a run failed") states the convention for other workers.

const EXIT = /\bexit(?:ed with)? code:?\s*(-?\d+)\b/i;
const MARKED = /^(?:##\[error\]|TEST-UNEXPECTED-)/;
const WORDY = /\b(?:error|errors|fatal|failed|failure|exception|traceback)\b/i;
const NONE = /\b(?:0|no) (?:errors?|failed|failures?)\b/i; // "0 failed", "no errors": a summary, not an error
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;
export const ERROR_LINES = 3; // lines shown at most
export const READ_AT_MOST = 8 * 1024 * 1024; // bytes of log read for this (a larger log is not explained here)

/**
 * @param {string} text a whole log
 * @returns {{exitCode: string | null, errors: Array<{n: number, line: string}>}}
 */
export function explain(text) {
  const lines = text.replace(ANSI, "").split(/\r?\n/);
  let exitCode = null;
  const marked = [];
  const wordy = [];
  lines.forEach((line, i) => {
    const exit = EXIT.exec(line);
    if (exit) {
      exitCode = exit[1];
      return; // the worker's own line, not an error of the task's
    }
    const kind = errorKind(line);
    if (kind === "marked" && marked.length < ERROR_LINES) marked.push({ n: i + 1, line: line.trim() });
    else if (kind === "wordy" && wordy.length < ERROR_LINES) wordy.push({ n: i + 1, line: line.trim() });
  });
  return { exitCode, errors: marked.length ? marked : wordy };
}

/**
 * Whether a line (ANSI colours removed) names an error: "marked" (the task marks it so), "wordy" (it says error,
 * failed, ... as a word), or null; the worker's exit code line is not one. The log viewer marks the sections that
 * hold such lines, and keeps them open.
 * @param {string} line
 * @returns {"marked" | "wordy" | null}
 */
export function errorKind(line) {
  const trimmed = line.trim();
  if (!trimmed || EXIT.test(trimmed)) return null;
  if (MARKED.test(trimmed)) return "marked";
  return WORDY.test(trimmed) && !NONE.test(trimmed) ? "wordy" : null;
}

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
