// The task view: definition, status, every run with its artifacts, dependencies both ways, and the schedule /
// rerun / cancel buttons, enabled when the signed-in credentials hold the scopes the queue will ask for.
import * as api from "./api.js";
import { SLUGID } from "./addresses.js";
import { badge, h, message, replace, RESOLVED, safeLink, setTitle, when } from "./dom.js";
import { poll } from "./live.js";

const LOG_TYPES = /^text\//;

// The queue's scope expression for an action on a task (shared/api/queue_v1/common.py, project_or_scheduler).
function actionScopes(action, task, taskId) {
  return { AnyOf: [
    `queue:${action}:${task.schedulerId}/${task.taskGroupId}/${taskId}`,
    `queue:${action}-in-project:${task.projectId || "none"}`,
    { AllOf: [`queue:${action}`, `assume:scheduler-id:${task.schedulerId}/${task.taskGroupId}`] },
  ] };
}

const ACTIONS = [
  // [button, API method, scope action, when it applies]
  ["Schedule", "schedule", "schedule-task", (state) => state === "unscheduled"],
  ["Rerun", "rerun", "rerun-task", (state) => RESOLVED.has(state)],
  ["Cancel", "cancel", "cancel-task", (state) => !RESOLVED.has(state)],
];

export function taskView(target, taskId) {
  setTitle(`Task ${taskId}`);
  if (!SLUGID.test(taskId)) {
    replace(target, h("h1", {}, "Not a taskId"), message("error", "A taskId is a slugid: 22 characters of letters, "
      + "digits, - and _, as the queue gives them."));
    return null;
  }
  const title = h("h1", {}, "Task ", h("code", {}, taskId));
  const actions = h("div", { class: "actions", id: "task-actions" });
  const feedback = h("div", { id: "action-feedback" });
  const facts = h("div", {}, "Loading…");
  const runs = h("section", { id: "runs" });
  const deps = h("section", { id: "dependencies" });
  const definition = h("section", { id: "definition" });
  const problem = h("div");
  replace(target, title, problem, actions, feedback, facts, runs, deps, definition);
  let task = null;
  let state = null;
  let poller = null;

  async function act(label, method) {
    // Cancelling resolves the task and its run as exception for good: asked first.
    if (method === "cancel" && !window.confirm(`Cancel task "${task.metadata.name || taskId}"? Its run ends as `
      + "exception (canceled) and its dependents will not run unless it is rerun.")) return;
    replace(feedback, message("info", `${label}…`));
    try {
      const answer = await api.post(`/task/${taskId}/${method}`);
      replace(feedback, message("ok", `${label}: the task is now ${answer.status.state}.`));
    } catch (error) {
      replace(feedback, message("error", `${label} refused: ${error.summary || error.message}`));
    }
    poller.now();
  }

  async function renderActions() {
    const held = await api.scopes();
    replace(actions, ACTIONS.filter(([, , , applies]) => applies(state)).map(([label, method, action]) => {
      const allowed = api.satisfied(held, actionScopes(action, task, taskId));
      return h("button", { type: "button", id: `${method}-task`, disabled: !allowed,
        title: allowed ? `${label} this task` : api.credentials()
          ? `Your credentials lack the scopes to ${method} this task`
          : `Sign in with credentials that may ${method} this task`,
        onclick: () => act(label, method) }, label);
    }));
  }

  function renderFacts(status) {
    const meta = task.metadata;
    replace(title, meta.name || "Task", " ", badge(status.state));
    setTitle(`${meta.name || taskId} (${status.state})`);
    const rows = [
      ["taskId", h("code", {}, taskId)],
      ["task group", h("a", { href: `#/groups/${task.taskGroupId}` }, task.taskGroupId)],
      ["task queue", h("a", { href: `#/queues/${status.taskQueueId}` }, status.taskQueueId)],
      ["schedulerId", task.schedulerId], ["projectId", task.projectId], ["priority", task.priority],
      ["retries left", `${status.retriesLeft} of ${task.retries}`],
      ["created", when(task.created)], ["deadline", when(task.deadline)], ["expires", when(task.expires)],
      ["owner", meta.owner], ["source", safeLink(meta.source)], ["description", meta.description],
    ];
    replace(facts, h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "–")])));
  }

  async function artifactList(runId) {
    let listed;
    try {
      listed = await api.all(`/task/${taskId}/runs/${runId}/artifacts`, "artifacts");
    } catch (error) {
      return h("p", {}, `Artifacts could not be listed: ${error.summary || error.message}`);
    }
    if (listed.length === 0) return h("p", { class: "quiet" }, "No artifacts.");
    const items = await Promise.all(listed.map(async (a) => {
      const href = await api.artifactUrl(taskId, runId, a.name);
      const log = LOG_TYPES.test(a.contentType) && a.storageType !== "error"
        ? [" ", h("a", { href: `#/tasks/${taskId}/runs/${runId}/logs/${encodeURIComponent(a.name)}`,
          class: "view-log" }, "view log")] : null;
      return h("li", { dataset: { artifact: a.name } },
        h("a", { href, class: "download", rel: "noopener" }, a.name), log,
        h("span", { class: "quiet" }, ` ${a.storageType}, ${a.contentType}, expires `, when(a.expires)));
    }));
    return h("ul", { class: "artifacts" }, items);
  }

  async function renderRuns(status) {
    if (status.runs.length === 0) {
      replace(runs, h("h2", {}, "Runs"), h("p", { class: "quiet" }, "No run yet: the task is unscheduled."));
      return;
    }
    const blocks = await Promise.all(status.runs.map(async (run) => {
      const [prov, type] = status.taskQueueId.split("/");
      const worker = run.workerId ? h("a", {
        href: `#/workers/${prov}/${type}/${run.workerGroup}/${run.workerId}` }, `${run.workerGroup}/${run.workerId}`)
        : "–";
      return h("article", { class: "run", dataset: { runId: run.runId, state: run.state } },
        h("h3", {}, `Run ${run.runId} `, badge(run.state)),
        h("dl", { class: "facts" },
          h("dt", {}, "reason created"), h("dd", {}, run.reasonCreated),
          h("dt", {}, "reason resolved"), h("dd", {}, run.reasonResolved || "–"),
          h("dt", {}, "worker"), h("dd", {}, worker),
          h("dt", {}, "scheduled"), h("dd", {}, when(run.scheduled)),
          h("dt", {}, "started"), h("dd", {}, when(run.started)),
          h("dt", {}, "resolved"), h("dd", {}, when(run.resolved)),
          h("dt", {}, "taken until"), h("dd", {}, when(run.takenUntil))),
        h("h4", {}, "Artifacts"), await artifactList(run.runId));
    }));
    replace(runs, h("h2", {}, "Runs"), blocks.reverse());
  }

  async function renderDeps() {
    const ids = task.dependencies || [];
    let upstream = h("p", { class: "quiet" }, "None.");
    if (ids.length) {
      const [defs, statuses] = await Promise.all([api.post("/tasks", { taskIds: ids }),
        api.post("/tasks/status", { taskIds: ids })]);
      const names = Object.fromEntries(defs.tasks.map((t) => [t.taskId, t.task.metadata.name]));
      const states = Object.fromEntries(statuses.statuses.map((s) => [s.taskId, s.status.state]));
      upstream = h("ul", { class: "plain", id: "depends-on" }, ids.map((id) => h("li", {},
        states[id] ? badge(states[id]) : badge("missing"), " ",
        h("a", { href: `#/tasks/${id}` }, names[id] || id))));
    }
    const dependents = await api.all(`/task/${taskId}/dependents`, "tasks");
    const downstream = dependents.length === 0 ? h("p", { class: "quiet" }, "None.")
      : h("ul", { class: "plain", id: "dependents" }, dependents.map((t) => h("li", {}, badge(t.status.state), " ",
        h("a", { href: `#/tasks/${t.status.taskId}` }, t.task.metadata.name || t.status.taskId))));
    replace(deps, h("h2", {}, "Dependencies"),
      h("div", { class: "two" },
        h("div", {}, h("h3", {}, `Depends on (${task.requires === "all-resolved" ? "all resolved" : "all completed"})`),
          upstream),
        h("div", {}, h("h3", {}, "Dependents"), downstream)));
  }

  async function refresh() {
    if (task === null) {
      task = await api.get(`/task/${taskId}`);
      replace(definition, h("details", {}, h("summary", {}, "Definition"),
        h("pre", { class: "json" }, JSON.stringify(task, null, 2))));
    }
    const { status } = await api.get(`/task/${taskId}/status`);
    state = status.state;
    renderFacts(status);
    await Promise.all([renderActions(), renderRuns(status), renderDeps()]);
    replace(problem);
  }

  poller = poll(refresh, () => (RESOLVED.has(state) ? 10000 : 2000), (error) => {
    if (task === null) replace(facts);
    replace(problem, message("error", error.status === 404 ? `There is no task ${taskId}.`
      : `The task could not be read: ${error.summary || error.message}`));
  });
  return poller;
}
