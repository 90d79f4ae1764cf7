// The log view: an artifact's text, growing while its run runs. The artifact is read through the queue (which
// redirects to Blob Storage); while the run is pending or running the blob is the one its worker appends to, so
// each read asks only for the bytes after those already shown (a Range request) about once a second. Once the
// run is resolved, one last read completes the log, and it stays as it is.
import * as api from "./api.js";
import { badge, h, message, replace, RESOLVED } from "./dom.js";
import { poll } from "./live.js";

export function logView(target, taskId, runId, name) {
  const state = h("span", { id: "run-state" });
  const follow = h("input", { type: "checkbox", id: "follow", checked: true });
  const text = h("pre", { class: "log", id: "log", tabindex: "0", "aria-live": "off" });
  const status = h("p", { class: "updated", id: "log-status" }, "Loading…");
  replace(target,
    h("h1", {}, name),
    h("p", {}, "Run ", runId, " of ", h("a", { href: `#/tasks/${taskId}` }, taskId), " ", state),
    h("p", {}, h("label", {}, follow, " follow the end"), " · ",
      h("a", { href: "#", id: "raw-log", rel: "noopener" }, "raw")),
    status, text);
  api.artifactUrl(taskId, runId, name).then((href) => document.getElementById("raw-log")?.setAttribute("href", href));

  const decoder = new TextDecoder("utf-8");
  let offset = 0;
  let blobUrl = null; // where the queue redirected: read directly until it stops answering
  let done = false;
  let runState = null;

  async function read() {
    const headers = offset > 0 ? { Range: `bytes=${offset}-` } : {};
    let response = blobUrl ? await fetch(blobUrl, { headers, cache: "no-store" }).catch(() => null) : null;
    if (!response || response.status === 403 || response.status === 404) {
      response = await fetch(await api.artifactUrl(taskId, runId, name), { headers, cache: "no-store" });
      if (response.ok) blobUrl = response.url;
    }
    if (response.status === 416) return false; // nothing new
    if (response.status === 404 || response.status === 424) {
      status.textContent = "No log yet: waiting for the worker to start it.";
      return false;
    }
    if (!response.ok) throw new Error(`the log could not be read (HTTP ${response.status})`);
    const bytes = new Uint8Array(await response.arrayBuffer());
    if (response.status === 200 && offset > 0) {
      // The whole log again (a server that ignored the range): keep only what is new.
      if (bytes.length <= offset) return false;
      text.append(decoder.decode(bytes.subarray(offset), { stream: true }));
    } else {
      text.append(decoder.decode(bytes, { stream: true }));
    }
    offset += response.status === 200 && offset > 0 ? bytes.length - offset : bytes.length;
    return true;
  }

  async function refresh() {
    if (done) return;
    const { status: taskStatus } = await api.get(`/task/${taskId}/status`);
    const run = taskStatus.runs[runId];
    runState = run ? run.state : "missing";
    replace(state, badge(runState));
    const resolved = RESOLVED.has(runState);
    const grew = await read();
    if (grew && follow.checked) text.scrollTop = text.scrollHeight;
    if (resolved) {
      done = true; // the last read after the run was resolved holds the whole log
      text.append(decoder.decode());
    }
    status.textContent = `${offset} bytes${resolved ? `; the run is ${runState}: this is the whole log`
      : "; following while the run runs"}`;
  }

  return poll(refresh, () => (done ? 3600000 : 1000), (error) => {
    replace(status, message("error", error.summary || error.message));
  });
}
