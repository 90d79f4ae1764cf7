// The start page: open a group, browse the Index, and every task queue with work waiting or under way first (its
// provisioner and worker type, pending and claimed counts, when a worker last asked for work: a queue tasks were
// created for that no worker ever polled is listed too), refreshed while shown. Listing needs
// queue:list-task-queues, counting queue:pending-count / queue:claimed-count per queue; the COUNTED most recently
// active queues are counted, the rest listed.
import { SLUGID } from "./addresses.js";
import * as api from "./api.js";
import { deploymentConfig } from "./config.js";
import { badge, h, replace, setTitle, when } from "./dom.js";
import { poll } from "./live.js";
import { countsText, filterPushes, worstState } from "./pushes.js";

const COUNTED = 200;
// A task queue's lastDateActive is written at most every 6 hours (shared/domain/workers.py): a date it was active
// by, not when a worker last asked; what workers do now is the claimed count.
const ACTIVITY_NOTE = "Written at most every 6 hours: the task queue was active by then; the claimed count says "
  + "what its workers do now";
const RECENT = 100; // recent task groups read (the most the queue answers)
const PUSH_PAGE = 20; // of them shown at once
const CONCURRENCY = 8;

/**
 * @param {HTMLElement} target
 * @param {(kind: "error" | "info", text: string) => void} showNotice
 * @param {URLSearchParams} [query]
 * @returns {View}
 */
export function homeView(target, showNotice, query = new URLSearchParams()) {
  setTitle("");
  const queues = h("div", { id: "task-queues" }, h("p", {}, "Loading task queues…"));
  const groups = h("div", { id: "recent-groups" }, h("p", {}, "Loading recent task groups…"));
  replace(target,
    h("h1", {}, "Queue inspector"),
    h("p", {}, "Open a task, a task group, a push's revision, a task's label, a task queue, an index path, or a ",
      "Taskcluster or Treeherder URL in the box above, or ",
      "follow a link from the API's answers. A task's page links to its group, its task queue, its runs' workers ",
      "and its logs. ", h("a", { href: "#/index/", id: "browse-index" }, "Browse the Index"),
      " to find completed tasks by name."),
    h("form", { class: "open-group", onsubmit: (/** @type {SubmitEvent} */ event) => {
      event.preventDefault();
      const value = String(new FormData(/** @type {HTMLFormElement} */ (event.target)).get("group")).trim();
      if (SLUGID.test(value)) window.location.hash = `#/groups/${value}`;
      else showNotice("error", `"${value}" is not a taskGroupId`);
    } },
    h("label", { for: "group-id" }, "Task group "),
    h("input", { id: "group-id", name: "group", placeholder: "taskGroupId", autocomplete: "off" }),
    h("button", { type: "submit" }, "Show group")),
    h("h2", {}, "Recent pushes"), groups,
    h("h2", {}, "Task queues"), queues);

  // The pushes of the last days (listRecentTaskGroups, this queue's extension): a group is listed once its second
  // task joined it; each with its decision task, project and revision, and its counts, coloured by its worst task.
  /** @type {Push[]} */
  let pushes = [];
  let page = 0;
  /** @type {{pushIndex?: string, treeherder?: string}} */
  let config = {};
  deploymentConfig().then((c) => {
    config = c;
    if (pushes.length) showPushes(); // with its Treeherder links
  });
  const filter = h("input", { id: "push-filter", type: "search", autocomplete: "off", value: query.get("push") || "",
    placeholder: "project, revision, owner, name or taskGroupId", oninput: () => { page = 0; showPushes(); } });
  const pushList = h("div", { id: "push-list" });
  replace(groups, h("div", { class: "push-filter" }, h("label", { for: "push-filter" }, "Filter pushes "), filter),
    pushList);

  /**
   * @param {Push} g
   */
  function pushRow(g) {
    const d = g.decisionTask;
    const worst = worstState(g);
    const revision = g.revision ? h("code", { title: g.revision }, g.revision.slice(0, 12)) : "–";
    return h("tr", { dataset: { group: g.taskGroupId, worst } },
      h("td", {}, h("a", { href: `#/groups/${g.taskGroupId}` }, d && d.name ? d.name : h("code", {}, g.taskGroupId)),
        d && d.name ? h("div", { class: "quiet" }, h("code", {}, g.taskGroupId)) : null),
      h("td", {}, g.project || "–"),
      h("td", {}, config.treeherder && g.project && g.revision
        ? h("a", { href: `${config.treeherder}/jobs?repo=${encodeURIComponent(g.project)}&revision=${g.revision}`,
          title: "this push in Treeherder" }, revision)
        : revision),
      h("td", {}, d && d.owner ? d.owner : "–"), h("td", {}, when(g.since)),
      h("td", {}, badge(worst), " ", h("span", { class: "push-counts" }, countsText(g), g.sealed ? ", sealed" : "")));
  }

  function showPushes() {
    const found = filterPushes(pushes, filter.value);
    const pages = Math.max(1, Math.ceil(found.length / PUSH_PAGE));
    page = Math.min(page, pages - 1);
    const shown = found.slice(page * PUSH_PAGE, (page + 1) * PUSH_PAGE);
    if (found.length === 0) {
      replace(pushList, h("p", {}, pushes.length ? `No recent push matches "${filter.value}".`
        : "No task group of more than one task in the last 7 days."));
      return;
    }
    /**
     * @param {number} to
     */
    const go = (to) => () => { page = to; showPushes(); };
    replace(pushList, h("table", { id: "recent-groups-table" },
      h("thead", {}, h("tr", {}, ["Push", "Project", "Revision", "Owner", "Since", "Tasks"]
        .map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, shown.map(pushRow))),
    h("p", { class: "pager" }, `${page * PUSH_PAGE + 1}–${page * PUSH_PAGE + shown.length} of ${found.length}${
       found.length < pushes.length ? ` matching (${pushes.length} recent)` : " recent pushes"}`,
    " ", h("button", { type: "button", id: "pushes-previous", disabled: page === 0, onclick: go(page - 1) }, "Previous"),
    " ", h("button", { type: "button", id: "pushes-next", disabled: page >= pages - 1, onclick: go(page + 1) }, "Next")));
  }

  async function recentGroups() {
    let found;
    try {
      found = (await api.get("/task-groups/recent", { limit: RECENT })).taskGroups;
    } catch (error) {
      replace(pushList, h("p", {}, api.statusOf(error) === 403
        ? ["The recent pushes are hidden: they take the scope ", h("code", {}, "queue:list-recent-task-groups"),
          api.credentials() ? ", which your credentials lack." : [". Sign in with credentials that hold it; a deployment "
            + "that wants everyone to see them gives it to its ", h("code", {}, "anonymous"), " role."]]
        : `Recent task groups could not be listed: ${api.said(error)}`));
      return;
    }
    const key = JSON.stringify(found);
    if (pushList.dataset.key === key) return;
    pushList.dataset.key = key;
    pushes = found;
    showPushes();
  }

  let hiddenBy = ""; // the scopes that would show the counts a refusal hid
  /**
   * @param {TaskQueueSeen[]} list
   */
  async function counted(list) {
    /** @type {Map<string, QueueCounts | null>} */
    const out = new Map();
    let next = 0;
    async function worker() {
      while (next < list.length) {
        const q = list[next];
        next += 1;
        try {
          out.set(q.taskQueueId, await api.get(`/task-queues/${q.taskQueueId}/counts`));
        } catch (error) {
          out.set(q.taskQueueId, null); // not allowed to count it: listed without counts
          if (api.statusOf(error) === 403 && !hiddenBy) hiddenBy = api.missingScopes(error);
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
    /**
     * @param {TaskQueueSeen} q
     */
    const latest = (q) => [q.lastDateActive || "", q.lastTaskCreated || ""].sort()[1];
    return [...merged.values()].sort((a, b) => latest(b).localeCompare(latest(a)));
  }

  async function refresh() {
    let found;
    try {
      found = await taskQueues();
    } catch (error) {
      replace(queues, h("p", {}, api.statusOf(error) === 403
        ? "Sign in with credentials that hold queue:list-task-queues to see the task queues and their work."
        : `Task queues could not be listed: ${api.said(error)}`));
      return;
    }
    if (found.length === 0) {
      replace(queues, h("p", {}, "No task queue has been seen yet."));
      return;
    }
    const counts = await counted(found.slice(0, COUNTED));
    /**
     * @param {TaskQueueSeen} q
     */
    const busy = (q) => {
      const c = counts.get(q.taskQueueId);
      return c ? c.pendingTasks + c.claimedTasks : -1;
    };
    const ordered = [...found].sort((a, b) => busy(b) - busy(a) || a.taskQueueId.localeCompare(b.taskQueueId));
    const working = ordered.filter((q) => busy(q) > 0);
    /**
     * @param {TaskQueueSeen} q
     */
    const row = (q) => {
      const [provisionerId, workerType] = q.taskQueueId.split("/");
      const c = counts.get(q.taskQueueId);
      return h("tr", { dataset: { taskQueue: q.taskQueueId } },
        h("td", {}, provisionerId), h("td", {}, h("a", { href: `#/queues/${q.taskQueueId}` }, workerType)),
        h("td", { class: "num" }, c ? c.pendingTasks : "–"), h("td", { class: "num" }, c ? c.claimedTasks : "–"),
        h("td", {}, q.lastDateActive ? when(q.lastDateActive) : h("span", { class: "never-polled" },
          "no worker has asked for work")));
    };
    /**
     * @param {TaskQueueSeen[]} list
     * @param {string} id
     */
    const table = (list, id) => h("table", { id },
      h("thead", {}, h("tr", {}, ["Provisioner", "Worker type", "Pending", "Claimed", "Workers' activity recorded"]
        .map((c) => h("th", { scope: "col", title: c === "Workers' activity recorded" ? ACTIVITY_NOTE : null }, c)))),
      h("tbody", {}, list.map(row)));
    const idle = ordered.filter((q) => busy(q) <= 0);
    const key = JSON.stringify(ordered.map((q) => [q.taskQueueId, counts.get(q.taskQueueId), q.lastDateActive]));
    if (queues.dataset.key === key) return; // unchanged: the table (and an opened list) stays as it is
    queues.dataset.key = key;
    const hidden = found.slice(0, COUNTED).filter((q) => counts.get(q.taskQueueId) === null).length;
    const hiddenNote = hidden ? h("p", { id: "hidden-counts", class: "quiet" },
      `The counts of ${hidden} task queue${hidden > 1 ? "s are" : " is"} hidden from `
      + `${api.credentials() ? "your credentials" : "anonymous callers"}`
      + `${hiddenBy ? `: counting takes ${hiddenBy}` : ""}; ${hidden > 1 ? "they are" : "it is"} listed without them.`)
      : null;
    replace(queues, hiddenNote,
      working.length ? table(working, "busy-queues")
        : h("p", {}, hidden ? "No task queue whose counts you may see has pending or claimed work now."
          : "No task queue has pending or claimed work now."),
      idle.length ? h("details", {}, h("summary", {}, `${idle.length} other task queue${idle.length > 1 ? "s" : ""}${
         found.length > COUNTED ? ` (the ${COUNTED} most recently active counted)` : ""}`),
      table(idle, "idle-queues")) : null);
  }

  return poll(async () => { await Promise.all([recentGroups(), refresh()]); }, () => 15000);
}
