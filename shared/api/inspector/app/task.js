// The task view: definition, status, every run with its artifacts, dependencies both ways, and the schedule /
// rerun / cancel buttons, enabled when the signed-in credentials hold the scopes the queue will ask for.
import * as api from "./api.js";
import { actionsFor, defaultInput, readActions, triggerAction } from "./actions.js";
import { LOG_TYPES, logOf, READ_AT_MOST, REASONS } from "./why.js";
import { explainLog, logToRead, TAIL } from "./whyread.js";
import { SLUGID } from "./addresses.js";
import { badge, h, message, notASlugid, replace, RESOLVED, safeLink, setTitle, when } from "./dom.js";
import { poll } from "./live.js";
import { deploymentConfig } from "./config.js";
import { byName, treeherderOf } from "./pushes.js";
import { copyButton, payloadView } from "./payload.js";

const RESIGN = 10 * 60 * 1000;
const ROOT_LEVELS = 6; // levels of dependencies walked to find what blocks an unscheduled task
const ROOT_READS = 500; // tasks read at most for it
const ROOTS_FOR = 30 * 1000; // how long that walk's answer is used before it is walked again
const BLOCKERS_WITHIN = 10 * 1000; // how long Schedule waits for the first read of what the task waits for


/** @type {Array<[string, string, string, string, (state: string) => boolean]>} */
const ACTIONS = [
  // [button, its id's verb, API method, scope action, when it applies]. A rerun waits for the task's dependencies
  // to complete (rerunTaskWhenReady): rerunTask would run it ahead of a dependency that failed or was rerun.
  ["Schedule", "schedule", "schedule", "schedule-task", (state) => state === "unscheduled"],
  ["Rerun", "rerun", "rerun-when-ready", "rerun-task", (state) => RESOLVED.has(state)],
  ["Cancel", "cancel", "cancel", "cancel-task", (state) => !RESOLVED.has(state)],
];

// Replaces a node's children only when what they show changed (`key`): an unchanged part keeps focus and selection
// across refreshes.
/**
 * @param {HTMLElement} node
 * @param {string} key
 * @param {...Child} children
 */
function redraw(node, key, ...children) {
  if (node.dataset.key === key) return;
  node.dataset.key = key;
  replace(node, ...children);
}

/**
 * @param {HTMLElement} target
 * @param {string} taskId
 * @returns {View | null}
 */
export function taskView(target, taskId) {
  setTitle(`Task ${taskId}`);
  if (!SLUGID.test(taskId)) {
    return notASlugid(target, "taskId");
  }
  const title = h("h1", {}, "Task ", h("code", {}, taskId));
  const viewLog = h("div", { id: "view-log" }); // the latest run's log, first thing on the page once there is one
  const why = h("div", { id: "run-why" }); // why the newest failed run failed, read from its log (why.js)
  const actions = h("div", { class: "actions", id: "task-actions" });
  const feedback = h("div", { id: "action-feedback" });
  const facts = h("div", {}, "Loading…");
  const runs = h("section", { id: "runs" });
  const deps = h("section", { id: "dependencies" });
  const blocked = h("div", { id: "task-blocked" }); // an unscheduled task a failure blocks, or a rerun that waits
  const payload = h("div", { id: "payload-box" });
  const definition = h("section", { id: "definition" });
  const problem = h("div");
  replace(target, title, problem, viewLog, blocked, why, actions, feedback, facts, deps, payload, runs, definition);
  /** @type {{pushIndex?: string, treeherder?: string}} */
  let config = {};
  deploymentConfig().then((c) => { config = c; });
  /** @type {TaskDefinition | null} */
  let loaded = null; // the definition, read by the first refresh (it does not change)
  /** @type {Map<number, {heading: HTMLElement, facts: HTMLElement, artifacts: HTMLElement, article: HTMLElement}>} */
  const runArticles = new Map(); // runId -> {article, facts, artifacts}
  /** @type {Map<number, string>} */
  const logs = new Map(); // runId -> the name of its log (public/logs/ first), once its artifacts were listed
  /** @type {Promise<any> | null} */
  let inTree = null; // the decision task's actions.json, read once (null until asked)
  /** @type {{key: string, at: number, roots: Array<{id: string, name: string, state: string}>}} */
  let rootsRead = { key: "", at: 0, roots: [] }; // what blocks this task through its unscheduled dependencies
  /** @type {Map<number, Artifact[]>} */
  const listings = new Map(); // runId -> its artifacts as last listed: where the page finds the log it reads (why)
  /** @type {string[] | null} */
  let rerunWaits = null; // what this failed task waits for to rerun (readRerunWaits), or null
  /** @type {number | null} */
  let waitsReadFor = null; // how many runs the task had when that was read
  /** @type {string | null} */
  let state = null;
  /** @type {ReturnType<typeof poll> | null} */
  let poller = null;
  /** @type {string | null} */
  let reported = null;
  let markBlockersRead = () => {};
  const blockersRead = new Promise((resolve) => { markBlockersRead = () => resolve(undefined); }); // the state an action's feedback names: the feedback goes once the task has moved on

  /**
   * @param {TaskDefinition} task
   * @param {string} label
   * @param {string} method
   */
  async function act(task, label, method) {
    // Cancelling resolves the task and its run as exception for good: asked first.
    if (method === "cancel" && !window.confirm(`Cancel task "${task.metadata.name || taskId}"? Its run ends as `
      + "exception (canceled) and its dependents will not run unless it is rerun.")) return;
    // Scheduling a blocked task runs it without what it waits for (a summary without its tests): asked first. The
    // button is enabled before the first read of what the task waits for ends (signing in shows the page anew).
    if (method === "schedule") {
      const read = await Promise.race([blockersRead.then(() => true),
        new Promise((resolve) => { setTimeout(() => resolve(false), BLOCKERS_WITHIN); })]);
      const key = blocked.dataset.key;
      const blocker = !read ? "What this task waits for could not be read." : key && key !== "none"
        ? blocked.textContent : "";
      if (blocker && !window.confirm(`${blocker}\n\nSchedule it anyway? It runs now, without what it depends on.`)) {
        return;
      }
    }
    replace(feedback, message("info", `${label}…`));
    try {
      const answer = await api.post(`/task/${taskId}/${method}`);
      const waits = method === "rerun-when-ready" && RESOLVED.has(answer.status.state);
      replace(feedback, message("ok", waits
        ? `${label}: the task runs again once its dependencies have completed (the queue waits for them).`
        : `${label}: the task is now ${answer.status.state}.`));
      reported = answer.status.state;
      waitsReadFor = null; // a rerun may now wait: read again
    } catch (error) {
      replace(feedback, message("error", `${label} refused: ${api.said(error)}`));
    }
    poller?.now();
  }

  /** @param {TaskDefinition} task */
  async function renderActions(task) {
    const held = await api.scopes();
    /** @param {string} verb */
    const refusedWhy = (verb) => (api.credentials() ? `Your credentials lack the scopes to ${verb} this task`
      : `Sign in with credentials that may ${verb} this task`);
    const buttons = ACTIONS.filter(([, , , , applies]) => applies(state ?? "")).map(([label, verb, method, action]) => {
      const allowed = api.satisfied(held, api.actionScopes(action, task, taskId));
      return h("button", { type: "button", id: `${verb}-task`, disabled: !allowed,
        title: allowed ? `${label} this task` : refusedWhy(verb), onclick: () => act(task, label, method) }, label);
    });
    if (inTree === null) inTree = readActions(task.taskGroupId);
    const file = await inTree;
    const offered = actionsFor(file, task.tags || {});
    for (const action of offered) {
      // The decision task's own actions (Firefox CI's Retrigger, Backfill, ...), triggered through its hooks.
      const scope = `hooks:trigger-hook:${action.hookGroupId}/${action.hookId}`;
      const allowed = api.satisfied(held, scope);
      const input = defaultInput(action);
      buttons.push(h("button", { type: "button", class: "in-tree-action", dataset: { action: action.name },
        disabled: !allowed || input === null,
        title: input === null ? `${action.title} needs input this page does not ask for: use Taskcluster's UI`
          : allowed ? action.description || action.title
            : api.credentials() ? `Your credentials lack ${scope}` : `Sign in with credentials that hold ${scope}`,
        onclick: () => runInTree(task, file, action) }, action.title));
    }
    if (!offered.some((a) => a.name === "retrigger")) {
      const copies = api.satisfied(held, api.createScopes(task));
      buttons.push(h("button", { type: "button", id: "retrigger-task", disabled: !copies,
        title: copies ? "Run a new copy of this task beside it (for an intermittent failure)" : refusedWhy("retrigger"),
        onclick: () => retrigger(task) }, "Retrigger"));
    }
    redraw(actions, `${state}|${held.join(" ")}|${offered.map((a) => a.name).join()}`, buttons);
  }

  // An in-tree action: asked first, then its hook triggered; the action task it created is linked.
  /**
   * @param {TaskDefinition} task
   * @param {any} file
   * @param {any} action
   */
  async function runInTree(task, file, action) {
    if (!window.confirm(`${action.title} "${task.metadata.name || taskId}"? ${action.description || ""}`.trim())) return;
    replace(feedback, message("info", `${action.title}…`));
    try {
      const created = await triggerAction(file, action, task.taskGroupId, taskId);
      replace(feedback, message("ok", [`${action.title}: `, created
        ? ["the action task ", h("a", { href: `#/tasks/${created}`, id: "action-task" }, created), " runs it."]
        : "the hook was triggered."]));
    } catch (error) {
      replace(feedback, message("error", `${action.title} refused: ${api.said(error)}`));
    }
  }

  // A retrigger: a new task with this one's definition, in its group, its dates moved to now (as Taskcluster's
  // retrigger action makes it), tagged with the task it copies; the page then shows the new task.
  /** @param {TaskDefinition} task */
  async function retrigger(task) {
    if (!window.confirm(`Retrigger "${task.metadata.name || taskId}"? A new task with the same definition runs `
      + "beside this one (in the same group, once its dependencies have completed).")) return;
    const shift = Date.now() - Date.parse(task.created);
    const moved = (/** @type {string} */ iso) => new Date(Date.parse(iso) + shift).toISOString();
    const copy = { ...task, created: new Date().toISOString(), deadline: moved(task.deadline),
      expires: moved(task.expires ?? task.deadline), tags: { ...(task.tags || {}), retriggerOf: taskId } };
    const newId = api.newSlugid();
    replace(feedback, message("info", "Retrigger…"));
    try {
      await api.request("PUT", "queue", `/task/${newId}`, { body: copy });
      window.location.hash = `#/tasks/${newId}`;
    } catch (error) {
      replace(feedback, message("error", `Retrigger refused: ${api.said(error)}`));
    }
  }

  /**
   * @param {TaskDefinition} task
   * @param {TaskStatus} status
   */
  function renderFacts(task, status) {
    const meta = task.metadata;
    replace(title, meta.name || "Task", " ", badge(status.state));
    setTitle(`${meta.name || taskId} (${status.state})`);
    const rows = [
      ["taskId", [h("code", {}, taskId), " ", copyButton("the taskId", () => taskId, "copy-task-id")]],
      ["task group", h("a", { href: `#/groups/${task.taskGroupId}` }, task.taskGroupId)],
      ["task queue", h("a", { href: `#/queues/${status.taskQueueId}` }, status.taskQueueId)],
      ["schedulerId", task.schedulerId], ["projectId", task.projectId], ["priority", task.priority],
      ["retries left", `${status.retriesLeft} of ${task.retries}`],
      ["created", when(task.created)], ["deadline", when(task.deadline)], ["expires", when(task.expires)],
      ["owner", meta.owner], ["source", safeLink(meta.source)], ["description", meta.description],
      ["routes", listOf(task.routes, "routes")], ["scopes", listOf(task.scopes, "scopes")],
      ["tags", listOf(Object.entries(task.tags || {}).map(([k, v]) => `${k}: ${v}`), "tags")],
      ["treeherder", treeherderFacts(task, status)],
    ];
    redraw(facts, `${status.state}|${status.retriesLeft}|${config.treeherder || ""}`, h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "–")])));
  }

  /**
   * @param {string[] | undefined} items
   * @param {string} id
   */
  function listOf(items, id) {
    return items && items.length ? h("ul", { class: "plain compact", id: `task-${id}` },
      [...items].sort(byName).map((i) => h("li", {}, h("code", {}, i)))) : null;
  }

  // extra.treeherder (its symbol, group, platform) and the push in Treeherder, when the deployment names it.
  /**
   * @param {TaskDefinition} task
   * @param {TaskStatus} status
   */
  function treeherderFacts(task, status) {
    const th = (task.extra || {}).treeherder || {};
    const symbol = th.symbol ? `${th.groupSymbol && th.groupSymbol !== "?" ? `${th.groupSymbol}(${th.symbol})` : th.symbol}` : "";
    const platform = th.machine && th.machine.platform ? `${th.machine.platform}${th.collection
      ? `/${Object.keys(th.collection).join(",")}` : ""}` : "";
    const push = treeherderOf(task.routes);
    const runId = Math.max(0, status.runs.length - 1);
    const link = config.treeherder && push ? h("a", { id: "treeherder-link", href: `${config.treeherder}/jobs?repo=`
      + `${encodeURIComponent(push.project)}&revision=${push.revision}&selectedTaskRun=${taskId}.${runId}` },
    "this task in Treeherder") : null;
    const said = [symbol && h("code", {}, symbol), platform && ` on ${platform}`, th.tier ? ` (tier ${th.tier})` : "",
      push ? ` · ${push.project} ${push.revision.slice(0, 12)}` : ""].filter(Boolean);
    if (!said.length && !link) return null;
    return [...said, link ? " · " : "", link];
  }

  // A run's artifacts, in `node`; listed again only while the run may still add some (and once after).
  // Signed links (artifacts outside public/, when signed in) carry a 15-minute bewit: they are signed anew every
  // RESIGN ms, even for a resolved run's final list.
  /**
   * @param {HTMLElement} node
   * @param {Run} run
   */
  async function artifactList(node, run) {
    const epoch = Math.floor(Date.now() / RESIGN);
    if (node.dataset.final === "yes" && (node.dataset.signed === undefined || Number(node.dataset.signed) === epoch)) {
      return;
    }
    const runId = run.runId;
    let listed;
    try {
      listed = await api.all(`/task/${taskId}/runs/${runId}/artifacts`, "artifacts");
    } catch (error) {
      redraw(node, "error", h("p", {}, `Artifacts could not be listed: ${api.said(error)}`));
      return;
    }
    if (RESOLVED.has(run.state)) node.dataset.final = "yes";
    const named = logOf(listed);
    if (named) logs.set(runId, named);
    listings.set(runId, listed);
    const signs = api.credentials() && listed.some((a) => !a.name.startsWith("public/"));
    if (signs) node.dataset.signed = String(epoch);
    else delete node.dataset.signed;
    const key = JSON.stringify([signs ? epoch : 0, listed.map((a) => [a.name, a.storageType, a.contentType, a.expires])]);
    if (node.dataset.key === key) return;
    if (listed.length === 0) {
      redraw(node, key, h("p", { class: "quiet" }, "No artifacts."));
      return;
    }
    const held = await api.scopes();
    const items = await Promise.all(listed.map(async (a) => {
      const href = await api.artifactUrl(taskId, runId, a.name);
      const log = LOG_TYPES.test(a.contentType) && a.storageType !== "error"
        ? [" ", h("a", { href: `#/tasks/${taskId}/runs/${runId}/logs/${encodeURIComponent(a.name)}`,
          class: "view-log" }, "view log")] : null;
      if (a.storageType === "error") {
        // No file behind it: the worker reported why (getArtifact answers 424 with the reason), not a download.
        return h("li", { dataset: { artifact: a.name }, class: "artifact-error" }, h("span", {}, a.name), " ",
          h("span", { class: "reason" }, "the worker reported an error instead of this file (expires "), when(a.expires),
          h("span", { class: "reason" }, ")"));
      }
      if (!api.satisfied(held, `queue:get-artifact:${a.name}`)) {
        // A link would open the queue's 403 answer: say what reading it takes instead.
        return h("li", { dataset: { artifact: a.name }, class: "artifact-private" }, h("span", {}, a.name), " ",
          h("span", { class: "reason" }, `private: sign in with credentials holding queue:get-artifact:${a.name}`),
          h("span", { class: "quiet" }, ` ${a.storageType}, ${a.contentType}, expires `), when(a.expires));
      }
      return h("li", { dataset: { artifact: a.name } },
        h("a", { href, class: "download", rel: "noopener" }, a.name), log,
        h("span", { class: "quiet" }, ` ${a.storageType}, ${a.contentType}, expires `, when(a.expires)));
    }));
    redraw(node, key, h("ul", { class: "artifacts" }, items));
  }


  /** @type {Map<number, {log: import("./whyread.js").LogAt | null, found?: import("./whyread.js").LogExplanation}>} */
  const explained = new Map(); // runId -> the log its why was read from (null: none readable here), and what it says

  // "View log" for the newest run that has a log: where a reader looks first for why a run failed (at its first
  // error line, when the run failed and its log names one).
  /**
   * @param {TaskStatus} status
   */
  function renderViewLog(status) {
    const runId = [...logs.keys()].filter((r) => r < status.runs.length).sort((a, b) => b - a)[0];
    if (runId === undefined) {
      redraw(viewLog, "none");
      return;
    }
    // The log its why was read from (what the line numbers count: a reference's target), else the run's log.
    const read = explained.get(runId);
    const at = read?.log ?? { taskId, runId, name: logs.get(runId) ?? "" };
    const name = at.name;
    const first = read?.found?.errors[0];
    const line = first && first.n !== null ? `#L${first.n}` : ""; // the end, when not known (a log read from its tail)
    const href = `#/tasks/${at.taskId}/runs/${at.runId}/logs/${encodeURIComponent(name)}${line}`;
    redraw(viewLog, href, h("a", { href, id: "view-log-link", class: "view-log-main" },
      status.runs.length > 1 ? `View log (run ${runId})` : "View log"), " ", h("span", { class: "quiet" }, name));
  }

  // The newest run, when it failed or ended in an exception: the reason it was resolved (for an exception), and
  // from its log, when stored here, its exit code and the lines that name the error (or that it is too long).
  /**
   * @param {TaskStatus} status
   */
  async function renderWhy(status) {
    const run = status.runs[status.runs.length - 1];
    if (!run || (run.state !== "failed" && run.state !== "exception")) {
      redraw(why, "none");
      return;
    }
    const listed = listings.get(run.runId);
    if (listed && !explained.has(run.runId)) {
      try {
        const log = await logToRead(taskId, run.runId, listed); // read by the page itself: only logs stored here
        explained.set(run.runId, { log, found: log ? await explainLog(log.taskId, log.runId, log.name) : undefined });
      } catch {
        return; // not read this time (not remembered): the next refresh tries again
      }
    }
    const { log, found } = explained.get(run.runId) ?? { log: null };
    const reason = run.state === "exception" ? run.reasonResolved : null;
    const read = found && (found.tooLong || found.exitCode !== null || found.errors.length > 0);
    if (!read && !reason) {
      redraw(why, "none");
      return;
    }
    /**
     * @param {number} n
     */
    const logHref = (n) => `#/tasks/${log?.taskId}/runs/${log?.runId}/logs/${encodeURIComponent(log?.name ?? "")}#L${n}`;
    redraw(why, JSON.stringify([run.runId, reason, found]), h("section", { class: "why" },
      h("h2", {}, `Why run ${run.runId} ${run.state === "failed" ? "failed" : "ended"}`),
      reason ? h("p", { id: "run-reason" }, "Resolved as ", h("code", {}, reason),
        REASONS[reason] ? `: ${REASONS[reason]}` : "") : null,
      found?.tooLong ? h("p", { class: "quiet", id: "log-too-long" }, tooLongText(found)) : null,
      found?.exitCode != null ? h("p", {}, "Exit code ", h("code", { id: "exit-code" }, found.exitCode)) : null,
      found?.errors.length ? h("ol", { class: "error-lines" }, found.errors.map((e) => h("li", {},
        e.n === null ? h("span", { class: "quiet" }, "near its end") : h("a", { href: logHref(e.n) }, `line ${e.n}`),
        " ", h("code", {}, e.line)))) : null));
  }

  /**
   * @param {TaskStatus} status
   */
  async function renderRuns(status) {
    if (status.runs.length === 0) {
      redraw(runs, "none", h("h2", {}, "Runs"), h("p", { class: "quiet" }, "No run yet: the task is unscheduled."));
      return;
    }
    if (runs.dataset.key !== "runs") {
      runs.dataset.key = "runs";
      replace(runs, h("h2", {}, "Runs"));
    }
    await Promise.all(status.runs.map(async (run) => {
      let shown = runArticles.get(run.runId);
      if (!shown) {
        const heading = h("h3");
        const runFacts = h("div");
        const artifacts = h("div");
        const article = h("article", { class: "run", dataset: { runId: run.runId } }, heading, runFacts,
          h("h4", {}, "Artifacts"), artifacts);
        shown = { heading, facts: runFacts, artifacts, article };
        runArticles.set(run.runId, shown);
        runs.insertBefore(shown.article, runs.children[1] || null); // newest first, under the heading
      }
      shown.article.dataset.state = run.state;
      const [prov, type] = status.taskQueueId.split("/");
      const worker = run.workerId ? h("a", {
        href: `#/workers/${prov}/${type}/${run.workerGroup}/${run.workerId}` }, `${run.workerGroup}/${run.workerId}`)
        : "–";
      redraw(shown.heading, run.state, `Run ${run.runId} `, badge(run.state));
      redraw(shown.facts, JSON.stringify(run),
        h("dl", { class: "facts" },
          h("dt", {}, "reason created"), h("dd", {}, run.reasonCreated),
          h("dt", {}, "reason resolved"), h("dd", {}, run.reasonResolved || "–"),
          h("dt", {}, "worker"), h("dd", {}, worker),
          h("dt", {}, "scheduled"), h("dd", {}, when(run.scheduled)),
          h("dt", {}, "started"), h("dd", {}, when(run.started)),
          h("dt", {}, "resolved"), h("dd", {}, when(run.resolved)),
          h("dt", {}, "taken until"), h("dd", {}, when(run.takenUntil))));
      await artifactList(shown.artifacts, run);
    }));
  }

  // Unscheduled behind a failed dependency: blocked until that one is rerun and completes (`all-completed`); a
  // failed task marked to rerun once its dependencies complete says which it waits for.
  /**
   * @param {TaskDefinition} task
   * @param {string[]} ids
   * @param {Record<string, string>} states
   * @param {Record<string, string>} names
   */
  async function renderBlocked(task, ids, states, names) {
    const name = (/** @type {string} */ id) => h("a", { href: `#/tasks/${id}` }, names[id] || id);
    const failed = ids.filter((id) => states[id] === "failed" || states[id] === "exception");
    if (state === "unscheduled" && failed.length && task.requires !== "all-resolved") {
      redraw(blocked, `b${failed.join()}`, message("error", ["Blocked: it runs only once ", name(failed[0]),
        failed.length > 1 ? ` and ${failed.length - 1} more` : "", ` (${states[failed[0]]}) `,
        failed.length > 1 ? "complete" : "completes", "; rerun what failed to unblock it."]));
      return;
    }
    const through = ids.filter((id) => states[id] === "unscheduled");
    const key = through.join();
    if (state === "unscheduled" && through.length && (rootsRead.key !== key || Date.now() - rootsRead.at > ROOTS_FOR)) {
      rootsRead = { key, at: Date.now(), roots: await rootFailures(through) };
    }
    const roots = state === "unscheduled" && through.length ? rootsRead.roots : [];
    if (roots.length) {
      // A summary behind tests behind a failed build: the build is what to rerun, not the tests it waits for.
      const [root] = roots;
      redraw(blocked, `t${roots.map((r) => r.id).join()}`, message("error", ["Blocked: it waits for ",
        name(through[0]), through.length > 1 ? ` and ${through.length - 1} more` : "", ", which can run only once ",
        h("a", { href: `#/tasks/${root.id}`, id: "root-blocker" }, root.name || root.id),
        roots.length > 1 ? ` and ${roots.length - 1} more` : "", ` (${root.state}) `,
        roots.length > 1 ? "complete" : "completes", "; rerun what failed to unblock it."]));
      return;
    }
    if (rerunWaits && rerunWaits.length && (state === "failed" || state === "exception")) {
      redraw(blocked, `r${rerunWaits.join()}`, message("info", ["Reruns after ", name(rerunWaits[0]),
        rerunWaits.length > 1 ? ` and ${rerunWaits.length - 1} more` : "",
        ": the queue gives it its new run once what it depends on has completed."]));
      return;
    }
    redraw(blocked, "none");
  }

  // The failed tasks at the root of why this task waits, through its unscheduled dependencies: each level of
  // dependencies read in two calls (definitions, statuses), at most ROOT_LEVELS levels and ROOT_READS tasks; a
  // failed or exception task that a dependent needs completed is a root.
  /**
   * @param {string[]} unscheduled
   * @returns {Promise<Array<{id: string, name: string, state: string}>>}
   */
  async function rootFailures(unscheduled) {
    /** @type {Map<string, {id: string, name: string, state: string}>} */
    const roots = new Map();
    const seen = new Set([taskId, ...unscheduled]);
    let level = unscheduled;
    for (let depth = 0; depth < ROOT_LEVELS && level.length; depth++) {
      const defs = (await api.post("/tasks", { taskIds: level })).tasks;
      /** @type {Array<{requires: string | undefined, id: string}>} */
      const edges = [];
      for (const { task } of /** @type {Array<{taskId: string, task: TaskDefinition}>} */ (defs)) {
        for (const dep of task.dependencies || []) {
          if (!seen.has(dep) && seen.size < ROOT_READS) {
            seen.add(dep);
            edges.push({ requires: task.requires, id: dep });
          }
        }
      }
      if (!edges.length) break;
      const ids = edges.map((e) => e.id);
      const [named, statuses] = await Promise.all([api.post("/tasks", { taskIds: ids }),
        api.post("/tasks/status", { taskIds: ids })]);
      const nameOf = new Map(named.tasks.map((/** @type {{taskId: string, task: TaskDefinition}} */ t) =>
        [t.taskId, t.task.metadata.name]));
      const stateOf = new Map(statuses.statuses.map((/** @type {{taskId: string, status: TaskStatus}} */ t) =>
        [t.taskId, t.status.state]));
      level = [];
      for (const { requires, id } of edges) {
        const found = stateOf.get(id);
        if ((found === "failed" || found === "exception") && requires !== "all-resolved") {
          roots.set(id, { id, name: nameOf.get(id) || id, state: found });
        } else if (found === "unscheduled") level.push(id);
      }
    }
    return [...roots.values()];
  }

  // Whether this failed task waits to rerun (listTaskGroupFailures, this queue's extension): what it waits for. Read
  // once per run it failed in and after an action on it, not at each refresh (the group's failures may be pages).
  /**
   * @param {TaskDefinition} task
   * @param {number} runCount
   */
  async function readRerunWaits(task, runCount) {
    if (state !== "failed" && state !== "exception") {
      rerunWaits = null;
      waitsReadFor = null;
      return;
    }
    if (waitsReadFor === runCount) return;
    waitsReadFor = runCount;
    try {
      const listed = await api.all(`/task-group/${task.taskGroupId}/failures`, "tasks");
      rerunWaits = listed.find((f) => f.taskId === taskId)?.rerunWaitsFor || null;
    } catch {
      rerunWaits = null; // an older queue: not known
    }
  }

  /** @param {TaskDefinition} task */
  async function renderDeps(task) {
    const ids = task.dependencies || [];
    /** @type {HTMLElement} */
    let upstream = h("p", { class: "quiet" }, "None.");
    /** @type {Record<string, string>} */
    let names = {};
    /** @type {Record<string, string>} */
    let states = {};
    if (ids.length) {
      const [defs, statuses] = await Promise.all([api.post("/tasks", { taskIds: ids }),
        api.post("/tasks/status", { taskIds: ids })]);
      names = Object.fromEntries(defs.tasks.map((/** @type {{taskId: string, task: TaskDefinition}} */ t) =>
        [t.taskId, t.task.metadata.name]));
      states = Object.fromEntries(statuses.statuses.map((/** @type {{taskId: string, status: TaskStatus}} */ s) =>
        [s.taskId, s.status.state]));
      upstream = h("ul", { class: "plain", id: "depends-on" }, ids.map((id) => h("li", {},
        states[id] ? badge(states[id]) : badge("missing"), " ",
        h("a", { href: `#/tasks/${id}` }, names[id] || id))));
    }
    await renderBlocked(task, ids, states, names);
    markBlockersRead();
    const dependents = await api.all(`/task/${taskId}/dependents`, "tasks");
    const downstream = dependents.length === 0 ? h("p", { class: "quiet" }, "None.")
      : h("ul", { class: "plain", id: "dependents" }, dependents.map((t) => h("li", {}, badge(t.status.state), " ",
        h("a", { href: `#/tasks/${t.status.taskId}` }, t.task.metadata.name || t.status.taskId))));
    const key = JSON.stringify([ids, dependents.map((t) => [t.status.taskId, t.status.state])])
      + (upstream.textContent || "");
    redraw(deps, key, h("h2", {}, "Dependencies"),
      h("div", { class: "two" },
        h("div", {}, h("h3", {}, `Depends on (${task.requires === "all-resolved" ? "all resolved" : "all completed"})`),
          upstream),
        h("div", {}, h("h3", {}, "Dependents"), downstream)));
  }

  async function refresh() {
    if (loaded === null) {
      loaded = /** @type {TaskDefinition} */ (await api.get(`/task/${taskId}`));
      const json = JSON.stringify(loaded, null, 2);
      replace(payload, payloadView(loaded.payload));
      replace(definition, h("details", {}, h("summary", {}, "Definition"),
        h("pre", { class: "json", tabindex: "0", "aria-label": "the definition as JSON" }, json)),
        h("p", { class: "quiet" }, "The definition as JSON: ",
          copyButton("the definition as JSON", () => json, "copy-definition")));
    }
    const task = loaded;
    /** @type {{status: TaskStatus}} */
    const { status } = await api.get(`/task/${taskId}/status`);
    state = status.state;
    if (reported !== null && state !== reported) {
      replace(feedback); // "the task is now pending" beside a run that has since failed would mislead
      reported = null;
    }
    renderFacts(task, status);
    await readRerunWaits(task, status.runs.length);
    await Promise.all([renderActions(task), renderRuns(status), renderDeps(task)]);
    await renderWhy(status);
    renderViewLog(status);
    replace(problem);
  }

  poller = poll(refresh, () => (RESOLVED.has(state ?? "") ? 10000 : 2000), (error) => {
    if (loaded === null) replace(facts);
    replace(problem, message("error", api.statusOf(error) === 404 ? `There is no task ${taskId}.`
      : `The task could not be read: ${api.said(error)}`));
  });
  return poller;
}

/**
 * What the task page says of a log too long to read whole: its size, and what the why lines come from.
 * @param {import("./whyread.js").LogExplanation} found
 */
function tooLongText(found) {
  const mib = (/** @type {number} */ bytes) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
  const size = found.size ? mib(found.size) : `over ${mib(READ_AT_MOST)}`;
  if (found.encoded) {
    return `Its log is ${size} gzip-encoded, more than this page reads: ${found.errors.length
      ? "what follows is from its beginning; " : ""}View log opens it.`;
  }
  return `Its log is ${size}, more than this page reads whole: ${found.errors.length || found.exitCode != null
    ? `what follows is from its last ${TAIL / 1024 / 1024} MiB (line numbers unknown); ` : ""}View log opens it.`;
}
