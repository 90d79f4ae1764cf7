// The log view: an artifact's text in the log viewer, growing while its run runs. The artifact is read through the
// queue, which redirects to Blob Storage or, for a `reference` (Firefox CI's live.log while its task runs), to the
// worker's live stream: an answer is drawn as its bytes arrive, a few times a second, since a stream ends only
// with its task. While the run is pending or running each read asks only for the bytes after those shown (a Range
// request) about once a second; a stream still open when the run is resolved is given LAST_BYTES_MS more, then
// the stored log is read once (whole when it is gzip-encoded: a range of its compressed bytes cannot be decoded;
// the bytes already shown skipped), and it stays as it is. What cannot be shown says why, and polling stops unless
// waiting can change it: no such task or run, not started yet (waits), no log of that name (waits while the run
// runs), private (offers the sign-in), an error artifact, expired.
import { SLUGID } from "./addresses.js";
import * as api from "./api.js";
import { badge, h, message, notASlugid, replace, RESOLVED, setTitle, when } from "./dom.js";
import { poll } from "./live.js";
import { LogViewer, parseLineAnchor } from "./logview.js";

const LOG_NAMES = /\.(log|txt)$|^public\/logs\//;
const DRAW_EVERY_MS = 250; // a stream's bytes drawn at most this often
const WATCH_EVERY_MS = 5000; // while a stream is read, how often the run's state is asked
const LAST_BYTES_MS = 3000; // a stream still open once its run is resolved: how long its last bytes are awaited

/**
 * @param {HTMLElement} target
 * @param {string} taskId
 * @param {number} runId
 * @param {string} name
 * @param {string} anchor
 * @returns {View | null}
 */
export function logView(target, taskId, runId, name, anchor) {
  if (!SLUGID.test(taskId)) {
    setTitle(`Task ${taskId}`);
    return notASlugid(target, "taskId");
  }
  const base = `#/tasks/${taskId}/runs/${runId}/logs/${encodeURIComponent(name)}`;
  const viewer = new LogViewer({ base, fileName: name.split("/").pop() || "log.txt" });
  const state = h("span", { id: "run-state" });
  const taskName = h("span", {}, h("a", { href: `#/tasks/${taskId}` }, taskId));
  const notice = h("div", { id: "log-state" });
  const status = h("p", { class: "updated", id: "log-status" }, "Loading…");
  const raw = h("a", { href: "#", id: "raw-log", rel: "noopener" }, "raw");
  replace(target,
    h("h1", {}, name),
    h("p", {}, "Run ", runId, " of ", taskName, " ", state, " · ", raw),
    notice, viewer.toolbar, status, viewer.scroller);
  setTitle(`${name.split("/").pop()} · run ${runId} of ${taskId}`);
  api.artifactUrl(taskId, runId, name).then((href) => raw.setAttribute("href", href));
  let wanted = parseLineAnchor(anchor);
  if (wanted) viewer.select(wanted, { scroll: false });

  const decoder = new TextDecoder("utf-8");
  let offset = 0;
  /** @type {string | null} */
  let blobUrl = null; // where the queue redirected: read directly until it stops answering
  let done = false;
  let named = false;
  /** @type {string | null} */
  let source = null; // where the bytes shown came from (origin and path): the offset counts bytes of that log
  /** @type {ReadableStreamDefaultReader<Uint8Array> | null} */
  let reading = null; // the answer being read, cancelled when the view is left

  // Says why there is no log to show, and whether to keep looking.
  /**
   * @param {"error" | "info"} kind
   * @param {...Child} text
   */
  function explain(kind, ...text) {
    replace(notice, message(kind, text.flat()));
    viewer.scroller.hidden = offset === 0;
  }

  /**
   * @param {"error" | "info"} kind
   * @param {...Child} text
   */
  function finish(kind, ...text) {
    done = true;
    explain(kind, ...text);
    replace(status);
  }

  async function artifactsOfRun() {
    try {
      return await api.all(`/task/${taskId}/runs/${runId}/artifacts`, "artifacts");
    } catch {
      return [];
    }
  }

  /**
   * @param {Artifact[]} listed
   */
  function others(listed) {
    const logs = listed.filter((a) => a.name !== name && LOG_NAMES.test(a.name) && a.storageType !== "error");
    if (logs.length === 0) return "";
    return [" This run has ", logs.slice(0, 10).flatMap((a, k) => [k ? ", " : "",
      h("a", { href: `#/tasks/${taskId}/runs/${runId}/logs/${encodeURIComponent(a.name)}` }, a.name)]), "."];
  }

  // One read: the bytes after those shown. Answers true if text arrived.
  /**
   * @param {boolean} resolved
   */
  async function read(resolved) {
    if (resolved) blobUrl = null; // the last read asks the queue: a live stream's reference now names the stored log
    // A range the browser could not decode (of a gzip-encoded log: it fails the request), of compressed bytes, or
    // of another log than the one shown (a live stream's stored log): the whole log is read, what was shown skipped.
    let response = await fetchLog(offset).catch((error) => {
      if (offset === 0) throw error;
      return null;
    });
    if (!response || (offset > 0 && (response.status === 206 || response.status === 416)
      && (encoded(response) || whereFrom(response) !== source))) {
      await response?.body?.cancel();
      response = await fetchLog(0);
    }
    if (response.ok) source = whereFrom(response);
    if (response.status === 416) return false; // nothing new
    if (response.status === 404) {
      const listed = await artifactsOfRun();
      const entry = listed.find((a) => a.name === name);
      if (entry && new Date(entry.expires) < new Date()) {
        finish("info", "This log expired ", when(entry.expires), ": its artifact is no longer kept.");
      } else if (resolved) {
        finish("error", "There is no log named ", h("code", {}, name), ` in run ${runId}.`, others(listed));
      } else {
        explain("info", "No log yet: the worker has not created ", h("code", {}, name), " in this run.",
          others(listed));
      }
      return false;
    }
    if (response.status === 401 || response.status === 403) {
      if (api.credentials()) {
        finish("error", "Your credentials may not read this log: it needs ",
          h("code", {}, `queue:get-artifact:${name}`), ".");
      } else {
        finish("info", "This log is private: sign in with credentials that hold ",
          h("code", {}, `queue:get-artifact:${name}`), " to read it. ",
          h("button", { type: "button", id: "log-sign-in", onclick: () => document.getElementById("client-id")?.focus() },
            "Sign in"));
      }
      return false;
    }
    if (response.status === 424) {
      const answer = await response.json().catch(() => ({}));
      finish("error", "The worker reported an error instead of this log: ", answer.message || "no reason given");
      return false;
    }
    if (!response.ok || !response.body) throw new Error(`the log could not be read (HTTP ${response.status})`);
    // A 200 after a Range request: a server that ignored the range (or a whole read) sent what was shown again.
    return drawAsItArrives(response.body.getReader(), response.status === 200 ? offset : 0, resolved);
  }

  /**
   * The log through the queue, or where it redirected while that still answers.
   * @param {number} from
   */
  async function fetchLog(from) {
    /** @type {Record<string, string>} */
    const headers = from > 0 ? { Range: `bytes=${from}-` } : {};
    let response = blobUrl ? await fetch(blobUrl, { headers, cache: "no-store" }).catch(() => null) : null;
    if (!response || response.status === 403 || response.status === 404) {
      response = await fetch(await api.artifactUrl(taskId, runId, name), { headers, cache: "no-store" });
      if (response.ok) blobUrl = response.url;
    }
    return response;
  }

  /**
   * An answer's bytes drawn as they arrive, the first `skip` of them already shown; while the run runs, its state
   * is watched so that a stream still open once it is resolved is not waited for beyond LAST_BYTES_MS.
   * @param {ReadableStreamDefaultReader<Uint8Array>} reader
   * @param {number} skip
   * @param {boolean} resolved
   */
  async function drawAsItArrives(reader, skip, resolved) {
    reading = reader;
    let seen = 0;
    let grew = false;
    let pending = "";
    let drawn = Date.now();
    const watch = resolved ? null : setInterval(async () => {
      const { status: now } = await api.get(`/task/${taskId}/status`).catch(() => ({ status: null }));
      if (now && RESOLVED.has(now.runs[runId]?.state)) setTimeout(() => reader.cancel().catch(() => {}), LAST_BYTES_MS);
    }, WATCH_EVERY_MS);
    /** @type {ReturnType<typeof setTimeout> | null} */
    let later = null; // what arrived since the last draw is drawn then, even when nothing more comes
    const draw = () => {
      if (later !== null) clearTimeout(later);
      later = null;
      viewer.append(pending);
      pending = "";
      drawn = Date.now();
      shown(false);
    };
    try {
      for (;;) {
        const { done: ended, value } = await reader.read();
        if (ended) break;
        const fresh = value.subarray(Math.min(Math.max(skip - seen, 0), value.length));
        seen += value.length;
        if (fresh.length === 0) continue;
        offset += fresh.length;
        grew = true;
        pending += decoder.decode(fresh, { stream: true });
        if (Date.now() - drawn >= DRAW_EVERY_MS) draw();
        else if (later === null) later = setTimeout(draw, DRAW_EVERY_MS - (Date.now() - drawn));
      }
    } finally {
      if (watch !== null) clearInterval(watch);
      reading = null;
      if (pending) draw();
      else if (later !== null) clearTimeout(later);
    }
    return grew;
  }

  // What has arrived is on the page: the log box shown, a linked line selected once it is there, the counts said.
  /**
   * @param {boolean} resolved
   */
  function shown(resolved) {
    if (offset > 0) {
      replace(notice);
      viewer.scroller.hidden = false;
    }
    if (wanted && viewer.has(wanted) && (resolved || viewer.model.length > wanted.to)) {
      viewer.select(wanted); // a link to a line: shown once the line is there
      wanted = null;
    }
    if (!resolved) {
      const lines = viewer.model.length;
      status.textContent = `${lines.toLocaleString()} line${lines === 1 ? "" : "s"}, ${offset.toLocaleString()} bytes; `
        + "following while the run runs";
    }
  }

  async function refresh() {
    if (done) return;
    let taskStatus;
    try {
      ({ status: taskStatus } = await api.get(`/task/${taskId}/status`));
    } catch (error) {
      if (api.statusOf(error) === 404) {
        finish("error", "There is no task ", h("code", {}, taskId), " (a task is deleted when it expires).");
        return;
      }
      throw error;
    }
    if (!named) {
      named = true;
      api.get(`/task/${taskId}`).then((task) => {
        if (task.metadata.name) replace(taskName, h("a", { href: `#/tasks/${taskId}` }, task.metadata.name));
        setTitle(`${name.split("/").pop()} · ${task.metadata.name || taskId}`);
      }).catch(() => {});
    }
    const run = taskStatus.runs[runId];
    if (!run) {
      const runs = taskStatus.runs.length;
      finish("error", `Task ${taskId} has no run ${runId}`,
        runs ? `: its runs are 0 to ${runs - 1}.` : ": it has not run yet.", " ",
        h("a", { href: `#/tasks/${taskId}` }, "Open the task"));
      return;
    }
    replace(state, badge(run.state));
    if (run.state === "pending") {
      explain("info", `Not started: run ${runId} is pending, waiting for a worker to claim it. `,
        "The log appears here when its worker starts it.");
      replace(status);
      return;
    }
    const resolved = RESOLVED.has(run.state);
    await read(resolved);
    if (done) return;
    shown(resolved);
    if (resolved) {
      done = true; // the last read after the run was resolved holds the whole log
      viewer.append(decoder.decode());
      viewer.finish();
      if (wanted && viewer.has(wanted)) viewer.select(wanted);
    }
    if (offset === 0 && !notice.firstChild) explain("info", "The log is empty so far.");
    const lines = viewer.model.length;
    status.textContent = `${lines.toLocaleString()} line${lines === 1 ? "" : "s"}, ${offset.toLocaleString()} bytes${
      resolved ? `; the run is ${run.state}: this is the whole log` : "; following while the run runs"}`;
  }

  const polling = poll(refresh, () => (done ? 3600000 : 1000), (error) => {
    replace(status, message("error", api.said(error)));
  });
  return {
    stop() {
      polling.stop();
      reading?.cancel().catch(() => {});
      viewer.stop();
    },
    // The address changed only in its line anchor (`#L12-L20`): select those lines.
    /**
     * @param {string} text
     */
    anchor(text) {
      const range = parseLineAnchor(text);
      if (range && viewer.has(range)) viewer.select(range);
    },
  };
}

/**
 * Whether an answer's body is sent encoded (gzip, ...), which the browser decodes: a range of it cannot be.
 * @param {Response} response
 */
function encoded(response) {
  return (response.headers.get("content-encoding") || "identity").toLowerCase() !== "identity";
}

/**
 * Which log an answer is of: where it came from, without the signature that changes with each redirect.
 * @param {Response} response
 */
function whereFrom(response) {
  const url = new URL(response.url);
  return `${url.origin}${url.pathname}`;
}
