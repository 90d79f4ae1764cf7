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
