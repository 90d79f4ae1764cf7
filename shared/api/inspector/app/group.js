// The task group view: the group in a sentence (finished, running, waiting, stuck), hints for what holds it up,
// counts per state (each a filter) and a progress bar, a name search, and the tasks (failures first) in pages of
// PAGE_SIZE with their reasons, timings and, for an unscheduled task, what it waits for. Filters, pages and the
// search work on the tasks the page holds (no read). A refresh reads the statuses of the unresolved tasks on
// screen, of the running ones, and of ROTATION more in turn (a bounded read whatever the group's size: a 10,000-task
// group is swept every ten refreshes); the whole listing while the group grows and every FULL_EVERY ms otherwise
// (tasks that joined, reruns). Rows are updated in place, cell by cell, so focus, selection and scroll stay.
import { SLUGID } from "./addresses.js";
import * as api from "./api.js";
import { deploymentConfig } from "./config.js";
import { badge, duration, h, message, notASlugid, replace, RESOLVED, setTitle, STATES, when } from "./dom.js";
import { GroupGraph } from "./graph.js";
import { GroupModel, lastRun, PASSED_ON_RERUN, passedOnRerun } from "./groupmodel.js";
import { poll } from "./live.js";
import { pushOf } from "./pushes.js";
import { names, rerunPlan } from "./rerunplan.js";
import { previousPush } from "./finding.js";
import { explainRun } from "./whyread.js";

// Failed runs on the page shown whose logs are read for their exit code and first error line (the first ones, in
// the order shown: failures come first), and how many such reads at once.
const WHY_ROWS = 20;
const WHY_AT_ONCE = 4;
const PAGE_SIZE = 100;
const FULL_EVERY = 60000;
const ROTATION = 1000; // unresolved tasks off screen whose status a refresh reads, in turn
const QUEUE_CHECK_EVERY = 30000;
const IDLE_AFTER = 30; // seconds a task waits pending, with none of its queue running here, before a hint says so

// Put `node` before `ref` in `parent`. A row already on the page is moved with moveBefore where the browser has it
// (Chromium 133 on): an insertBefore takes it out and back, which drops the focus and a text selection inside it
// (issue #65: a live group's re-sorts did).
/**
 * @param {Element & {moveBefore?: (node: Node, ref: Node | null) => void}} parent
 * @param {Element} node
 * @param {Element | null} ref
 */
function place(parent, node, ref) {
  if (node.parentNode === parent && typeof parent.moveBefore === "function") parent.moveBefore(node, ref);
  else parent.insertBefore(node, ref);
}

/**
 * @param {HTMLElement} target
 * @param {string} groupId
 * @param {URLSearchParams} query
 * @returns {View | null}
 */
export function groupView(target, groupId, query) {
  setTitle(`Task group ${groupId}`);
  if (!SLUGID.test(groupId)) {
    return notASlugid(target, "taskGroupId");
  }
  const model = new GroupModel();
  let filter = "";
  let page = 1;
  let search = "";
  const header = h("div", { class: "group-info" });
  /** @type {{push: Push, states: Map<string, {taskId: string, state: string}>} | null} */
  let previous = null; // the project's previous push, its tasks' states by name (readPrevious)
  let previousRead = false;
  /** @type {Promise<TaskDefinition | undefined> | null} */
  let decisionTask = null; // the decision task's whole definition, read once (pushFacts)
  /** @type {{project: string, revision: string} | null} */
  let decisionPush = null; // the push it built
  /** @type {string | undefined} */
  let treeherderUrl; // the deployment's Treeherder (config.json), for the push's link
  deploymentConfig().then((c) => {
    treeherderUrl = c.treeherder;
  });
  const summary = h("p", { id: "group-summary", class: "summary", role: "status" }, "Loading…");
  const hints = h("ul", { id: "group-hints", class: "hints" });
  const problem = h("div");
  const bar = h("div", { class: "progress", role: "img", "aria-label": "progress" });
  const countLinks = new Map(["", ...STATES].map((s) => [s, h("a", { id: `count-${s || "all"}`, class: "count" })]));
  const counts = h("div", { class: "counts", role: "group", "aria-label": "Filter by state" }, [...countLinks.values()]);
  const searchBox = h("input", { type: "search", id: "group-search", placeholder: "Find by name or taskId",
    autocomplete: "off", oninput: () => {
      search = searchBox.value;
      page = 1;
      history.replaceState(null, "", link(filter, 1));
      render();
    } });
  const tbody = h("tbody");
  const table = h("table", { class: "tasks" },
    h("thead", {}, h("tr", {}, ["Task", "State", "Runs", "Started", "Resolved or waiting", "Took"]
      .map((c) => h("th", { scope: "col" }, c)))), tbody);
  const empty = h("p", { id: "group-empty", hidden: true });
  const prev = h("a", { rel: "prev" }, "‹ previous");
  const next = h("a", { rel: "next" }, "next ›");
  const pageOf = h("span", { id: "page-of" });
  const pager = h("nav", { class: "pager", "aria-label": "pages", hidden: true }, prev, pageOf, next);
  const status = h("p", { class: "updated", id: "group-updated" });
  const actions = h("div", { class: "actions", id: "group-actions" });
  const feedback = h("div", { id: "group-feedback" });
  const graph = new GroupGraph((taskId) => {
    window.location.hash = `#/tasks/${taskId}`;
  });
  let drawn = -1; // how many tasks the graph was laid out with
  const graphBox = h("details", { id: "graph-details", ontoggle: () => {
    if (graphBox.open) {
      graph.draw(model.tasks);
      drawn = model.tasks.size;
    }
  } }, h("summary", {}, "Dependency graph"), graph.element);
  replace(target, h("h1", {}, "Task group ", h("code", {}, groupId)), summary, hints, actions, feedback, header,
    problem, bar, graphBox,
    counts,
    h("p", { class: "group-search" }, h("label", { for: "group-search" }, "Find "), searchBox),
    h("div", { id: "group-tasks" }, table, empty), pager, status);
  let lastFull = 0; // when the whole group was last listed
  /** @type {ReturnType<typeof poll> | null} */
  let polling = null; // the refreshes (poll), started once everything below is defined
  const rows = new Map(); // taskId -> {tr, keys: [cell keys]}
  /** @type {GroupEntry[]} */
  let onScreen = []; // the entries of the page shown
  // taskId/runId -> why that failed run failed (whyread.js: {name, exitCode, errors}), or null (no log, too long)
  /** @type {Map<string, RunExplanation | null>} */
  const explanations = new Map();
  const explaining = new Set(); // taskId/runId being read
  /** @type {Array<() => Promise<void>>} */
  const whyQueue = [];
  let whyRunning = 0;
  const queues = new Map(); // taskQueueId -> {checked, claimed (a count) | undefined (unknown), hiddenBy}
  // Failed tasks marked to rerun once their dependencies complete (listTaskGroupFailures): taskId -> what they wait for
  let waiting = new Map();

  /**
   * @param {string} state
   * @param {number} p
   */
  function link(state, p) {
    const params = new URLSearchParams();
    if (state) params.set("state", state);
    if (p > 1) params.set("page", String(p));
    if (search) params.set("q", search);
    const qs = params.toString();
    return `#/groups/${groupId}${qs ? `?${qs}` : ""}`;
  }

  /**
   * @param {URLSearchParams} q
   */
  function readQuery(q) {
    const state = q.get("state") || "";
    filter = STATES.includes(state) || state === PASSED_ON_RERUN ? state : "";
    page = Math.max(1, Number(q.get("page")) || 1);
    search = q.get("q") || "";
    if (searchBox.value !== search) searchBox.value = search;
  }

  // The cells of a task's row: [key, content] each; a cell is redrawn only when its key changed.
  /**
   * @param {GroupEntry} entry
   * @returns {Array<[string, () => Child]>}
   */
  function cells(entry) {
    const { task, status: s } = entry;
    const run = lastRun(entry);
    const name = task.metadata.name || s.taskId;
    const now = new Date();
    /** @type {Child[]} */
    let state = [badge(s.state)];
    let stateKey = s.state;
    const waits = waiting.get(s.taskId);
    if (waits && RESOLVED.has(s.state) && s.state !== "completed") {
      const first = model.tasks.get(waits[0]);
      const named = first ? h("a", { href: `#/tasks/${waits[0]}` }, first.task.metadata.name || waits[0])
        : h("code", {}, waits[0] || "its dependencies");
      state = [badge(s.state), " ", h("span", { class: "rerun-waits" }, "reruns after ", named,
        waits.length > 1 ? ` and ${waits.length - 1} more` : "")];
      stateKey += `rerun${waits.join(",")}`;
    } else if ((s.state === "failed" || s.state === "exception") && run) {
      if (run.reasonResolved !== s.state) {
        state.push(" ", h("span", { class: "reason" }, run.reasonResolved));
        stateKey += run.reasonResolved;
      }
      const found = explanations.get(`${s.taskId}/${run.runId}`);
      if (found) {
        state.push(whyLine(s.taskId, run.runId, found));
        stateKey += JSON.stringify([found.exitCode, found.errors[0]]);
      }
      const before = previous?.states.get(task.metadata.name || "");
      if (previous && before) {
        // The same label on the project's previous push: failing there too says "not this push's doing".
        state.push(h("div", { class: "same-label previous-push" }, "previous push (",
          h("code", {}, (previous.push.revision || previous.push.taskGroupId).slice(0, 12)), "): ",
          h("a", { href: `#/tasks/${before.taskId}` }, before.state)));
        stateKey += `v${before.state}`;
      }
      const others = model.sameName(entry);
      if (others.length) {
        // Retriggers of the same label beside it: intermittent when they pass.
        const tally = ["completed", "failed", "exception"].map((st) => [st, others.filter((o) => o.status.state === st)
          .length]).filter(([, n]) => n).map(([st, n]) => `${n} ${st}`);
        const unfinished = others.filter((o) => !RESOLVED.has(o.status.state)).length;
        const said = [...tally, unfinished ? `${unfinished} unfinished` : ""].filter(Boolean).join(", ");
        state.push(h("div", { class: "same-label" }, h("a", {
          href: `#/groups/${groupId}?q=${encodeURIComponent(task.metadata.name || "")}` },
        `${others.length} more with this name`), `: ${said}`));
        stateKey += `n${said}`;
      }
    } else if (passedOnRerun(entry)) {
      const failed = s.runs.filter((r) => r.state === "failed").length;
      state.push(" ", h("span", { class: "passed-on-rerun", title: "intermittent, or fixed between its runs" },
        `passed on rerun (${failed} failed run${failed > 1 ? "s" : ""} before)`));
      stateKey += `p${failed}`;
    } else if (s.state === "unscheduled") {
      const why = model.why(entry);
      const first = why.failed[0] || why.waiting[0];
      const more = why.failed.length + why.waiting.length - 1;
      const named = first ? h("a", { href: `#/tasks/${first.status.taskId}` }, first.task.metadata.name || first.status.taskId) : null;
      const root = why.failed.length ? model.roots(entry)[0] : undefined;
      if (root && root !== first) {
        // Blocked through another blocked task: the failure to rerun is named, and the task it comes through.
        state.push(" ", h("span", { class: "blocked" }, "blocked by ",
          h("a", { href: `#/tasks/${root.status.taskId}` }, root.task.metadata.name || root.status.taskId),
          h("span", { class: "reason" }, " through ", named)));
        stateKey += `r${root.status.taskId}`;
      } else if (why.failed.length) state.push(" ", h("span", { class: "blocked" }, "blocked by ", named));
      else if (first) state.push(" ", h("span", { class: "reason" }, "waits for ", named));
      else if (why.outside) state.push(" ", h("span", { class: "reason" }, `waits for ${why.outside} task${why.outside > 1 ? "s" : ""} outside this group`));
      if (first && more > 0) state.push(h("span", { class: "reason" }, ` and ${more} more`));
      stateKey += `${why.failed.length ? "b" : "w"}${first ? first.status.taskId : why.outside}${more}`;
    }
    /** @type {Child} */
    let waited = "–";
    if (run && run.resolved) waited = when(run.resolved);
    else if (s.state === "pending" && run) waited = `pending for ${duration(run.scheduled, now.toISOString())}`;
    else if (s.state === "running" && run) waited = `running for ${duration(run.started, now.toISOString())}`;
    const waitedKey = typeof waited === "string" ? waited : run?.resolved ?? "";
    return [
      [`${name}|${s.taskId}`, () => h("a", { href: `#/tasks/${s.taskId}` }, name)],
      [stateKey, () => state],
      [String(s.runs.length), () => s.runs.length],
      [run ? run.started || "" : "", () => (run ? when(run.started) : "–")],
      [waitedKey, () => waited],
      [run ? `${run.started}|${run.resolved}|${s.state === "running" ? waited : ""}` : "",
        () => (run ? duration(run.started, run.resolved) : "–")],
    ];
  }

  // A failed run's why, under its state: exit code and first error line, the line a link into the log.
  /**
   * @param {string} taskId
   * @param {number} runId
   * @param {RunExplanation} found
   */
  function whyLine(taskId, runId, found) {
    const first = found.errors[0];
    const logHref = `#/tasks/${found.taskId}/runs/${found.runId}/logs/${encodeURIComponent(found.name)}`;
    return h("div", { class: "why-line" },
      found.exitCode !== null ? ["exit code ", h("code", {}, found.exitCode)] : null,
      found.exitCode !== null && first ? " · " : null,
      first && first.n !== null ? h("a", { href: `${logHref}#L${first.n}`, title: `line ${first.n} of the log` },
        first.line) : null,
      first && first.n === null ? h("a", { href: logHref, title: "near the end of a log too long to read whole" },
        first.line) : null);
  }

  // The failed runs shown (the first WHY_ROWS) explained from their logs, a few at a time; each once (one that
  // could not be read is tried again on a later render). Their rows are drawn again as answers come.
  function explainShown() {
    const wanted = onScreen.filter((e) => e.status.state === "failed" || e.status.state === "exception")
      .slice(0, WHY_ROWS).flatMap((e) => {
        const run = lastRun(e);
        return run ? [/** @type {[string, number, string]} */ ([e.status.taskId, run.runId, `${e.status.taskId}/${run.runId}`])] : [];
      })
      .filter(([, , key]) => !explanations.has(key) && !explaining.has(key));
    for (const [taskId, runId, key] of wanted) {
      explaining.add(key);
      whyQueue.push(async () => {
        try {
          explanations.set(key, await explainRun(taskId, runId));
          const entry = model.tasks.get(taskId);
          if (entry && onScreen.includes(entry)) rowFor(entry);
        } catch {
          // not remembered: tried again when the page is drawn again
        } finally {
          explaining.delete(key);
        }
      });
    }
    while (whyRunning < WHY_AT_ONCE && whyQueue.length) {
      const read = /** @type {() => Promise<void>} */ (whyQueue.shift());
      whyRunning += 1;
      read().finally(() => {
        whyRunning -= 1;
        explainShown();
      });
    }
  }

  /**
   * @param {GroupEntry} entry
   */
  function rowFor(entry) {
    const id = entry.status.taskId;
    let row = rows.get(id);
    if (!row) {
      const tds = [0, 1, 2, 3, 4, 5].map((i) => h("td", { class: i === 2 || i === 5 ? "num" : null }));
      row = { tr: h("tr", { dataset: { taskId: id } }, tds), keys: [] };
      rows.set(id, row);
    }
    row.tr.dataset.state = entry.status.state;
    cells(entry).forEach(([key, content], i) => {
      if (row.keys[i] !== key) {
        row.keys[i] = key;
        replace(row.tr.children[i], content());
      }
    });
    return row.tr;
  }

  // The push the group is (its decision task: the task the group is named after, as taskgraph makes it): the
  // project and revision it built, its owner, and the push in Treeherder when the deployment names it.
  function pushFacts() {
    const decision = model.tasks.get(groupId);
    if (!decision) return null;
    if (decisionTask === null) {
      decisionTask = api.get(`/task/${groupId}`).then((task) => { // the brief listing has no routes or payload
        decisionPush = pushOf(task);
        render();
        return task;
      }).catch(() => undefined);
    }
    const push = decisionPush;
    const treeherder = treeherderUrl && push && push.project ? h("a", { id: "push-treeherder",
      href: `${treeherderUrl}/jobs?repo=${encodeURIComponent(push.project)}&revision=${push.revision}` }, "Treeherder")
      : null;
    return [h("dt", {}, "push"), h("dd", { id: "group-push" },
      push ? [push.project ? `${push.project} ` : "", h("code", { title: push.revision }, push.revision.slice(0, 12)), " "]
        : "",
      "by ", decision.task.metadata.owner || "–", " · decision task ",
      h("a", { href: `#/tasks/${groupId}` }, decision.task.metadata.name || groupId),
      treeherder ? [" · ", treeherder] : null)];
  }

  // Everything shown, from the model: counts, bar, summary, hints and this page's rows (moved, added, removed, and
  // changed in place: each row compares its own cells).
  function render() {
    const c = model.counts();
    const total = model.tasks.size;
    if (model.info) {
      replace(header, h("dl", { class: "facts" }, pushFacts(),
        h("dt", {}, "schedulerId"), h("dd", {}, model.info.schedulerId),
        model.info.projectId ? [h("dt", {}, "projectId"), h("dd", {}, model.info.projectId)] : null,
        h("dt", {}, "sealed"), h("dd", {}, model.info.sealed ? when(model.info.sealed) : "no"),
        h("dt", {}, "expires"), h("dd", {}, when(model.info.expires))));
    }
    const order = ["completed", "failed", "exception", "running", "pending", "unscheduled"];
    replace(bar, order.filter((s) => c[s] > 0).map((s) => h("span", {
      class: `segment state-${s}`, style: `width: ${(100 * c[s]) / total}%`, title: `${s}: ${c[s]}`,
    })));
    bar.setAttribute("aria-label", `${c.completed} of ${total} completed`);
    for (const [s, a] of countLinks) {
      a.href = link(s, 1);
      a.classList.toggle("active", filter === s);
      if (s) {
        a.dataset.count = String(c[s]);
        if (a.dataset.label !== `${s}${c[s]}`) {
          a.dataset.label = `${s}${c[s]}`;
          replace(a, badge(s), ` ${c[s]}`);
        }
      } else {
        a.textContent = `all ${total}`;
      }
    }
    renderSummary();
    renderActions();
    if (graphBox.open) {
      if (drawn !== total) {
        graph.draw(model.tasks); // tasks joined or left: laid out again
        drawn = total;
      } else {
        graph.paint(); // states changed: colours only
      }
    }
    const shown = model.sorted(filter, search);
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    page = Math.min(page, pages);
    onScreen = shown.slice((page - 1) * PAGE_SIZE, page * PAGE_SIZE);
    const wanted = onScreen.map(rowFor);
    const keep = new Set(wanted);
    for (const tr of [...tbody.children]) if (!keep.has(tr)) tr.remove();
    wanted.forEach((tr, i) => {
      if (tbody.children[i] !== tr) place(tbody, tr, tbody.children[i] || null);
    });
    table.hidden = wanted.length === 0;
    empty.hidden = wanted.length > 0;
    empty.textContent = search ? `No task matches "${search}"${filter ? ` among the ${filter} ones` : ""}.`
      : filter ? `No ${filter} task in this group.` : "No task in this group yet.";
    pager.hidden = pages <= 1;
    prev.hidden = page <= 1;
    next.hidden = page >= pages;
    prev.href = link(filter, page - 1);
    next.href = link(filter, page + 1);
    pageOf.textContent = ` page ${page} of ${pages} `;
    explainShown();
  }

  function renderSummary() {
    const s = model.summary();
    const c = { ...s.counts };
    const toRerun = [...waiting.keys()].filter((id) => {
      const entry = model.tasks.get(id);
      return entry && (entry.status.state === "failed" || entry.status.state === "exception");
    });
    for (const id of toRerun) c[model.tasks.get(id)?.status.state ?? ""] -= 1; // waiting to rerun: not counted as failed
    const rerunNote = toRerun.length ? `, ${toRerun.length} to rerun once what they depend on completes` : "";
    const failures = c.failed + c.exception;
    const rerunPassed = model.passedOnRerun().length;
    const passedNote = rerunPassed ? [" ", h("a", { href: link(PASSED_ON_RERUN, 1), id: "passed-on-rerun" },
      `${rerunPassed} passed only on rerun`), "."] : "";
    let text;
    if (s.kind === "empty") text = "No task in this group yet.";
    else if (s.kind === "finished") {
      text = [failures ? "Finished with failures" : "Finished", s.at ? [" ", when(s.at)] : "", `: ${c.completed} completed`,
        c.failed ? `, ${c.failed} failed` : "", c.exception ? `, ${c.exception} exception` : "", rerunNote, ".",
        passedNote];
    } else if (s.kind === "running") {
      text = [`Running: ${c.running} running, ${c.pending} pending`, c.unscheduled ? `, ${c.unscheduled} unscheduled` : "",
        `; ${s.total - (s.unresolved ?? 0)} of ${s.total} resolved`, failures ? ` (${failures} failed)` : "", rerunNote,
        s.oldestPending ? `; the oldest pending task has waited ${duration(s.oldestPending)}` : "",
        ".", passedNote];
    } else if (s.kind === "stuck") {
      text = [`Stuck: ${s.blocked} task${(s.blocked ?? 0) > 1 ? "s" : ""} can never run, blocked by failed tasks; the queue `
        + "resolves them as exception (deadline-exceeded) at their deadline, ", when(s.deadline), " at the earliest. ",
        "Rerun the failed tasks to unblock them."];
    } else {
      text = [`Waiting: ${s.unresolved} unscheduled task${(s.unresolved ?? 0) > 1 ? "s" : ""}`,
        s.blocked ? ` (${s.blocked} blocked by failures)` : "", " wait for tasks outside this group or to be scheduled."];
    }
    summary.className = `summary summary-${s.kind}${s.kind === "finished" && failures ? " summary-failures" : ""}`;
    summary.dataset.kind = s.kind;
    replace(summary, text);
    const items = [];
    for (const idle of model.idleQueues()) {
      const waited = idle.since ? (Date.now() - new Date(idle.since).getTime()) / 1000 : 0;
      if (waited < IDLE_AFTER) continue;
      const known = queues.get(idle.taskQueueId);
      const qlink = h("a", { href: `#/queues/${idle.taskQueueId}` }, idle.taskQueueId);
      // Only what the queue's counts say now (a task queue's recorded activity may be hours old).
      let seen = "";
      if (known && known.claimed !== undefined) {
        seen = known.claimed ? `; the task queue has ${known.claimed} claimed task${known.claimed > 1 ? "s" : ""} now `
          + "(of other groups): its workers are busy" : "; no task of the task queue is claimed now: no worker is "
          + "taking its tasks";
      } else if (known && known.hiddenBy) seen = `; whether its workers are busy takes ${known.hiddenBy}`;
      items.push(h("li", { dataset: { queue: idle.taskQueueId } }, `No task of `, qlink,
        ` is running: ${idle.pending} pending here, the oldest for ${duration(idle.since)}`, seen, "."));
    }
    replace(hints, items);
    hints.hidden = items.length === 0;
  }

  // Seal (no task may join), Cancel (every unresolved task; the queue asks that the group be sealed first) and
  // Rerun failed (each failed or exception task, one rerunTaskWhenReady each): enabled by the scopes held, destructive
  // ones asked first.
  /** @type {string[] | null} */
  let held = null;
  async function renderActions() {
    if (!model.info) return;
    if (held === null) held = await api.scopes();
    const scopes = held;
    const info = model.info;
    const sealScope = `queue:seal-task-group:${info.schedulerId}/${groupId}`;
    const cancelScope = `queue:cancel-task-group:${info.schedulerId}/${groupId}`;
    const failed = [...model.tasks.values()].filter((t) => ["failed", "exception"].includes(t.status.state)
      && !waiting.has(t.status.taskId));
    const rerunnable = failed.filter((t) => api.satisfied(scopes, api.actionScopes("rerun-task",
      { ...t.task, taskGroupId: groupId }, t.status.taskId)));
    const unresolved = model.unresolvedIds().length;
    /**
     * @param {boolean} allowed
     * @param {string} what
     */
    const why = (allowed, what) => (allowed ? what : api.credentials() ? `Your credentials lack the scopes to ${what}`
      : `Sign in with credentials that may ${what}`);
    /** @type {Array<[string, string, boolean, string, () => void]>} */
    const buttons = [
      ["seal-group", "Seal", !info.sealed && api.satisfied(scopes, sealScope), why(api.satisfied(scopes, sealScope),
        "seal this group (no task may join it after)"), seal],
      ["cancel-group", "Cancel group", Boolean(info.sealed) && unresolved > 0 && api.satisfied(scopes, cancelScope),
        info.sealed ? why(api.satisfied(scopes, cancelScope), `cancel the ${unresolved} unresolved tasks`)
          : "Seal the group first: the queue cancels only a sealed group", cancelGroup],
      ["rerun-failed", `Rerun failed (${failed.length})`, rerunnable.length > 0,
        why(rerunnable.length > 0, "rerun the failed tasks"), () => rerunFailed(rerunnable)],
    ];
    const key = buttons.map(([id, label, enabled, title]) => `${id}${label}${enabled}${title}`).join("|");
    if (actions.dataset.key === key) return;
    actions.dataset.key = key;
    replace(actions, buttons.map(([id, label, enabled, title, onclick]) => h("button", { type: "button", id,
      disabled: !enabled, title, onclick }, label)));
  }

  /**
   * @param {string} label
   * @param {() => Promise<string>} work
   */
  async function act(label, work) {
    replace(feedback, message("info", `${label}…`));
    try {
      replace(feedback, message("ok", await work()));
    } catch (error) {
      replace(feedback, message("error", `${label} refused: ${api.said(error)}`));
    }
    lastFull = 0; // read the whole group at once
    polling?.now();
  }

  function seal() {
    act("Seal", async () => {
      await api.post(`/task-group/${groupId}/seal`);
      return "Sealed: no task may join this group now.";
    });
  }

  function cancelGroup() {
    const unresolved = model.unresolvedIds().length;
    if (!window.confirm(`Cancel the ${unresolved} unresolved tasks of this group? They resolve as exception `
      + "(canceled), and what depends on them does not run.")) return;
    act("Cancel group", async () => {
      const answer = await api.post(`/task-group/${groupId}/cancel`);
      return `Cancelled ${answer.cancelledCount} of the group's ${answer.taskGroupSize} tasks.`;
    });
  }

  /**
   * @param {GroupEntry[]} tasks
   */
  function rerunFailed(tasks) {
    const plan = rerunPlan(tasks, model.tasks, waiting);
    const lines = [`Rerun the ${tasks.length} failed task${tasks.length > 1 ? "s" : ""}?`];
    if (plan.now.length) lines.push(`Now: ${names(plan.now)}.`);
    if (plan.later.length) {
      lines.push(`Once what they depend on has completed (the queue waits; none runs before): ${names(plan.later)}.`);
    }
    lines.push("A task whose deadline has passed cannot rerun.");
    if (!window.confirm(lines.join("\n\n"))) return;
    act("Rerun failed", async () => {
      const refused = [];
      /** @type {GroupEntry[]} */
      const now = [];
      /** @type {GroupEntry[]} */
      const later = [];
      for (const t of [...plan.now, ...plan.later]) {
        try {
          const answer = await api.post(`/task/${t.status.taskId}/rerun-when-ready`);
          (RESOLVED.has(answer.status.state) ? later : now).push(t);
        } catch (error) {
          refused.push(`${t.task.metadata.name || t.status.taskId} (${api.said(error)})`);
        }
      }
      if (refused.length === tasks.length) throw new Error(refused.join("; "));
      // What the queue answered, which is what the confirm box said unless a task changed meanwhile.
      return `Rerun now: ${now.length ? names(now) : "none"}. Once what they depend on has completed: `
        + `${later.length ? names(later) : "none"}${refused.length ? `. Refused: ${refused.join("; ")}` : ""}.`;
    });
  }

  // For task queues whose tasks wait with none running: how many of its tasks are claimed now (the counts need
  // queue:claimed-count:…; without it the hint names the scope).
  async function checkQueues() {
    const now = Date.now();
    await Promise.all(model.idleQueues().map(async ({ taskQueueId }) => {
      const known = queues.get(taskQueueId);
      if (known && now - known.checked < QUEUE_CHECK_EVERY) return;
      const entry = { checked: now, claimed: undefined, hiddenBy: "" };
      queues.set(taskQueueId, entry);
      try {
        entry.claimed = (await api.get(`/task-queues/${taskQueueId}/counts`)).claimedTasks;
      } catch (error) {
        if (api.statusOf(error) === 403) entry.hiddenBy = api.missingScopes(error);
      }
    }));
  }


  // The project's previous push (among the recent pushes: it takes queue:list-recent-task-groups), its tasks'
  // states by name, read once, when this group has failures: a failed label says how it went there.
  async function readPrevious() {
    const c = model.counts();
    if (previousRead || (!c.failed && !c.exception) || decisionTask === null) return;
    previousRead = true;
    const task = await decisionTask;
    const project = task ? pushOf(task)?.project : undefined;
    if (!project) return;
    try {
      const push = await previousPush(groupId, project);
      if (!push) return;
      /** @type {Map<string, {taskId: string, state: string}>} */
      const states = new Map();
      await api.all(`/task-group/${push.taskGroupId}/brief`, "tasks", { onPage: (p) => {
        for (const t of /** @type {GroupEntry[]} */ (p.tasks)) {
          if (t.task.metadata.name) states.set(t.task.metadata.name, { taskId: t.status.taskId, state: t.status.state });
        }
      } });
      previous = { push, states };
    } catch {
      previous = null; // not read: the rows say nothing of it
    }
  }

  // The failed tasks that wait to rerun (listTaskGroupFailures, this queue's extension): read with each whole
  // listing (every FULL_EVERY, and right after an action) while the group has failed or exception tasks, not at each
  // refresh (a cancelled 10,000-task group has 10 pages of them); an older queue without it shows none waiting.
  async function readWaiting() {
    const c = model.counts();
    if (!c.failed && !c.exception) {
      waiting = new Map();
      return;
    }
    try {
      const listed = await api.all(`/task-group/${groupId}/failures`, "tasks");
      waiting = new Map(listed.filter((f) => f.rerunWaitsFor).map((f) => [f.taskId, f.rerunWaitsFor]));
    } catch {
      waiting = new Map();
    }
  }

  let growing = true;
  let reads = "";
  let lastRead = 0; // statuses read by the last refresh (its cost sets the next interval)
  let turn = 0; // where the rotation through the unresolved tasks is

  async function refresh() {
    const now = Date.now();
    if (growing || now - lastFull > FULL_EVERY) {
      /** @type {GroupEntry[]} */
      const entries = [];
      /** @type {GroupInfo | null} */
      let info = null;
      const first = model.tasks.size === 0;
      // listTaskGroupBrief (this queue's extension): the definitions cut down to what this page shows.
      await api.all(`/task-group/${groupId}/brief`, "tasks", {
        onPage: (p) => {
          entries.push(...p.tasks);
          info = info || p;
          if (first && p.continuationToken) {
            // The first read of a large group: each page shown as it comes.
            model.put(p.tasks);
            model.info = info;
            render();
            summary.textContent = `Loading: ${entries.length} tasks so far…`;
          }
        },
      });
      const before = first ? 0 : model.tasks.size;
      const listed = new Set(entries.map((e) => e.status.taskId));
      for (const id of [...model.tasks.keys()]) {
        if (!listed.has(id)) {
          model.tasks.delete(id); // expired and gone
          rows.delete(id);
        }
      }
      model.put(entries);
      model.info = info;
      // Still growing: tasks joined since the last listing, or the newest was created within FULL_EVERY (a
      // decision task still submitting): listed whole again at the next refresh.
      const newest = entries.reduce((latest, e) => (e.task.created > latest ? e.task.created : latest), "");
      growing = first ? Boolean(newest && now - new Date(newest).getTime() < FULL_EVERY) : model.tasks.size !== before;
      lastFull = now;
      lastRead = entries.length;
      reads = `read the whole group (${entries.length} tasks)`;
      await readWaiting();
    } else {
      const unresolved = model.unresolvedIds();
      const open = new Set(unresolved);
      const ids = new Set(onScreen.map((t) => t.status.taskId).filter((id) => open.has(id)));
      for (const id of unresolved) if (model.tasks.get(id)?.status.state === "running") ids.add(id);
      const others = unresolved.filter((id) => !ids.has(id));
      turn = others.length ? turn % others.length : 0;
      const slice = others.slice(turn, turn + ROTATION)
        .concat(others.slice(0, Math.max(0, turn + ROTATION - others.length)));
      for (const id of slice) ids.add(id);
      turn += ROTATION;
      const list = [...ids];
      for (let i = 0; i < list.length; i += 1000) {
        const answer = await api.post("/tasks/status", { taskIds: list.slice(i, i + 1000) });
        model.setStatuses(answer.statuses);
      }
      lastRead = list.length;
      reads = unresolved.length === 0 ? "nothing to read: every task is resolved"
        : list.length === unresolved.length
          ? `read the status of the ${list.length} unresolved task${list.length > 1 ? "s" : ""}`
          : `read the status of ${list.length} of the ${unresolved.length} unresolved tasks (on screen, running, and `
            + `${ROTATION} more in turn)`;
    }
    replace(problem);
    await checkQueues().catch(() => {});
    render();
    if (!previousRead) {
      readPrevious().then(() => { // in the background: the rows are drawn again once it is read
        if (previous) render();
      });
    }
    const live = model.unresolvedIds().length > 0;
    replace(status, live ? h("span", { class: "live-dot", "aria-hidden": "true" }) : null,
      `Updated ${new Date().toLocaleTimeString()}: ${reads}.`);
    status.dataset.refreshes = String(Number(status.dataset.refreshes || 0) + 1);
  }

  readQuery(query);
  // Refreshes 2 s apart, 1 s more per 500 tasks the last one read (at most 15 s); once every task is resolved, a
  // look every 10 s (the whole listing each FULL_EVERY).
  const interval = () => (model.tasks.size && model.unresolvedIds().length === 0 ? 10000
    : Math.max(2000, Math.min(15000, (lastRead / 500) * 1000)));
  polling = poll(refresh, interval, (error) => {
    if (model.tasks.size === 0) replace(summary);
    replace(problem, message("error", api.statusOf(error) === 404 ? `There is no task group ${groupId}.`
      : `The group could not be read: ${api.said(error)}`));
  });
  return {
    stop: polling.stop,
    now: polling.now,
    // Another filter, page or search of the same group (the address's query changed): shown from what is held.
    /**
     * @param {URLSearchParams} q
     */
    update(q) {
      readQuery(q);
      if (model.tasks.size) render();
    },
  };
}

