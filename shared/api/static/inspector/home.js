// The start page: open a group, browse the Index, and every task queue with work waiting or under way first (its
// provisioner and worker type, pending and claimed counts, when a worker last asked for work: a queue tasks were
// created for that no worker ever polled is listed too), refreshed while shown. Listing needs
// queue:list-task-queues, counting queue:pending-count / queue:claimed-count per queue; the COUNTED most recently
// active queues are counted, the rest listed.
import { SLUGID } from "./addresses.js";
import * as api from "./api.js";
import { h, replace, setTitle, when } from "./dom.js";
import { poll } from "./live.js";

const COUNTED = 200;
const RECENT = 20; // recent task groups listed
const CONCURRENCY = 8;

export function homeView(target, showNotice) {
  setTitle("");
  const queues = h("div", { id: "task-queues" }, h("p", {}, "Loading task queues…"));
  const groups = h("div", { id: "recent-groups" }, h("p", {}, "Loading recent task groups…"));
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
    h("h2", {}, "Recent task groups"), groups,
    h("h2", {}, "Task queues"), queues);

  // The pushes of the last days (listRecentTaskGroups, this queue's extension): a group is listed once its second
  // task joined it; running while any task of it is unresolved.
  async function recentGroups() {
    let found;
    try {
      found = (await api.get("/task-groups/recent", { limit: RECENT })).taskGroups;
    } catch (error) {
      replace(groups, h("p", {}, error.status === 403
        ? "The recent task groups are hidden: they take the scope queue:list-recent-task-groups. Sign in with credentials that hold it."
        : `Recent task groups could not be listed: ${error.summary || error.message}`));
      return;
    }
    const key = JSON.stringify(found);
    if (groups.dataset.key === key) return;
    groups.dataset.key = key;
    if (found.length === 0) {
      replace(groups, h("p", {}, "No task group of more than one task in the last 7 days."));
      return;
    }
    replace(groups, h("table", { id: "recent-groups-table" },
      h("thead", {}, h("tr", {}, ["Task group", "Scheduler", "Since", "State"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, found.map((g) => h("tr", { dataset: { group: g.taskGroupId } },
        h("td", {}, h("a", { href: `#/groups/${g.taskGroupId}` }, h("code", {}, g.taskGroupId))),
        h("td", {}, g.schedulerId), h("td", {}, when(g.since)),
        h("td", {}, g.unresolved ? "running" : "finished", g.sealed ? ", sealed" : ""))))));
  }

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

  // Every task queue: those workers asked for work from (listTaskQueues) and those tasks were created for, polled
  // or not (listSeenTaskQueues), one entry each: {taskQueueId, lastDateActive (null: never polled), lastTaskCreated}.
  async function taskQueues() {
    const [polled, seen] = await Promise.all([
      api.all("/task-queues", "taskQueues"),
      api.all("/task-queues-seen", "taskQueues").catch(() => []), // a queue of an older release: none
    ]);
    const merged = new Map(polled.map((q) => [q.taskQueueId, { ...q, lastTaskCreated: null }]));
    for (const q of seen) {
      const known = merged.get(q.taskQueueId);
      if (known) known.lastTaskCreated = q.lastTaskCreated;
      else merged.set(q.taskQueueId, { taskQueueId: q.taskQueueId, lastDateActive: null, lastTaskCreated: q.lastTaskCreated });
    }
    const latest = (q) => [q.lastDateActive || "", q.lastTaskCreated || ""].sort().at(-1);
    return [...merged.values()].sort((a, b) => latest(b).localeCompare(latest(a)));
  }

  async function refresh() {
    let found;
    try {
      found = await taskQueues();
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
        h("td", {}, q.lastDateActive ? when(q.lastDateActive) : h("span", { class: "never-polled" },
          "no worker has asked for work")));
    };
    const table = (list, id) => h("table", { id },
      h("thead", {}, h("tr", {}, ["Provisioner", "Worker type", "Pending", "Claimed", "A worker last asked for work"]
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

  return poll(async () => { await Promise.all([recentGroups(), refresh()]); }, () => 15000);
}
