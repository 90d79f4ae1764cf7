// Reading a run's log to explain why it failed (why.js), for the task page and the group's failure list: which log
// (the run's own when stored here, a `reference` followed to the queue's artifact it names, or another log stored
// here), and its text read as a stream through an Explainer, so that nothing but what was found is kept. A log
// longer than READ_AT_MOST is explained from its last TAIL bytes, asked by an explicit range once its size is
// known; a gzip-encoded one (Firefox CI's live_backing.log) is read whole, decoded by the browser, when what is
// sent is at most READ_AT_MOST (its range would be of compressed bytes).
import * as api from "./api.js";
import { Explainer, logCandidates, queueArtifactOf, READ_AT_MOST, STORED_HERE } from "./why.js";

export const TAIL = 2 * 1024 * 1024; // bytes of a longer log's end read to explain it
export const DECODED_AT_MOST = 8 * READ_AT_MOST; // a gzip-encoded log's text read at most (logs compress ~10:1)
const HOPS = 3; // references followed at most

/** @typedef {{taskId: string, runId: number, name: string}} LogAt */
/** @typedef {{exitCode: string | null, errors: Array<{n: number | null, line: string}>, tooLong: boolean,
 *   size: number | null, encoded: boolean}} LogExplanation */

/**
 * The log the page reads by itself to say why the run failed, among its artifacts `listed`: its log when stored
 * here; a `reference` followed (at most HOPS) while it names an artifact of this queue; else another text log
 * stored here under public/logs/. null when there is none: a reference elsewhere is never read by the page itself.
 * @param {string} taskId
 * @param {number} runId
 * @param {Array<{name: string, contentType: string, storageType: string}>} listed
 * @returns {Promise<LogAt | null>}
 */
export async function logToRead(taskId, runId, listed) {
  const { first, stored } = logCandidates(listed);
  if (first && STORED_HERE.has(first.storageType)) return { taskId, runId, name: first.name };
  if (first && first.storageType === "reference") {
    const target = await followed({ taskId, runId, name: first.name });
    if (target) return target;
  }
  return stored.length ? { taskId, runId, name: stored[0] } : null;
}

/**
 * Where a reference leads, asked through the queue's artifact-content (its URL, without fetching it), while it
 * names this queue's artifacts; the stored artifact it ends at, or null.
 * @param {LogAt} at
 * @returns {Promise<LogAt | null>}
 */
async function followed(at) {
  let next = at;
  for (let hop = 0; hop <= HOPS; hop++) {
    let content;
    try {
      content = await api.get(`/task/${next.taskId}/runs/${next.runId}/artifact-content/${encodeURIComponent(next.name)}`);
    } catch {
      return null; // private, expired or gone: the page says nothing rather than guess
    }
    if (STORED_HERE.has(content.storageType)) return next;
    if (content.storageType !== "reference" || typeof content.url !== "string") return null;
    const target = queueArtifactOf(content.url, api.rootUrl);
    if (!target) return null;
    next = target;
  }
  return null;
}

/**
 * Why the run failed, from its log `name`: the Explainer's answer, `tooLong` when only its end (or nothing) was
 * read, its `size` in bytes as sent when known, and whether it was `encoded`. Throws when the log cannot be read
 * (not to be remembered: a later look may read it).
 * @param {string} taskId
 * @param {number} runId
 * @param {string} name
 * @returns {Promise<LogExplanation>}
 */
export async function explainLog(taskId, runId, name) {
  const response = await fetch(await api.artifactUrl(taskId, runId, name), { cache: "no-store" });
  if (!response.ok || !response.body) throw new Error(`the log answered ${response.status}`);
  const encoding = (response.headers.get("content-encoding") || "identity").toLowerCase();
  const encoded = encoding !== "identity";
  const size = Number(response.headers.get("content-length")) || null; // compressed, when encoded
  if (size !== null && size > READ_AT_MOST) {
    await response.body.cancel();
    return encoded ? { exitCode: null, errors: [], tooLong: true, size, encoded }
      : { ...(await explainTail(response.url, size)), tooLong: true, size, encoded };
  }
  const explainer = new Explainer();
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let read = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    read += value.length;
    if (read > (encoded ? DECODED_AT_MOST : READ_AT_MOST)) {
      await reader.cancel(); // a log whose size was not said, longer than read whole
      if (encoded) return { ...explainer.end(), tooLong: true, size, encoded };
      return { ...(await explainTail(response.url, null)), tooLong: true, size, encoded };
    }
    explainer.feed(decoder.decode(value, { stream: true }));
  }
  explainer.feed(decoder.decode());
  return { ...explainer.end(), tooLong: false, size: size ?? read, encoded };
}

/**
 * A log too long to read whole explained from its last TAIL bytes, asked by an explicit range (`bytes=a-b`, which
 * every store answers; a suffix range is not in Azure's documented forms): its size from the answer that read it,
 * or from a HEAD; its exit code and error lines, their line numbers unknown (null). Nothing when the store ignores
 * the range or the size is not said.
 * @param {string} url where the log was read (the store's signed URL, after the queue's redirect)
 * @param {number | null} size
 */
async function explainTail(url, size) {
  const nothing = { exitCode: null, errors: [] };
  try {
    let length = size;
    if (length === null) {
      const head = await fetch(url, { method: "HEAD", cache: "no-store" });
      length = Number(head.headers.get("content-length")) || null;
    }
    if (length === null || length <= TAIL) return nothing;
    const response = await fetch(url, { cache: "no-store", headers: { Range: `bytes=${length - TAIL}-${length - 1}` } });
    if (response.status !== 206) {
      await response.body?.cancel();
      return nothing;
    }
    const text = new TextDecoder().decode(await response.arrayBuffer());
    const explainer = new Explainer(false);
    explainer.feed(text.slice(text.indexOf("\n") + 1)); // its first line is cut
    return explainer.end();
  } catch {
    return nothing;
  }
}

/**
 * Why the run failed, its log found among its artifacts: {taskId, runId, name} of the log read and what it says,
 * or null (no log readable here, or one too long that said nothing). Throws when they cannot be read.
 * @param {string} taskId
 * @param {number} runId
 */
export async function explainRun(taskId, runId) {
  const log = await logToRead(taskId, runId, await api.all(`/task/${taskId}/runs/${runId}/artifacts`, "artifacts"));
  if (log === null) return null;
  const found = await explainLog(log.taskId, log.runId, log.name);
  return found.tooLong && !found.errors.length && found.exitCode === null ? null : { ...log, ...found };
}
