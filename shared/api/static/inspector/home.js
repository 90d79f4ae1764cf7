// The start page: open a group, browse the Index, and every task queue with work waiting or under way first (its
// provisioner and worker type, pending and claimed counts, last activity), refreshed while shown. Counting needs
// queue:list-task-queues, and queue:pending-count / queue:claimed-count per queue; the COUNTED most recently
// active queues are counted, the rest listed.
import { SLUGID } from "./addresses.js";
import * as api from "./api.js";
import { h, replace, setTitle, when } from "./dom.js";
import { poll } from "./live.js";

const COUNTED = 200;
const CONCURRENCY = 8;

export function homeView(target, showNotice) {
  setTitle("");
  const queues = h("div", { id: "task-queues" }, h("p", {}, "Loading task queues…"));
  replace(target,
    h("h1", {}, "Queue inspector"),
    h("p", {}, "Open a task, a task group, a task queue, an index path or a Taskcluster URL in the box above, or ",
      "follow a link from the API's answers. A task's page links to its group, its task queue, its runs' workers ",
      "and its logs. ", h("a", { href: "#/index/", id: "browse-index" }, "Browse the Index"),
      " to find completed tasks by name."),
    h("form", { class: "open-group", onsubmit: (event) => {
      event.preventDefault();
      const value = String(new FormData(event.target).get("group")).trim();
      if (SLUGID.test(value)) window.location.hash = `#/groups/${value}`;
      else showNotice("error", `"${value}" is not a taskGroupId`);
    } },
    h("label", { for: "group-id" }, "Task group "),
    h("input", { id: "group-id", name: "group", placeholder: "taskGroupId", autocomplete: "off" }),
    h("button", { type: "submit" }, "Show group")),
    h("h2", {}, "Task queues"), queues);

  async function counted(list) {
    const out = new Map();
    let next = 0;
    async function worker() {
      while (next < list.length) {
        const q = list[next];
        next += 1;
        try {
          out.set(q.taskQueueId, await api.get(`/task-queues/${q.taskQueueId}/counts`));
        } catch {
          out.set(q.taskQueueId, null); // not allowed to count it: listed without counts
        }
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    return out;
  }

  async function refresh() {
    let found;
    try {
      found = await api.all("/task-queues", "taskQueues");
    } catch (error) {
      replace(queues, h("p", {}, error.status === 403
        ? "Sign in with credentials that hold queue:list-task-queues to see the task queues and their work."
        : `Task queues could not be listed: ${error.summary || error.message}`));
      return;
    }
    if (found.length === 0) {
      replace(queues, h("p", {}, "No task queue has been seen yet."));
      return;
    }
    found.sort((a, b) => (b.lastDateActive || "").localeCompare(a.lastDateActive || ""));
    const counts = await counted(found.slice(0, COUNTED));
    const busy = (q) => {
      const c = counts.get(q.taskQueueId);
      return c ? c.pendingTasks + c.claimedTasks : -1;
    };
    const ordered = [...found].sort((a, b) => busy(b) - busy(a) || a.taskQueueId.localeCompare(b.taskQueueId));
    const working = ordered.filter((q) => busy(q) > 0);
    const row = (q) => {
      const [provisionerId, workerType] = q.taskQueueId.split("/");
      const c = counts.get(q.taskQueueId);
      return h("tr", { dataset: { taskQueue: q.taskQueueId } },
        h("td", {}, provisionerId), h("td", {}, h("a", { href: `#/queues/${q.taskQueueId}` }, workerType)),
        h("td", { class: "num" }, c ? c.pendingTasks : "–"), h("td", { class: "num" }, c ? c.claimedTasks : "–"),
        h("td", {}, when(q.lastDateActive)));
    };
    const table = (list, id) => h("table", { id },
      h("thead", {}, h("tr", {}, ["Provisioner", "Worker type", "Pending", "Claimed", "Last active"]
        .map((c) => h("th", { scope: "col" }, c)))), h("tbody", {}, list.map(row)));
    const idle = ordered.filter((q) => busy(q) <= 0);
    const key = JSON.stringify(ordered.map((q) => [q.taskQueueId, counts.get(q.taskQueueId), q.lastDateActive]));
    if (queues.dataset.key === key) return; // unchanged: the table (and an opened list) stays as it is
    queues.dataset.key = key;
    replace(queues,
      working.length ? table(working, "busy-queues")
        : h("p", {}, "No task queue has pending or claimed work now."),
      idle.length ? h("details", {}, h("summary", {}, `${idle.length} other task queue${idle.length > 1 ? "s" : ""}`
        + (found.length > COUNTED ? ` (the ${COUNTED} most recently active counted)` : "")),
      table(idle, "idle-queues")) : null);
  }

  return poll(refresh, () => 15000);
}
