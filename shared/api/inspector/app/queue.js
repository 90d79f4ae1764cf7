// The task queue view (counts, pending and claimed tasks, workers) and the worker view (its recent tasks and
// quarantine). These listings need scopes the anonymous ones do not hold: each section says which when refused.
// A refresh reads SHOWN pending and claimed tasks (shown oldest first) and redraws a section only when what it
// shows changed, so focus and selection stay.
import * as api from "./api.js";
import { badge, h, message, replace, setTitle, when } from "./dom.js";
import { poll } from "./live.js";

/**
 * @param {unknown} error
 * @param {string} what
 */
function refused(error, what) {
  return h("p", { class: "quiet" }, api.statusOf(error) === 403 ? api.refusal(error, what)
    : `${what} could not be read: ${api.said(error)}`);
}

const SHOWN = 100;

// A section from `load` (what it shows) and `build` (its nodes), redrawn only when what `load` answered changed.
/**
 * @template T
 * @param {HTMLElement} node
 * @param {string} heading
 * @param {string} what
 * @param {() => Promise<T>} load
 * @param {(data: T) => Child} build
 */
async function section(node, heading, what, load, build) {
  let data;
  try {
    data = await load();
  } catch (error) {
    const key = `error:${api.statusOf(error)}`;
    if (node.dataset.key !== key) replace(node, h("h2", {}, heading), refused(error, what));
    node.dataset.key = key;
    return;
  }
  const key = JSON.stringify(data);
  if (node.dataset.key === key) return;
  node.dataset.key = key;
  replace(node, h("h2", {}, heading), build(data));
}

// The first SHOWN items of a listing, oldest first by their time field `by`, and whether there are more. The
// queue lists a task queue's tasks in no time order (neither does Taskcluster promise one): the page is sorted here.
/**
 * @param {string} path
 * @param {string} key
 * @param {"inserted" | "claimed"} by
 * @returns {Promise<{items: QueuedTask[], more: boolean}>}
 */
async function first(path, key, by) {
  const page = await api.get(path, { limit: SHOWN });
  const items = [.../** @type {QueuedTask[]} */ (page[key])].sort((a, b) => (Date.parse(a[by] ?? "") || 0) - (Date.parse(b[by] ?? "") || 0));
  return { items, more: Boolean(page.continuationToken) };
}

/**
 * @param {{items: unknown[], more: boolean}} shown
 * @param {number | undefined} total
 * @param {string} what
 */
function more(shown, total, what) {
  return shown.more ? h("p", { class: "quiet" }, `${shown.items.length}${total !== undefined ? ` of ${total}` : ""} `
    + `${what} (the queue lists them in no time order), oldest first.`) : null;
}

/**
 * @param {string} taskId
 * @param {TaskDefinition} [task]
 */
function taskLink(taskId, task) {
  return h("a", { href: `#/tasks/${taskId}` }, (task && task.metadata && task.metadata.name) || taskId);
}

/**
 * @param {HTMLElement} target
 * @param {string} taskQueueId
 * @returns {View}
 */
export function queueView(target, taskQueueId) {
  const [provisionerId, workerType] = taskQueueId.split("/");
  const info = h("section", { id: "queue-info" });
  const pending = h("section", { id: "pending" });
  const claimed = h("section", { id: "claimed" });
  const workers = h("section", { id: "workers" });
  replace(target, h("h1", {}, "Task queue ", h("code", {}, taskQueueId)), info, pending, claimed, workers);
  setTitle(`Task queue ${taskQueueId}`);
  const q = encodeURIComponent(taskQueueId).replace("%2F", "/");
  /** @type {Partial<QueueCounts>} */
  let counts = {};

  async function refresh() {
    await section(info, "Counts", "this task queue", async () => {
      counts = await api.get(`/task-queues/${q}/counts`);
      /** @type {{lastDateActive?: string, stability: string, description?: string} | null} */
      let about;
      try {
        about = await api.get(`/task-queues/${q}`);
      } catch {
        about = null;
      }
      return { counts, about };
    }, ({ about }) => h("dl", { class: "facts" },
          h("dt", {}, "pending"), h("dd", { id: "pending-count" }, counts.pendingTasks),
          h("dt", {}, "claimed"), h("dd", { id: "claimed-count" }, counts.claimedTasks),
          about ? [h("dt", {}, "activity recorded"), h("dd", {}, when(about.lastDateActive),
            h("span", { class: "quiet" }, " (written at most every 6 hours)")),
            h("dt", {}, "stability"), h("dd", {}, about.stability),
            h("dt", {}, "description"), h("dd", {}, about.description || "–")] : null));
    await Promise.all([
      section(pending, "Pending tasks", "its pending tasks", () => first(`/task-queues/${q}/pending`, "tasks", "inserted"),
        (shown) => (shown.items.length === 0 ? h("p", { class: "quiet" }, "None.") : [more(shown, counts.pendingTasks,
          "pending tasks"), h("table", { class: "tasks" },
          h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "Run"), h("th", {}, "Pending since"))),
          h("tbody", {}, shown.items.map((t) => h("tr", {}, h("td", {}, taskLink(t.taskId, t.task)),
            h("td", { class: "num" }, t.runId), h("td", {}, when(t.inserted))))))])),
      section(claimed, "Claimed tasks", "its claimed tasks", () => first(`/task-queues/${q}/claimed`, "tasks", "claimed"),
        (shown) => (shown.items.length === 0 ? h("p", { class: "quiet" }, "None.") : [more(shown,
          counts.claimedTasks, "claimed tasks"), h("table", { class: "tasks" },
          h("thead", {}, h("tr", {}, ["Task", "Run", "Worker", "Claimed"].map((c) => h("th", {}, c)))),
          h("tbody", {}, shown.items.map((t) => h("tr", {}, h("td", {}, taskLink(t.taskId, t.task)),
            h("td", { class: "num" }, t.runId),
            h("td", {}, h("a", { href: `#/workers/${provisionerId}/${workerType}/${t.workerGroup}/${t.workerId}` },
              `${t.workerGroup}/${t.workerId}`)),
            h("td", {}, when(t.claimed))))))])),
      section(workers, "Workers", "its workers",
        () => api.all(`/provisioners/${provisionerId}/worker-types/${workerType}/workers`, "workers"),
        (/** @type {Worker[]} */ items) => (items.length === 0 ? h("p", { class: "quiet" }, "No worker has claimed work here yet.")
          : h("table", { class: "workers" },
            h("thead", {}, h("tr", {}, ["Worker", "Latest task", "First claim", "Last active", "Quarantine"]
              .map((c) => h("th", {}, c)))),
            h("tbody", {}, items.map((w) => h("tr", {},
              h("td", {}, h("a", { href: `#/workers/${provisionerId}/${workerType}/${w.workerGroup}/${w.workerId}` },
                `${w.workerGroup}/${w.workerId}`)),
              h("td", {}, w.latestTask ? taskLink(w.latestTask.taskId) : "–"),
              h("td", {}, when(w.firstClaim)), h("td", {}, when(w.lastDateActive)),
              h("td", {}, w.quarantineUntil && new Date(w.quarantineUntil) > new Date()
                ? ["until ", when(w.quarantineUntil)] : "no"))))))),
    ]);
  }

  return poll(refresh, () => 5000);
}

/**
 * @param {HTMLElement} target
 * @param {string} taskQueueId
 * @param {string} workerGroup
 * @param {string} workerId
 * @returns {View}
 */
export function workerView(target, taskQueueId, workerGroup, workerId) {
  const [provisionerId, workerType] = taskQueueId.split("/");
  const body = h("section", { id: "worker" }, "Loading…");
  replace(target, h("h1", {}, "Worker ", h("code", {}, `${workerGroup}/${workerId}`)),
    h("p", {}, "of task queue ", h("a", { href: `#/queues/${taskQueueId}` }, taskQueueId)), body);
  setTitle(`Worker ${workerGroup}/${workerId} of ${taskQueueId}`);

  async function refresh() {
    /** @type {Worker} */
    let worker;
    try {
      worker = await api.get(`/provisioners/${provisionerId}/worker-types/${workerType}/workers/${workerGroup}/${workerId}`);
    } catch (error) {
      replace(body, api.statusOf(error) === 404 ? message("error", "No such worker has claimed work here.")
        : refused(error, "this worker"));
      return;
    }
    const recent = [...worker.recentTasks].reverse();
    /** @type {Record<string, TaskStatus>} */
    let states = {};
    if (recent.length) {
      try {
        const found = await api.post("/tasks/status", { taskIds: [...new Set(recent.map((t) => t.taskId))] });
        states = Object.fromEntries(found.statuses.map((/** @type {{taskId: string, status: TaskStatus}} */ s) =>
          [s.taskId, s.status]));
      } catch {
        states = {};
      }
    }
    const quarantined = worker.quarantineUntil && new Date(worker.quarantineUntil) > new Date();
    replace(body,
      h("dl", { class: "facts" },
        h("dt", {}, "quarantine"), h("dd", { id: "quarantine" }, quarantined ? ["until ", when(worker.quarantineUntil)] : "no"),
        h("dt", {}, "first claim"), h("dd", {}, when(worker.firstClaim)),
        h("dt", {}, "last active"), h("dd", {}, when(worker.lastDateActive)),
        h("dt", {}, "expires"), h("dd", {}, when(worker.expires))),
      worker.quarantineDetails && worker.quarantineDetails.length ? [h("h2", {}, "Quarantine history"),
        h("ul", { class: "plain" }, worker.quarantineDetails.map((d) => h("li", {}, when(d.updatedAt), " ",
          d.clientId, ": until ", when(d.quarantineUntil), d.quarantineInfo ? ` – ${d.quarantineInfo}` : "")))] : null,
      h("h2", {}, "Recent tasks"),
      recent.length === 0 ? h("p", { class: "quiet" }, "None.") : h("table", { class: "tasks" },
        h("thead", {}, h("tr", {}, ["Task", "Run", "State"].map((c) => h("th", {}, c)))),
        h("tbody", {}, recent.map((t) => {
          const run = states[t.taskId] && states[t.taskId].runs[t.runId];
          return h("tr", {}, h("td", {}, taskLink(t.taskId)), h("td", { class: "num" }, t.runId),
            h("td", {}, run ? badge(run.state) : "–"));
        }))));
  }

  return poll(refresh, () => 3000);
}
