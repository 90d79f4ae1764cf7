// The task group view: every task with its state, name and run timing; counts per state and a progress bar; a
// state filter; pages of PAGE_SIZE tasks; refreshed by polling every page of listTaskGroup (less often for large
// groups) while the page is shown.
import * as api from "./api.js";
import { SLUGID } from "./addresses.js";
import { badge, duration, h, message, replace, setTitle, STATES, when, RESOLVED } from "./dom.js";
import { poll } from "./live.js";

const PAGE_SIZE = 100;

export function groupView(target, groupId, query) {
  setTitle(`Task group ${groupId}`);
  if (!SLUGID.test(groupId)) {
    replace(target, h("h1", {}, "Not a taskGroupId"), message("error", "A taskGroupId is a slugid: 22 characters of "
      + "letters, digits, - and _, as the queue gives them."));
    return null;
  }
  const filter = STATES.includes(query.get("state")) ? query.get("state") : "";
  let page = Math.max(1, Number(query.get("page")) || 1);
  const header = h("div", { class: "group-info" }, "Loading…");
  const counts = h("div", { class: "counts", role: "group", "aria-label": "Filter by state" });
  const bar = h("div", { class: "progress", role: "img", "aria-label": "progress" });
  const table = h("div", { id: "group-tasks" });
  const status = h("p", { class: "updated", id: "group-updated" });
  const problem = h("div");
  replace(target, h("h1", {}, "Task group ", h("code", {}, groupId)), header, problem, bar, counts, table, status);

  let tasks = [];

  function link(state, p) {
    const params = new URLSearchParams();
    if (state) params.set("state", state);
    if (p > 1) params.set("page", p);
    const qs = params.toString();
    return `#/groups/${groupId}${qs ? `?${qs}` : ""}`;
  }

  function render(info) {
    replace(header, h("dl", { class: "facts" },
      h("dt", {}, "schedulerId"), h("dd", {}, info.schedulerId),
      info.projectId ? [h("dt", {}, "projectId"), h("dd", {}, info.projectId)] : null,
      h("dt", {}, "sealed"), h("dd", {}, info.sealed ? when(info.sealed) : "no"),
      h("dt", {}, "expires"), h("dd", {}, when(info.expires))));
    const byState = Object.fromEntries(STATES.map((s) => [s, 0]));
    for (const t of tasks) byState[t.status.state] += 1;
    const total = tasks.length;
    const order = ["completed", "failed", "exception", "running", "pending", "unscheduled"];
    replace(bar, order.filter((s) => byState[s] > 0).map((s) => h("span", {
      class: `segment state-${s}`, style: `width: ${(100 * byState[s]) / total}%`, title: `${s}: ${byState[s]}`,
    })));
    bar.setAttribute("aria-label", `${byState.completed} of ${total} completed`);
    replace(counts,
      h("a", { href: link("", 1), class: `count${filter ? "" : " active"}`, id: "count-all" }, `all ${total}`),
      STATES.map((s) => h("a", { href: link(s, 1), class: `count${filter === s ? " active" : ""}`,
        id: `count-${s}`, dataset: { count: byState[s] } }, badge(s), ` ${byState[s]}`)));
    const shown = tasks.filter((t) => !filter || t.status.state === filter)
      .sort((a, b) => (a.task.metadata.name || "").localeCompare(b.task.metadata.name || "")
        || a.status.taskId.localeCompare(b.status.taskId));
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    page = Math.min(page, pages);
    const rows = shown.slice((page - 1) * PAGE_SIZE, page * PAGE_SIZE).map((t) => {
      const runs = t.status.runs;
      const last = runs[runs.length - 1];
      return h("tr", { dataset: { taskId: t.status.taskId, state: t.status.state } },
        h("td", {}, h("a", { href: `#/tasks/${t.status.taskId}` }, t.task.metadata.name || t.status.taskId)),
        h("td", {}, badge(t.status.state)),
        h("td", { class: "num" }, runs.length),
        h("td", {}, last ? when(last.started) : "–"),
        h("td", {}, last ? when(last.resolved) : "–"),
        h("td", { class: "num" }, last ? duration(last.started, last.resolved) : "–"));
    });
    replace(table,
      shown.length === 0 ? h("p", {}, filter ? `No ${filter} task in this group.` : "No task in this group yet.")
        : h("table", { class: "tasks" },
          h("thead", {}, h("tr", {}, ["Task", "State", "Runs", "Started", "Resolved", "Took"].map((c) => h("th", {}, c)))),
          h("tbody", {}, rows)),
      pages > 1 ? h("nav", { class: "pager", "aria-label": "pages" },
        page > 1 ? h("a", { href: link(filter, page - 1), rel: "prev" }, "‹ previous") : null,
        h("span", { id: "page-of" }, ` page ${page} of ${pages} `),
        page < pages ? h("a", { href: link(filter, page + 1), rel: "next" }, "next ›") : null) : null);
  }

  async function refresh() {
    const found = [];
    let info = null;
    await api.all(`/task-group/${groupId}/list`, "tasks", {
      onPage: (p) => {
        found.push(...p.tasks);
        info = info || p;
      },
    });
    tasks = found;
    replace(problem);
    render(info);
    const live = tasks.some((t) => !RESOLVED.has(t.status.state));
    replace(status, live ? h("span", { class: "live-dot", "aria-hidden": "true" }) : null,
      `Updated ${new Date().toLocaleTimeString()}${live ? "; updating while tasks run" : ""}`);
  }

  // Every page is read each time: about 1 s between refreshes per 500 tasks, at least 2 s; 10 s once all resolved.
  const interval = () => (tasks.length && tasks.every((t) => RESOLVED.has(t.status.state)) ? 10000
    : Math.max(2000, Math.min(15000, (tasks.length / 500) * 1000)));
  return poll(refresh, interval, (error) => {
    if (tasks.length === 0) replace(header);
    replace(problem, message("error", error.status === 404 ? `There is no task group ${groupId}.`
      : `The group could not be read: ${error.summary || error.message}`));
  });
}
