// Addresses turned into the inspector's routes: Taskcluster's UI (`<rootUrl>/tasks/<taskId>`, `/tasks/groups/<id>`,
// `/tasks/<taskId>/runs/<runId>/logs/<name>`, `/provisioners/<p>/worker-types/<t>`, as taskcluster-lib-urls' ui()
// builds them, and `/worker-manager/<pool>`), the old tools site's task and group inspectors, this inspector's own
// addresses and the queue's API URLs. Used by the Open box (pasted URLs) and by address.js, the page the queue
// serves at Taskcluster's UI addresses.

import { REVISION, treeherderPush } from "./pushes.js";

export const SLUGID = /^[A-Za-z0-9_-]{8}[Q-T][A-Za-z0-9_-][CGKOSWaeimquy26-][A-Za-z0-9_-]{10}[AQgw]$/;
export const TASK_QUEUE = /^[a-zA-Z0-9_-]{1,38}\/[a-z]([-a-z0-9]{0,36}[a-z0-9])?$/;
export const INDEX_PATH = /^[^./\s#?\\]+(\.[^./\s#?\\]+)*$/;
const LOG_NAME = /\.(log|txt)$|^public\/logs\//;
// Where an address's meaningful part starts, wherever the deployment's rootUrl puts it.
const MARKERS = ["/tasks", "/provisioners", "/worker-manager", "/task-group-inspector", "/task-inspector",
  "/inspector/", "/api/queue/v1/"];

/**
 * @param {string} part
 */
const decode = (part) => {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
};

/**
 * @param {string} taskId
 * @param {string | number} runId
 * @param {string} name
 */
function logRoute(taskId, runId, name) {
  return `/tasks/${taskId}/runs/${runId}/logs/${encodeURIComponent(name)}`;
}

// A route of the inspector (`/tasks/<id>`, …) for an address's path (from one of MARKERS on) and fragment; or
// {href} for an address that is a download; or null.
/**
 * @param {string} path
 * @param {string} [hash]
 */
export function routeOf(path, hash = "") {
  const parts = path.split("/").filter((p, i) => i === 0 || p !== "");
  const [, first, second, third, fourth, fifth, ...rest] = parts;
  const fragment = hash.replace(/^#/, "");
  if (first === "inspector") return fragment.startsWith("/") ? fragment : "/";
  if (first === "task-inspector") {
    const id = fragment.split("/")[0];
    return SLUGID.test(id) ? `/tasks/${id}` : "/";
  }
  if (first === "task-group-inspector") {
    const [group, task] = fragment.replace(/^\//, "").split("/");
    if (SLUGID.test(task || "")) return `/tasks/${task}`;
    return SLUGID.test(group || "") ? `/groups/${group}` : "/";
  }
  if (first === "tasks") {
    if (second === "groups") return SLUGID.test(third || "") ? `/groups/${third}` : "/";
    if (second === "index") return `/index/${third ? decode(third) : ""}`;
    if (!SLUGID.test(second || "")) return "/";
    if (third === "runs" && /^\d+$/.test(fourth || "")) {
      const tail = [fifth, ...rest].filter((p) => p !== undefined);
      if (tail[0] === "logs" && tail.length > 1) {
        const named = tail[1] === "live" && tail.length > 2 ? tail.slice(2) : tail.slice(1);
        let name = decode(named.join("/"));
        // Older UIs put the log's whole URL here (encoded): its artifact name is after `/artifacts/`.
        const url = /^https?:\/\/.*\/artifacts\/(.+)$/.exec(name);
        if (url) name = decode(url[1]);
        return logRoute(second, fourth, name);
      }
      if (tail.length > 0) return { artifact: { taskId: second, runId: fourth, name: decode(tail.join("/")) } };
    }
    return `/tasks/${second}`;
  }
  if (first === "provisioners") {
    if (second && third === "worker-types" && fourth) {
      if (fifth === "workers" && rest.length >= 2) return `/workers/${second}/${fourth}/${rest[0]}/${rest[1]}`;
      return `/queues/${second}/${fourth}`;
    }
    return "/";
  }
  if (first === "worker-manager") {
    const pool = decode(second || "");
    if (!TASK_QUEUE.test(pool)) return "/";
    if (third === "workers" && fourth && fifth) return `/workers/${pool}/${fourth}/${fifth}`;
    return `/queues/${pool}`;
  }
  if (first === "api" && second === "queue") {
    // /api/queue/v1/task/<id>[/runs/<r>/artifacts/<name>], /api/queue/v1/task-group/<id>/list
    const [kind, id, runs, runId, artifacts, ...name] = parts.slice(4);
    if (kind === "task-group" && SLUGID.test(id || "")) return `/groups/${id}`;
    if (kind !== "task" || !SLUGID.test(id || "")) return null;
    if (runs === "runs" && /^\d+$/.test(runId || "") && artifacts === "artifacts" && name.length) {
      const artifact = decode(name.join("/"));
      if (LOG_NAME.test(artifact)) return logRoute(id, runId, artifact);
    }
    return `/tasks/${id}`;
  }
  return null;
}

// The path of a URL from the first MARKER on (whatever its rootUrl), or null.
/**
 * @param {string} pathname
 */
export function markedPath(pathname) {
  let best = -1;
  for (const marker of MARKERS) {
    const at = pathname.indexOf(marker);
    const whole = at >= 0 && (pathname.length === at + marker.length || marker.endsWith("/")
      || pathname[at + marker.length] === "/");
    if (whole && (best < 0 || at < best)) best = at;
  }
  return best < 0 ? null : pathname.slice(best);
}

// What the Open box was given: {route} to go to, {slug} (a task or a group: asked to the queue), {indexPath},
// {revision} or {push: {project, revision}} (a push to find), {queueOrLabel} (a task queue or a task's label),
// {label} (a task's label), or {error}.
/**
 * @param {string} input
 */
export function understand(input) {
  const value = input.trim();
  if (!value) {
    return { error: "Type a taskId, a taskGroupId, a task queue (provisioner/workerType), an index path, a revision, "
      + "a task's label or a URL" };
  }
  if (SLUGID.test(value)) return { slug: value };
  if (REVISION.test(value)) return { revision: value };
  if (TASK_QUEUE.test(value)) return { queueOrLabel: value }; // or a task's label, as `build-linux64/opt` reads
  if (/^https?:\/\//i.test(value)) {
    let url;
    try {
      url = new URL(value);
    } catch {
      return { error: `"${value}" is not a URL this inspector can read` };
    }
    // Treeherder's job view names the task and run in its query: `<taskId>.<runId>` today, `<taskId>-<runId>` before.
    const run = /^([A-Za-z0-9_-]{22})(?:[.-](\d+))?$/.exec(url.searchParams.get("selectedTaskRun") || "");
    if (run) return { route: `/tasks/${run[1]}` };
    const push = treeherderPush(url);
    if (push) return { push };
    const path = markedPath(url.pathname);
    const route = path === null ? null : routeOf(path, url.hash);
    if (route && typeof route === "object") return { route: `/tasks/${route.artifact.taskId}` };
    // A log's line anchor (`#L12`) stays with it.
    const line = /^#L\d+(?:-L?\d+)?$/.test(url.hash) && typeof route === "string" && route.includes("/logs/")
      ? url.hash : "";
    if (route && (route !== "/" || path === "/inspector/")) return { route: route + line };
    return { error: `${value} is not an address of a task, a group, a log or a task queue` };
  }
  // A task's route (`index.<namespace>.<name>`, as a task definition lists it) names the index path after `index.`.
  const indexPath = value.startsWith("index.") ? value.slice("index.".length) : value;
  if (INDEX_PATH.test(indexPath) && indexPath.includes(".")) return { indexPath };
  return { label: value }; // a task's name, looked for in the newest pushes
}
