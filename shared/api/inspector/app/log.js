// The log view: an artifact's text in the log viewer, growing while its run runs. The artifact is read through the
// queue (which redirects to Blob Storage); while the run is pending or running the blob is the one its worker
// appends to, so each read asks only for the bytes after those already shown (a Range request) about once a
// second. Once the run is resolved, one last read completes the log, and it stays as it is. What cannot be shown
// says why, and polling stops unless waiting can change it: no such task or run, not started yet (waits), no log
// of that name (waits while the run runs), private (offers the sign-in), an error artifact, expired.
import { SLUGID } from "./addresses.js";
import * as api from "./api.js";
import { badge, h, message, notASlugid, replace, RESOLVED, setTitle, when } from "./dom.js";
import { poll } from "./live.js";
import { LogViewer, parseLineAnchor } from "./logview.js";

const LOG_NAMES = /\.(log|txt)$|^public\/logs\//;

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

  // One read: the bytes after those shown. Answers true if text arrived, or the problem's kind.
  /**
   * @param {boolean} resolved
   */
  async function read(resolved) {
    /** @type {Record<string, string>} */
    const headers = offset > 0 ? { Range: `bytes=${offset}-` } : {};
    let response = blobUrl ? await fetch(blobUrl, { headers, cache: "no-store" }).catch(() => null) : null;
    if (!response || response.status === 403 || response.status === 404) {
      response = await fetch(await api.artifactUrl(taskId, runId, name), { headers, cache: "no-store" });
      if (response.ok) blobUrl = response.url;
    }
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
    if (!response.ok) throw new Error(`the log could not be read (HTTP ${response.status})`);
    const bytes = new Uint8Array(await response.arrayBuffer());
    const fresh = response.status === 200 && offset > 0 ? bytes.subarray(Math.min(offset, bytes.length)) : bytes;
    // (a 200 after a Range request: a server that ignored the range sent the whole log; only what is new is kept)
    offset += fresh.length;
    if (fresh.length === 0) return false;
    viewer.append(decoder.decode(fresh, { stream: true }));
    return true;
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
    const grew = await read(resolved);
    if (done) return;
    if (grew || offset > 0) {
      replace(notice);
      viewer.scroller.hidden = false;
    }
    if (wanted && viewer.has(wanted) && (resolved || viewer.model.length > wanted.to)) {
      viewer.select(wanted); // a link to a line: shown once the line is there
      wanted = null;
    }
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
