// Reading a run's log to explain why it failed (why.js), for the task page and the group's failure list: which
// artifact is the log, and its text read as a stream that stops at READ_AT_MOST bytes (a larger log is explained
// from its last TAIL bytes instead: its reader is cancelled, not read to its end).
import * as api from "./api.js";
import { explain, READ_AT_MOST, storedLogOf } from "./why.js";

export const TAIL = 2 * 1024 * 1024; // bytes of a longer log's end read to explain it

/**
 * Why the run failed, from its log `name`: explain()'s answer, or `tooLong` when the log is longer than READ_AT_MOST.
 * Throws when the log cannot be read (not to be remembered: a later look may read it).
 * @param {string} taskId
 * @param {number} runId
 * @param {string} name
 */
export async function explainLog(taskId, runId, name) {
  const response = await fetch(await api.artifactUrl(taskId, runId, name), { cache: "no-store" });
  if (!response.ok || !response.body) throw new Error(`the log answered ${response.status}`);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > READ_AT_MOST) {
      await reader.cancel();
      return { ...(await explainTail(response.url)), tooLong: true };
    }
    text += decoder.decode(value, { stream: true });
  }
  return { ...explain(text + decoder.decode()), tooLong: false };
}

/**
 * A log too long to read whole explained from its last TAIL bytes (a Range request; where a task fails is most often
 * near its end): its exit code and error lines, their line numbers unknown (null), and its size when the answer
 * says it; nothing when the store ignores the range.
 * @param {string} url
 */
async function explainTail(url) {
  try {
    const response = await fetch(url, { cache: "no-store", headers: { Range: `bytes=-${TAIL}` } });
    if (response.status !== 206) return { exitCode: null, errors: [], size: null };
    const size = Number((response.headers.get("content-range") || "").split("/")[1]) || null;
    const text = await response.text();
    const found = explain(text.slice(text.indexOf("\n") + 1)); // its first line is cut
    return { exitCode: found.exitCode, errors: found.errors.map((e) => ({ ...e, n: null })), size };
  } catch {
    return { exitCode: null, errors: [], size: null };
  }
}

/**
 * Why the run failed, its log found by listing its artifacts: {name, exitCode, errors}, or null (no log, or one
 * too long). Throws when they cannot be read.
 * @param {string} taskId
 * @param {number} runId
 */
export async function explainRun(taskId, runId) {
  const name = storedLogOf(await api.all(`/task/${taskId}/runs/${runId}/artifacts`, "artifacts"));
  if (name === null) return null;
  const found = await explainLog(taskId, runId, name);
  return found.tooLong && !found.errors.length && found.exitCode === null ? null : { name, ...found };
}
